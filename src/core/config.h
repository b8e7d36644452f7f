/* The run configuration: the structs, defaults, parser and printer are public
 * (dtrain/config.h: every key, where values come from, the error rules). Parsing is
 * table-driven (config.c): one table lists every key with its type and field, so the parser,
 * the override path, the printer and the error messages can never disagree. This adds what
 * only the library uses.
 */
#ifndef DT_CORE_CONFIG_H
#define DT_CORE_CONFIG_H

#include "core/dtype.h"
#include "core/status.h"
#include "dtrain/config.h"

/* The matmul operand type of a precision: DT_F32, DT_BF16 or DT_F16. */
dt_dtype dt_precision_mm_type(dt_precision p);
/* The model checks of dt_config_validate alone, for a shape read from a file (`origin` names
 * it): n_head 0 or n_embd % n_head != 0 there is an error, not a division by zero. */
dt_status dt_config_validate_model(const dt_model_config *m, const char *origin);

#endif

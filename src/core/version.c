/* The version of the linked library. See dtrain/version.h (generated from CMake's project()).
 * No state; safe from any thread.
 */
#include "dtrain/version.h"

const char *dt_version(void) { return DTRAIN_VERSION; }

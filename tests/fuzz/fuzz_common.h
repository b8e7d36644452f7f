/* Shared by the libFuzzer targets (tests/fuzz/fuzz_*.c): the input as a file, and the tiny
 * model the checkpoint targets load into. Test code: aborts on set-up failure. */
#ifndef DT_TESTS_FUZZ_COMMON_H
#define DT_TESTS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "core/mem.h"
#include "models/model.h"

/* A private temporary folder, made once per process. */
const char *fuzz_dir(void);
/* Writes data to path (replacing it); aborts if it cannot. */
void fuzz_write(const char *path, const void *data, size_t n);
/* GPT-2, 1 layer, 2 heads, n_embd 8, vocab 16, 8 positions: one-process, no training state. */
dt_model *fuzz_tiny_model(dt_mem **mem);

#endif

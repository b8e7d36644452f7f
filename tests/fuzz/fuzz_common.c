/* See fuzz_common.h. */
#include "fuzz_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"

const char *fuzz_dir(void) {
    static char dir[64] = "";
    if (!dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%.40s/dt_fuzz_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            abort();
        }
    }
    return dir;
}

void fuzz_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

dt_model *fuzz_tiny_model(dt_mem **mem) {
    dt_config c;
    dt_config_defaults(&c);
    c.model.arch = DT_ARCH_GPT2;
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.n_kv_head = 0;
    c.model.n_embd = 8;
    c.model.vocab_size = 16;
    c.model.max_seq_len = 8;
    dt_model_opts o = {.B = 1, .T = 8, .precision = DT_PREC_FP32};
    dt_model *g = NULL;
    if (dt_mem_init(mem) != DT_OK || dt_model_create(&c.model, &o, *mem, &g) != DT_OK) {
        fprintf(stderr, "tiny model: %s\n", dt_err_msg());
        abort();
    }
    return g;
}

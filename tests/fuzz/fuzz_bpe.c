/* libFuzzer target: a tokenizer file through dt_bpe_load, then text through the tokenizer.
 * The input's first byte picks the file's name (0: tokenizer.json or a tiktoken file, read
 * by content; 1: encoder.json, whose vocab.bpe is the part after the first NUL byte), the
 * next two give the file's length; the rest is text to encode, and the ids are decoded back,
 * which must give the text's bytes. Must never crash, hang or read out of bounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "io/bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3)
        return 0;
    bool gpt2 = data[0] & 1;
    size_t n_file = (size_t)(data[1] | data[2] << 8);
    n_file = n_file < size - 3 ? n_file : size - 3;
    const uint8_t *file = data + 3, *text = file + n_file;
    size_t n_text = size - 3 - n_file;
    char path[160], merges[160];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), gpt2 ? "encoder.json" : "tokenizer");
    snprintf(merges, sizeof merges, "%s/vocab.bpe", fuzz_dir());
    const uint8_t *nul = gpt2 ? memchr(file, 0, n_file) : NULL;
    size_t n_first = nul ? (size_t)(nul - file) : n_file;
    fuzz_write(path, file, n_first);
    fuzz_write(merges, nul ? nul + 1 : file, nul ? n_file - n_first - 1 : 0);
    dt_bpe *b = NULL;
    if (dt_bpe_load(path, &b) != DT_OK)
        return 0;
    int32_t *ids = NULL;
    int64_t n = 0, cap = 0;
    if (dt_bpe_encode(b, (const char *)text, n_text, &ids, &n, &cap) == DT_OK) {
        char *back = NULL;
        size_t len = 0;
        if (dt_bpe_decode(b, ids, n, &back, &len) == DT_OK &&
            (len != n_text || memcmp(back, text, len)))
            abort(); /* encoding then decoding must give the text back */
        free(back);
    }
    free(ids);
    dt_bpe_free(b);
    return 0;
}

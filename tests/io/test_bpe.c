/* io/bpe: the pre-tokenizers cut hand-worked cases as GPT-2's and cl100k's patterns do; a
 * tiny HuggingFace tokenizer.json (256 byte tokens written as GPT-2's byte-level characters,
 * five merges, <|endoftext|> added) encodes by its merges in rank order and decodes back to
 * the text for any bytes; files of other kinds are refused naming what is supported. (The
 * real vocabularies are checked against the npm reference tokenizers in bpe.sh.) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "io/bpe.h"

static char dir[64];

/* the pieces of s joined by '|' */
static void pieces(dt_bpe_split kind, const char *s, char *out, size_t cap) {
    size_t n = strlen(s), at = 0, k = 0;
    while (at < n && k + 2 < cap) {
        size_t end = dt_bpe_split_next(kind, (const unsigned char *)s, n, at);
        if (at)
            out[k++] = '|';
        for (size_t i = at; i < end && k + 1 < cap; i++)
            out[k++] = s[i];
        at = end;
    }
    out[k] = 0;
}

static void check_split(void) {
    static const struct {
        dt_bpe_split kind;
        const char *text, *want;
    } cases[] = {
        {DT_BPE_SPLIT_GPT2, "Hello world", "Hello| world"},
        {DT_BPE_SPLIT_GPT2, "it's they'll I'M", "it|'s| they|'ll| I|'|M"},
        {DT_BPE_SPLIT_GPT2, "a  b", "a| | b"},
        {DT_BPE_SPLIT_GPT2, "x\n\ny", "x|\n|\n|y"},
        {DT_BPE_SPLIT_GPT2, "123456 7", "123456| 7"},
        {DT_BPE_SPLIT_GPT2, "end!!  ", "end|!!|  "},
        {DT_BPE_SPLIT_GPT2, "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac",
         "caf\xc3\xa9| \xe6\x97\xa5\xe6\x9c\xac"},
        {DT_BPE_SPLIT_CL100K, "Hello world", "Hello| world"},
        {DT_BPE_SPLIT_CL100K, "HE'S they'LL", "HE|'S| they|'LL"},
        {DT_BPE_SPLIT_CL100K, "x\n\ny", "x|\n\n|y"},
        {DT_BPE_SPLIT_CL100K, "123456 7", "123|456| |7"},
        {DT_BPE_SPLIT_CL100K, "  hi", " | hi"},
        {DT_BPE_SPLIT_CL100K, "(x)", "(x|)"},
        {DT_BPE_SPLIT_CL100K, "a!!\n\nb", "a|!!\n\n|b"},
    };
    char got[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pieces(cases[i].kind, cases[i].text, got, sizeof got);
        DT_CHECK(!strcmp(got, cases[i].want), "%s split of \"%s\": \"%s\", want \"%s\"",
                 cases[i].kind == DT_BPE_SPLIT_GPT2 ? "GPT-2" : "cl100k", cases[i].text, got,
                 cases[i].want);
    }
    /* a bad UTF-8 byte is one piece of no class, never read past the end */
    const char bad[] = "ab\xff\xfe c\xe6";
    pieces(DT_BPE_SPLIT_GPT2, bad, got, sizeof got);
    DT_CHECK(!strcmp(got, "ab|\xff\xfe| c|\xe6"), "bad bytes: \"%s\"", got);
}

/* GPT-2's byte-level character of byte b, as UTF-8: printable Latin-1 as itself, the other
 * bytes from U+0100 on in byte order */
static int byte_char(int b, char *out) {
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174, cp = b;
    if (!printable) {
        cp = 256;
        for (int c = 0; c < b; c++)
            cp += !((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174);
    }
    if (cp < 128) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* a JSON string of byte b's character (escaping what JSON needs) */
static void json_char(FILE *f, int b) {
    char c[2];
    int n = byte_char(b, c);
    if (n == 1 && (c[0] == '"' || c[0] == '\\'))
        fprintf(f, "\"\\%c\"", c[0]);
    else
        fprintf(f, "\"%.*s\"", n, c);
}

static void write_tiny(const char *path) {
    FILE *f = fopen(path, "w");
    fputs("{\"added_tokens\": [{\"id\": 261, \"content\": \"<|endoftext|>\", \"special\": true}],"
          " \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
          "\"add_prefix_space\": false, \"use_regex\": true}, \"model\": {\"type\": \"BPE\", "
          "\"vocab\": {",
          f);
    for (int b = 0; b < 256; b++) {
        json_char(f, b);
        fprintf(f, ": %d, ", b);
    }
    char sp[2];
    int n = byte_char(' ', sp);
    fprintf(f,
            "\"he\": 256, \"ll\": 257, \"hell\": 258, \"hello\": 259, \"%.*sw\": 260, "
            "\"<|endoftext|>\": 261}, \"merges\": [\"h e\", \"l l\", \"he ll\", \"hell o\", "
            "\"%.*s w\"]}}",
            n, sp, n, sp);
    fclose(f);
}

static void check_tiny(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    write_tiny(path);
    dt_bpe *b = NULL;
    DT_CHECK_OK(dt_bpe_load(path, &b));
    if (!b)
        return;
    DT_CHECK(dt_bpe_vocab_size(b) == 262 && dt_bpe_eot(b) == 261, "vocab %lld, eot %d",
             (long long)dt_bpe_vocab_size(b), dt_bpe_eot(b));
    int32_t *ids = NULL;
    int64_t n = 0, cap = 0;
    DT_CHECK_OK(dt_bpe_encode(b, "hello world<|endoftext|>", 24, &ids, &n, &cap));
    /* hello: h e -> he, l l -> ll, he ll -> hell, hell o -> hello; " world": " " w -> " w";
     * the special token's text is text: < | end ... */
    const int32_t want[] = {259, 260, 'o', 'r', 'l', 'd', '<', '|', 'e', 'n',
                            'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>'};
    DT_CHECK(n == (int64_t)(sizeof want / sizeof *want) && !memcmp(ids, want, sizeof want),
             "encoded %lld ids (first %d %d %d)", (long long)n, ids ? ids[0] : -1,
             ids && n > 1 ? ids[1] : -1, ids && n > 2 ? ids[2] : -1);
    /* any bytes come back: invalid UTF-8, NULs, every byte value */
    unsigned char all[512];
    for (int i = 0; i < 512; i++)
        all[i] = (unsigned char)(i * 7 + (i >> 3));
    n = 0;
    DT_CHECK_OK(dt_bpe_encode(b, (const char *)all, sizeof all, &ids, &n, &cap));
    char *back = NULL;
    size_t len = 0;
    DT_CHECK_OK(dt_bpe_decode(b, ids, n, &back, &len));
    DT_CHECK(back && len == sizeof all && !memcmp(back, all, len), "round trip of 512 bytes");
    free(back);
    int32_t special = 261, out_of_range = 262;
    DT_CHECK_OK(dt_bpe_decode(b, &special, 1, &back, &len));
    DT_CHECK(back && !strcmp(back, "<|endoftext|>"), "the special token decodes to its text");
    free(back);
    DT_CHECK(dt_bpe_decode(b, &out_of_range, 1, &back, &len) == DT_ERR_ARG &&
                 strstr(dt_err_msg(), "262"),
             "an id past the vocabulary: %s", dt_err_msg());
    free(ids);
    dt_bpe_free(b);
}

static void check_refused(void) {
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "model WordPiece"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": "
         "{\"type\": \"ByteLevel\"}}",
         "no token for byte 0x00"},
        {"{\"model\": {\"type\": \"BPE\"}, \"pre_tokenizer\": {\"type\": \"Split\", "
         "\"pattern\": {\"Regex\": \"\\\\w+\"}}}",
         "is not one dtrain knows"},
        {"IQ== 0\nIg== 1\n", "a tiktoken rank file of 2 tokens"},
        {"\x0a\x05model", "not a tiktoken rank file"},
        {"{\"model\": ", "not valid JSON"},
    };
    char path[128];
    snprintf(path, sizeof path, "%s/bad", dir);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FILE *f = fopen(path, "w");
        fputs(bad[i].text, f);
        fclose(f);
        dt_bpe *b = NULL;
        dt_status st = dt_bpe_load(path, &b);
        DT_CHECK(st == DT_ERR_FORMAT && !b && strstr(dt_err_msg(), bad[i].want), "case %zu: %s", i,
                 dt_err_msg());
    }
    unlink(path);
}

int main(int argc, char **argv) {
    DT_TEST_BEGIN(argc, argv);
    snprintf(dir, sizeof dir, "/tmp/dtrain-bpe-XXXXXX");
    if (!mkdtemp(dir)) {
        DT_CHECK(false, "mkdtemp: %s", strerror(errno));
        return DT_TEST_END();
    }
    check_split();
    check_tiny();
    check_refused();
    char path[128];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    rmdir(dir);
    return DT_TEST_END();
}

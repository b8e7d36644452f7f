/* The pre-tokenizers of byte-level BPE: text cut into the pieces the BPE then merges within,
 * as the two regular expressions the field uses would cut it, written out by hand:
 *
 *   GPT-2 (also r50k, p50k):
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   cl100k (also Llama 3):
 *     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *     ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * A regex engine tries the alternatives in order at each position and takes the first that
 * matches, greedy quantifiers backing off only as far as the rest needs; each function below
 * is one alternative, returning the end of its match or 0. Text that is not UTF-8 is cut as
 * if each bad byte were one character of no class (like U+FFFD, which is neither L, N nor
 * space).
 */
#include "io/bpe.h"

#include <stddef.h>

#include "io/unicode_classes.h"

static bool in_ranges(const dt_unicode_range *r, int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid].first)
            hi = mid - 1;
        else if (cp > r[mid].last)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

bool dt_unicode_is_letter(uint32_t cp) {
    if (cp < 128)
        return (cp | 32) - 'a' < 26;
    return in_ranges(dt_unicode_letters, dt_unicode_letters_count, cp);
}

bool dt_unicode_is_number(uint32_t cp) {
    if (cp < 128)
        return cp - '0' < 10;
    return in_ranges(dt_unicode_numbers, dt_unicode_numbers_count, cp);
}

/* JavaScript's \s (ECMA-262 WhiteSpace and LineTerminator) */
bool dt_unicode_is_space(uint32_t cp) {
    if (cp < 128)
        return cp == ' ' || (cp >= '\t' && cp <= '\r');
    return cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

#define BAD_CP 0xFFFFFFFFu

/* the code point at s[i] and its length in bytes (a bad byte: BAD_CP, 1) */
static uint32_t decode(const unsigned char *s, size_t n, size_t i, size_t *len) {
    unsigned c = s[i];
    *len = 1;
    if (c < 0x80)
        return c;
    int extra = c >= 0xC2 && c < 0xE0   ? 1
                : c >= 0xE0 && c < 0xF0 ? 2
                : c >= 0xF0 && c < 0xF5 ? 3
                                        : -1;
    if (extra < 0 || i + (size_t)extra >= n)
        return BAD_CP;
    uint32_t cp = c & (0x3F >> extra);
    for (int k = 1; k <= extra; k++) {
        unsigned d = s[i + (size_t)k];
        if ((d & 0xC0) != 0x80)
            return BAD_CP;
        cp = cp << 6 | (d & 0x3F);
    }
    /* overlong forms, surrogates, past U+10FFFF */
    if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return BAD_CP;
    *len = (size_t)extra + 1;
    return cp;
}

typedef struct text {
    const unsigned char *s;
    size_t n;
} text;

static uint32_t cp_at(const text *t, size_t i, size_t *len) { return decode(t->s, t->n, i, len); }

static bool is_letter(uint32_t cp) { return cp != BAD_CP && dt_unicode_is_letter(cp); }
static bool is_number(uint32_t cp) { return cp != BAD_CP && dt_unicode_is_number(cp); }
static bool is_space(uint32_t cp) { return cp != BAD_CP && dt_unicode_is_space(cp); }
static bool is_other(uint32_t cp) { return !is_letter(cp) && !is_number(cp) && !is_space(cp); }
static bool is_newline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

/* the end of the run of characters of `cls` from i (i itself if none) */
static size_t run(const text *t, size_t i, bool (*cls)(uint32_t), size_t max_chars) {
    size_t len, count = 0;
    while (i < t->n && count < max_chars && cls(cp_at(t, i, &len)))
        i += len, count++;
    return i;
}

/* 's 't 're 've 'm 'll 'd, case-insensitively or not */
static size_t contraction(const text *t, size_t i, bool any_case) {
    if (t->s[i] != '\'' || i + 1 >= t->n)
        return 0;
    unsigned char a = t->s[i + 1], b = i + 2 < t->n ? t->s[i + 2] : 0;
    if (any_case)
        a = (unsigned char)(a | (a >= 'A' && a <= 'Z' ? 32 : 0)),
        b = (unsigned char)(b | (b >= 'A' && b <= 'Z' ? 32 : 0));
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return i + 3;
    return 0;
}

/* " ?CLASS+": an optional space, then at least one character of the class */
static size_t space_then(const text *t, size_t i, bool (*cls)(uint32_t)) {
    size_t j = t->s[i] == ' ' ? i + 1 : i;
    size_t end = j < t->n ? run(t, j, cls, SIZE_MAX) : j;
    if (end > j)
        return end;
    return 0;
}

/* \s+(?!\S), then \s+: the whitespace run, less its last character when a non-space follows
 * and the run has more than one */
static size_t spaces(const text *t, size_t i) {
    size_t end = run(t, i, is_space, SIZE_MAX), last = i, len;
    if (end == i)
        return 0;
    if (end == t->n)
        return end;
    for (size_t k = i; k < end; k += len) {
        cp_at(t, k, &len);
        last = k;
    }
    return last > i ? last : end;
}

static size_t gpt2_piece(const text *t, size_t i) {
    size_t e;
    if ((e = contraction(t, i, false)) || (e = space_then(t, i, is_letter)) ||
        (e = space_then(t, i, is_number)) || (e = space_then(t, i, is_other)) || (e = spaces(t, i)))
        return e;
    size_t len;
    cp_at(t, i, &len);
    return i + len;
}

static bool not_newline_letter_number(uint32_t cp) {
    return !is_newline(cp) && !is_letter(cp) && !is_number(cp);
}

/* [^\r\n\p{L}\p{N}]?\p{L}+ */
static size_t cl100k_word(const text *t, size_t i) {
    size_t len, j = i;
    uint32_t cp = cp_at(t, i, &len);
    if (!is_letter(cp) && not_newline_letter_number(cp))
        j = i + len;
    size_t end = j < t->n ? run(t, j, is_letter, SIZE_MAX) : j;
    return end > j ? end : 0;
}

/*  ?[^\s\p{L}\p{N}]+[\r\n]* */
static size_t cl100k_other(const text *t, size_t i) {
    size_t end = space_then(t, i, is_other);
    return end ? run(t, end, is_newline, SIZE_MAX) : 0;
}

/* \s*[\r\n]+: the whitespace run up to and including its last newline */
static size_t cl100k_newlines(const text *t, size_t i) {
    size_t end = run(t, i, is_space, SIZE_MAX), len, after = 0;
    for (size_t k = i; k < end; k += len)
        if (is_newline(cp_at(t, k, &len)))
            after = k + len;
    return after;
}

static size_t cl100k_piece(const text *t, size_t i) {
    size_t e;
    if ((e = contraction(t, i, true)) || (e = cl100k_word(t, i)))
        return e;
    if ((e = run(t, i, is_number, 3)) > i)
        return e;
    if ((e = cl100k_other(t, i)) || (e = cl100k_newlines(t, i)) || (e = spaces(t, i)))
        return e;
    size_t len;
    cp_at(t, i, &len);
    return i + len;
}

size_t dt_bpe_split_next(dt_bpe_split kind, const unsigned char *s, size_t n, size_t at) {
    text t = {s, n};
    return kind == DT_BPE_SPLIT_GPT2 ? gpt2_piece(&t, at) : cl100k_piece(&t, at);
}

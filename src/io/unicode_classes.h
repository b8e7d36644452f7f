/* The Unicode classes byte-level BPE pre-tokenizers test: letters (general category L),
 * numbers (N) and white space (as JavaScript's and the HuggingFace tokenizers' regex \s). The
 * L and N ranges are generated (scripts/gen_unicode_classes.py). */
#ifndef DT_IO_UNICODE_CLASSES_H
#define DT_IO_UNICODE_CLASSES_H

#include <stdbool.h>
#include <stdint.h>

typedef struct dt_unicode_range {
    uint32_t first, last;
} dt_unicode_range;

extern const dt_unicode_range dt_unicode_letters[], dt_unicode_numbers[];
extern const int dt_unicode_letters_count, dt_unicode_numbers_count;

bool dt_unicode_is_letter(uint32_t cp);
bool dt_unicode_is_number(uint32_t cp);
bool dt_unicode_is_space(uint32_t cp);

#endif

/* Small string tests every layer needs. */
#ifndef DT_CORE_TEXT_H
#define DT_CORE_TEXT_H

#include <stdbool.h>
#include <string.h>

/* Whether s ends with suffix ("" ends every string). */
static inline bool dt_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

#endif

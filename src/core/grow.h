/* Room for one more element at the end of a grow-by-doubling array. */
#ifndef DT_CORE_GROW_H
#define DT_CORE_GROW_H

#include <stdlib.h>

/* The array p holds n elements of elem bytes in room for *cap. Returns p when there is room
 * for one more; else p moved to twice the room (`first` when empty) with *cap updated; NULL
 * when out of memory, p and *cap untouched (the caller still owns p). */
static inline void *dt_grow(void *p, int *cap, int n, size_t elem, int first) {
    if (n < *cap)
        return p;
    int grown = *cap ? 2 * *cap : first;
    void *q = realloc(p, (size_t)grown * elem);
    if (q)
        *cap = grown;
    return q;
}

#endif

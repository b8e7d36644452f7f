/* DT_API marks the functions of dtrain's public headers: libdtrain.so is built with hidden
 * visibility, so these are the only symbols it exports (the static library keeps every
 * symbol, for dtrain's own tests and tools). No state.
 */
#ifndef DTRAIN_EXPORT_H
#define DTRAIN_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define DT_API __attribute__((visibility("default")))
#else
#define DT_API
#endif

#endif

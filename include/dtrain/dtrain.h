/* dtrain's public C API: the one header a program includes.
 *
 *   #include <dtrain/dtrain.h>     cc app.c $(pkg-config --cflags --libs dtrain)
 *
 *   dtrain/version.h   DTRAIN_VERSION (the headers), dt_version() (the linked library)
 *   dtrain/status.h    dt_status, dt_err_msg(): the last error of this thread
 *   dtrain/config.h    the config structs, their defaults, the file parser and printer
 *   dtrain/dist.h      dt_dist_init/finalize: the world of ranks (mpirun, srun or one process)
 *   dtrain/booster.h   the Booster: boost a model, step, evaluate, checkpoint, export, sample
 *   dtrain/mem.h       memory figures of a run
 *
 * Ownership and thread-safety are stated at the top of each of these headers. Handles
 * (dt_comm, dt_booster, dt_mem, dt_model) are opaque; structs are plain values.
 */
#ifndef DTRAIN_DTRAIN_H
#define DTRAIN_DTRAIN_H

#include "dtrain/booster.h"
#include "dtrain/config.h"
#include "dtrain/dist.h"
#include "dtrain/export.h"
#include "dtrain/mem.h"
#include "dtrain/status.h"
#include "dtrain/version.h"

#endif

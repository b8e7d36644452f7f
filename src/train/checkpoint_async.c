/* Async checkpoint save: the rank's part of the state is copied to a staging buffer, and a
 * background thread (pthreads) writes and checksums it while training goes on. See
 * checkpoint.h.
 *
 * Threads: the training thread owns the job and makes every MPI call (MPI is initialised
 * FUNNELED: only the main thread may call it); the writer thread touches only the staging
 * buffer, its io buffer, the read-only parameter table and the partial folder's files, and
 * reports through `ended` (under mu) and the status and message it leaves in the job (its
 * error text is thread-local, so it is copied there). The accountant is used by the training
 * thread alone.
 */
#include "train/checkpoint.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dt_ckpt_async {
    char dir[DT_CKPT_TMP_LEN], tmp[DT_CKPT_TMP_LEN];
    const dt_model *g; /* borrowed */
    dt_mem *mem;     /* borrowed */
    int rank;
    dt_engine_view staged; /* the view's ranges, pointing into staging */
    float *staging;
    void *io;
    dt_train_state state; /* meta's copies */
    dt_ckpt_meta meta;
    char *layout, *config;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    bool ended;        /* under mu */
    dt_status written; /* the thread's outcome, read after `ended` */
    char msg[1024];
};

static void *writer_main(void *arg) {
    dt_ckpt_async *j = arg;
    dt_status st = dt_ckpt_save_rank(j->tmp, j->rank, j->g, &j->staged, j->io, DT_CKPT_IO_BYTES);
    if (st != DT_OK)
        snprintf(j->msg, sizeof j->msg, "%s", dt_err_msg());
    pthread_mutex_lock(&j->mu);
    j->written = st;
    j->ended = true;
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

static void job_free(dt_ckpt_async *j) {
    if (!j)
        return;
    if (j->started)
        pthread_join(j->thread, NULL);
    pthread_mutex_destroy(&j->mu);
    dt_mem_release(j->mem, j->io);
    dt_mem_release(j->mem, j->staging);
    free(j->layout);
    free(j->config);
    free(j);
}

static char *dup_or_null(const char *s, bool *oom) {
    char *d = s ? strdup(s) : NULL;
    *oom = *oom || (s && !d);
    return d;
}

/* The copy the thread writes from: weights, then m, then v of the view's ranges. Offloaded
 * moments are read from their file straight into it. */
static dt_status stage(dt_ckpt_async *j, const dt_engine_view *v) {
    int64_t nw = v->w_count, nm = v->m_count, ne = v->ema ? nm : 0;
    size_t bytes = (size_t)(nw + 2 * nm + ne) * sizeof(float);
    DT_TRY(dt_mem_alloc(j->mem, DT_MEM_TEMP, "ckpt.staging", bytes, (void **)&j->staging));
    DT_TRY(dt_mem_alloc(j->mem, DT_MEM_TEMP, "ckpt.io", DT_CKPT_IO_BYTES, &j->io));
    j->staged = (dt_engine_view){.w_first = v->w_first,
                                 .w_count = nw,
                                 .m_first = v->m_first,
                                 .m_count = nm,
                                 .w = j->staging,
                                 .m = j->staging + nw,
                                 .v = j->staging + nw + nm,
                                 .ema = v->ema ? j->staging + nw + 2 * nm : NULL};
    memcpy(j->staged.w, v->w, (size_t)nw * sizeof(float));
    if (v->ema)
        memcpy(j->staged.ema, v->ema, (size_t)ne * sizeof(float));
    if (v->m) {
        memcpy(j->staged.m, v->m, (size_t)nm * sizeof(float));
        memcpy(j->staged.v, v->v, (size_t)nm * sizeof(float));
        return DT_OK;
    }
    DT_TRY(dt_engine_view_read_moment(v, 0, v->m_first, nm, j->staged.m));
    return dt_engine_view_read_moment(v, 1, v->m_first, nm, j->staged.v);
}

dt_status dt_ckpt_async_start(const char *dir, dt_comm *world, const dt_model *g,
                              const dt_engine_view *v, const dt_ckpt_meta *meta, dt_mem *mem,
                              dt_ckpt_async **out) {
    *out = NULL;
    dt_ckpt_async *j = calloc(1, sizeof *j);
    if (!j)
        return dt_comm_agree(world, dt_err_set(DT_ERR_OOM, "checkpoint: out of memory"));
    pthread_mutex_init(&j->mu, NULL);
    j->g = g;
    j->mem = mem;
    j->rank = world->rank;
    j->state = *meta->state;
    bool oom = false;
    j->layout = dup_or_null(meta->layout, &oom);
    j->config = dup_or_null(meta->config, &oom);
    j->meta = (dt_ckpt_meta){.state = &j->state,
                             .adam_steps = meta->adam_steps,
                             .layout = j->layout,
                             .config = j->config,
                             .ema = meta->ema};
    dt_status st = oom ? dt_err_set(DT_ERR_OOM, "checkpoint: out of memory") : DT_OK;
    if (st == DT_OK && snprintf(j->dir, sizeof j->dir, "%s", dir) >= (int)sizeof j->dir)
        st = dt_err_set(DT_ERR_ARG, "checkpoint.dir %s: path too long", dir);
    if (st == DT_OK)
        st = stage(j, v);
    /* the copy is made before the folder exists: a failure here leaves nothing to remove */
    st = dt_comm_agree(world, st);
    if (st == DT_OK)
        st = dt_ckpt_save_begin(dir, world, j->state.step, j->tmp, sizeof j->tmp);
    if (st != DT_OK) {
        job_free(j);
        return st;
    }
    int rc = pthread_create(&j->thread, NULL, writer_main, j);
    if (rc != 0) { /* phase 3 will report it, agreed, and remove the folder */
        j->written = dt_err_set(DT_ERR_OOM, "checkpoint: cannot start the writer thread: %s",
                                strerror(rc));
        snprintf(j->msg, sizeof j->msg, "%s", dt_err_msg());
        j->ended = true;
    }
    j->started = rc == 0;
    *out = j;
    return DT_OK;
}

static bool has_ended(dt_ckpt_async *j) {
    pthread_mutex_lock(&j->mu);
    bool e = j->ended;
    pthread_mutex_unlock(&j->mu);
    return e;
}

dt_status dt_ckpt_async_poll(dt_ckpt_async **job, dt_comm *world, bool wait, int64_t *step) {
    dt_ckpt_async *j = *job;
    *step = -1;
    if (!j)
        return DT_OK;
    /* [0]: some rank is still writing; [1]: some rank's write failed */
    int32_t flags[2] = {0, 0};
    if (!wait) {
        bool ended = has_ended(j);
        flags[0] = !ended;
        flags[1] = ended && j->written != DT_OK;
    }
    DT_TRY(dt_comm_allreduce_max_i32(world, flags, 2));
    if (flags[0] && !flags[1])
        return DT_OK; /* not yet: training goes on */
    if (j->started)
        pthread_join(j->thread, NULL);
    j->started = false;
    dt_status written = j->written;
    if (written != DT_OK)
        dt_err_set(written, "checkpoint %s/step-%lld failed in the background: %s", j->dir,
                   (long long)j->state.step, j->msg);
    dt_status st = dt_ckpt_save_finish(j->dir, j->tmp, world, j->g, &j->meta, written);
    if (st == DT_OK)
        *step = j->state.step;
    job_free(j);
    *job = NULL;
    return st;
}

void dt_ckpt_async_abandon(dt_ckpt_async *job, int rank) {
    if (!job)
        return;
    if (job->started)
        pthread_join(job->thread, NULL);
    job->started = false;
    if (rank == 0)
        dt_ckpt_remove_folder(job->tmp);
    job_free(job);
}

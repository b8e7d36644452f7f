/* Sharded checkpoints: every rank writes the part it owns, rank 0 the manifest; each rank
 * reads back only the slices its own layout needs. See checkpoint.h. */
#define _GNU_SOURCE /* renameat2 */
#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/atomic.h"
#include "io/crc32c.h"
#include "io/safetensors.h"
#include "train/checkpoint_impl.h"

#define PATH_LEN 4096
#define MANIFEST_MAX ((size_t)256 << 20)

static const char *const split_names[DT_SHARD_KIND_COUNT] = {"none", "rows", "cols", "qkv"};

static void rank_file(char *out, size_t n, const char *folder, int rank, const char *ext) {
    snprintf(out, n, "%s/rank-%05d.%s", folder, rank, ext);
}

/* ---- save ------------------------------------------------------------------------------- */

/* The slices of one rank: for every tensor of its local table that its saving range
 * overlaps (tied copies and, off tp rank 0, replicated tensors excluded), the local
 * elements [a, b) of the tensor, as three 1-D tensors: weights, exp_avg, exp_avg_sq, and a
 * fourth, ema, where the run keeps the weights' average. */
typedef struct slice {
    const dt_param *p;
    int64_t a, b;
    int64_t at[4]; /* byte offsets in the file */
} slice;

static int kinds_of(const dt_engine_view *v) { return v->ema ? 4 : 3; }

static int collect_slices(const dt_model *g, const dt_engine_view *v, slice *out) {
    int n = 0;
    int64_t lo = v->w_first, hi = v->w_first + v->w_count;
    for (int i = 0; i < dt_model_n_params(g); i++) {
        const dt_param *p = dt_model_param(g, i);
        if (dt_model_is_copy(g, i) ||
            (p->shard.kind == DT_SHARD_NONE && dt_model_tp(g)->rank != 0))
            continue;
        int64_t a = lo > p->offset ? lo : p->offset;
        int64_t b = hi < p->offset + p->numel ? hi : p->offset + p->numel;
        if (a < b)
            out[n++] = (slice){.p = p, .a = a - p->offset, .b = b - p->offset};
    }
    return n;
}

static cJSON *slice_json(const slice *s, int kinds) {
    cJSON *j = cJSON_CreateObject();
    int64_t rows, cols;
    dt_shard_local_shape(&s->p->shard, &rows, &cols);
    cJSON_AddStringToObject(j, "tensor", s->p->name);
    cJSON_AddStringToObject(j, "split", split_names[s->p->shard.kind]);
    cJSON_AddNumberToObject(j, "parts", s->p->shard.parts);
    cJSON_AddNumberToObject(j, "index", s->p->shard.index);
    cJSON_AddNumberToObject(j, "rows", (double)rows);
    cJSON_AddNumberToObject(j, "cols", (double)cols);
    cJSON_AddNumberToObject(j, "first", (double)s->a);
    cJSON_AddNumberToObject(j, "count", (double)(s->b - s->a));
    cJSON *o = cJSON_AddArrayToObject(j, "offsets");
    for (int k = 0; k < kinds; k++)
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)s->at[k]));
    return j;
}

/* Offloaded moments have no memory to point the writer at: each of their tensors streams
 * from the optimizer's file through the io buffer, io_len bytes at a time. */
typedef struct moment_source {
    const dt_engine_view *v;
    int which;
    int64_t first, count; /* the tensor's local-arena elements */
    float *io;
    int64_t io_floats;
} moment_source;

static dt_status read_moment_piece(void *ctx, int64_t offset, const void **data, size_t *len) {
    moment_source *s = ctx;
    int64_t done = offset / (int64_t)sizeof(float), e = s->first + done;
    int64_t n = s->count - done < s->io_floats ? s->count - done : s->io_floats;
    DT_TRY(dt_engine_view_read_moment(s->v, s->which, e, n, s->io));
    *data = s->io;
    *len = (size_t)n * sizeof(float);
    return DT_OK;
}

/* the tensors of every slice: from the view's memory, or streamed (moments offloaded) */
static dt_status add_slices(dt_st_writer *w, const dt_engine_view *v, const slice *sl, int n,
                            char (*names)[3][128], moment_source *ms, void *io, size_t io_len) {
    const float *src[4] = {v->w - v->w_first, v->m ? v->m - v->m_first : NULL,
                           v->v ? v->v - v->m_first : NULL, v->ema ? v->ema - v->m_first : NULL};
    for (int i = 0; i < n; i++) {
        int64_t count = sl[i].b - sl[i].a, at = sl[i].p->offset + sl[i].a;
        snprintf(names[i][0], sizeof names[i][0], "exp_avg.%s", sl[i].p->name);
        snprintf(names[i][1], sizeof names[i][1], "exp_avg_sq.%s", sl[i].p->name);
        snprintf(names[i][2], sizeof names[i][2], "ema.%s", sl[i].p->name);
        const char *nm[4] = {sl[i].p->name, names[i][0], names[i][1], names[i][2]};
        for (int k = 0; k < kinds_of(v); k++) {
            if (src[k]) {
                DT_TRY(dt_st_writer_add(w, nm[k], DT_ST_F32, 1, &count, src[k] + at));
                continue;
            }
            moment_source *m = &ms[2 * i + k - 1];
            *m = (moment_source){.v = v, .which = k - 1, .first = at, .count = count, .io = io,
                                 .io_floats = (int64_t)(io_len / sizeof(float))};
            DT_TRY(dt_st_writer_add_source(w, nm[k], DT_ST_F32, 1, &count, read_moment_piece, m));
        }
    }
    return DT_OK;
}

dt_status dt_ckpt_save_rank(const char *tmp, int rank, const dt_model *g, const dt_engine_view *v,
                            void *io, size_t io_len) {
    size_t np = (size_t)dt_model_n_params(g) + 1;
    slice *sl = malloc(np * sizeof *sl);
    char(*names)[3][128] = malloc(np * sizeof *names);
    moment_source *ms = malloc(2 * np * sizeof *ms);
    dt_st_writer *w = NULL;
    cJSON *desc = NULL;
    dt_status st = !sl || !names || !ms ? dt_err_set(DT_ERR_OOM, "checkpoint: out of memory")
                 : io_len < sizeof(float)  ? dt_err_set(DT_ERR_ARG, "checkpoint: no io buffer")
                                           : dt_st_writer_init(&w);
    int n = st == DT_OK ? collect_slices(g, v, sl) : 0;
    if (st == DT_OK)
        st = add_slices(w, v, sl, n, names, ms, io, io_len);
    char path[2 * PATH_LEN];
    int64_t data = 0;
    if (st == DT_OK)
        st = dt_st_writer_set_metadata(w, "format", "dtrain-shard");
    if (st == DT_OK)
        st = dt_st_writer_data_start(w, &data);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < kinds_of(v); k++) {
            sl[i].at[k] = data;
            data += (sl[i].b - sl[i].a) * (int64_t)sizeof(float);
        }
    rank_file(path, sizeof path, tmp, rank, "safetensors");
    if (st == DT_OK)
        st = dt_st_writer_commit(w, path);
    uint32_t crc = 0;
    uint64_t size = 0;
    if (st == DT_OK)
        st = dt_crc32c_file(path, io, io_len, &crc, &size);
    if (st == DT_OK && (int64_t)size != data)
        st = dt_err_set(DT_ERR_IO, "%s: wrote %llu bytes, expected %lld", path,
                        (unsigned long long)size, (long long)data);
    if (st == DT_OK) {
        desc = cJSON_CreateObject();
        char file[64], hex[16];
        snprintf(file, sizeof file, "rank-%05d.safetensors", rank);
        snprintf(hex, sizeof hex, "%08x", crc);
        cJSON_AddStringToObject(desc, "file", file);
        cJSON_AddNumberToObject(desc, "bytes", (double)size);
        cJSON_AddStringToObject(desc, "crc32c", hex);
        cJSON *arr = cJSON_AddArrayToObject(desc, "slices");
        for (int i = 0; i < n; i++)
            cJSON_AddItemToArray(arr, slice_json(&sl[i], kinds_of(v)));
        char *text = cJSON_PrintUnformatted(desc);
        rank_file(path, sizeof path, tmp, rank, "json");
        st = text ? dt_atomic_write_file(path, text, strlen(text))
                  : dt_err_set(DT_ERR_OOM, "checkpoint: out of memory");
        free(text);
    }
    cJSON_Delete(desc);
    dt_st_writer_free(w);
    free(ms);
    free(names);
    free(sl);
    return st;
}

/* arch, the model's named sizes (dt_model_sizes), then the config's other shape fields */
static cJSON *model_json(const dt_model *g) {
    const dt_model_config *c = dt_model_cfg(g);
    dt_model_size sz[DT_MODEL_MAX_SIZES];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "arch", dt_arch_name(c->arch));
    for (int i = 0, n = dt_model_sizes(g, sz); i < n; i++)
        cJSON_AddNumberToObject(j, sz[i].key, (double)sz[i].value);
    cJSON_AddNumberToObject(j, "max_seq_len", c->max_seq_len);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(j, "norm_eps", c->norm_eps);
    if (c->arch == DT_ARCH_DIT)
        cJSON_AddNumberToObject(j, "timestep_shift", c->timestep_shift);
    return j;
}

/* rank 0: the manifest from the ranks' descriptions (which are then removed), and its
 * checksum file. */
static dt_status write_manifest(const char *tmp, int world, const dt_model *g,
                                const dt_ckpt_meta *meta) {
    cJSON *j = dt_ckpt_state_json(meta->state, meta->adam_steps);
    if (!j)
        return dt_err_set(DT_ERR_OOM, "checkpoint: out of memory");
    dt_status st = DT_OK;
    cJSON_AddStringToObject(j, "format", "dtrain-sharded");
    cJSON_AddNumberToObject(j, "version", 1);
    cJSON_AddItemToObject(j, "model", model_json(g));
    if (meta->ema)
        cJSON_AddTrueToObject(j, "ema");
    if (meta->layout)
        cJSON_AddStringToObject(j, "layout", meta->layout);
    if (meta->config)
        cJSON_AddStringToObject(j, "config", meta->config);
    cJSON *ts = cJSON_AddArrayToObject(j, "tensors");
    for (int i = 0; i < dt_model_n_full_params(g); i++) {
        const dt_param *p = dt_model_full_param(g, i);
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "name", p->name);
        cJSON_AddStringToObject(t, "dtype", "F32");
        cJSON *sh = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < p->ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)p->shape[d]));
        cJSON_AddItemToArray(ts, t);
    }
    cJSON *files = cJSON_AddArrayToObject(j, "files");
    char path[2 * PATH_LEN];
    for (int r = 0; r < world && st == DT_OK; r++) {
        char *text = NULL;
        rank_file(path, sizeof path, tmp, r, "json");
        st = dt_read_text(path, "checkpoint rank description", MANIFEST_MAX, &text);
        cJSON *d = st == DT_OK ? cJSON_Parse(text) : NULL;
        free(text);
        if (st == DT_OK && !d)
            st = dt_err_set(DT_ERR_FORMAT, "%s: not JSON", path);
        if (d)
            cJSON_AddItemToArray(files, d);
    }
    char *text = st == DT_OK ? cJSON_Print(j) : NULL;
    cJSON_Delete(j);
    if (st == DT_OK && !text)
        st = dt_err_set(DT_ERR_OOM, "checkpoint: out of memory");
    if (st == DT_OK) {
        snprintf(path, sizeof path, "%s/manifest.json", tmp);
        st = dt_atomic_write_file(path, text, strlen(text));
    }
    if (st == DT_OK) {
        char hex[16];
        snprintf(hex, sizeof hex, "%08x\n", dt_crc32c(0, text, strlen(text)));
        snprintf(path, sizeof path, "%s/manifest.crc32c", tmp);
        st = dt_atomic_write_file(path, hex, strlen(hex));
    }
    free(text);
    for (int r = 0; r < world && st == DT_OK; r++) {
        rank_file(path, sizeof path, tmp, r, "json");
        unlink(path);
    }
    return st;
}

static dt_status fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) {
        dt_status st = dt_err_set(DT_ERR_IO, "checkpoint: cannot sync folder %s: %s", dir,
                                  strerror(errno));
        if (fd >= 0)
            close(fd);
        return st;
    }
    close(fd);
    return DT_OK;
}

/* tmp -> final; an existing final (the same step saved again) is swapped out atomically
 * first and removed after, so step-N is at every moment either the old or the new one. */
/* A failed publish, with the other runs writing into the same folder when there are any:
 * two runs given one checkpoint.dir race for each step-N. */
static dt_status publish_error(const char *dir, const char *tmp, const char *final,
                               const char *what, int err) {
    char others[1024];
    dt_ckpt_other_writers(dir, tmp, others, sizeof others);
    bool raced = err == ENOTEMPTY || err == EEXIST || err == ENOENT;
    return dt_err_set(DT_ERR_IO, "checkpoint: cannot %s %s: %s%s%s%s", what, final, strerror(err),
                      others[0] ? "; another run is writing into checkpoint.dir: " : "",
                      others[0] ? others : "",
                      !others[0] && raced ? " (did another run write this step into "
                                            "checkpoint.dir meanwhile? give each run its own)"
                                          : "");
}

static dt_status publish(const char *dir, const char *tmp, const char *final) {
    struct stat sb;
    if (stat(final, &sb) == 0) {
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) != 0)
            return publish_error(dir, tmp, final, "replace", errno);
        dt_ckpt_remove_folder(tmp); /* now the old one */
    } else if (rename(tmp, final) != 0) {
        return publish_error(dir, tmp, final, "publish", errno);
    }
    return fsync_dir(dir);
}

dt_status dt_ckpt_save_begin(const char *dir, dt_comm *world, int64_t step, char *tmp,
                            size_t tmp_len) {
    dt_status st = DT_OK;
    if (world->rank == 0) {
        /* a name of this writer's own: two runs given one folder never share a partial one */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int len = dt_ckpt_partial_name(tmp, tmp_len, dir, (long long)step, (int)getpid(),
                                       (unsigned long)(ts.tv_nsec ^ ts.tv_sec));
        st = len < 0 || (size_t)len >= tmp_len
                 ? dt_err_set(DT_ERR_ARG, "checkpoint.dir %s: path too long", dir)
                 : dt_mkdirs(dir);
        if (st == DT_OK && mkdir(tmp, 0777) != 0)
            st = dt_err_set(DT_ERR_IO, "checkpoint: cannot create %s: %s", tmp,
                            strerror(errno));
    }
    DT_TRY(dt_comm_agree(world, st));
    return dt_comm_broadcast(world, tmp, (int64_t)tmp_len, 0);
}

dt_status dt_ckpt_save_finish(const char *dir, const char *tmp, dt_comm *world,
                              const dt_model *g, const dt_ckpt_meta *meta, dt_status written) {
    char final[PATH_LEN];
    snprintf(final, sizeof final, "%s/step-%lld", dir, (long long)meta->state->step);
    dt_status st = dt_comm_agree(world, written);
    if (st == DT_OK && world->rank == 0) {
        st = write_manifest(tmp, world->size, g, meta);
        if (st == DT_OK)
            st = publish(dir, tmp, final);
    }
    st = dt_comm_agree(world, st);
    if (st != DT_OK && world->rank == 0)
        dt_ckpt_remove_folder(tmp); /* never a folder resume could take */
    return st;
}

dt_status dt_ckpt_save_sharded(const char *dir, dt_comm *world, const dt_model *g,
                               const dt_engine_view *v, const dt_ckpt_meta *meta, void *io,
                               size_t io_len) {
    char tmp[DT_CKPT_TMP_LEN];
    DT_TRY(dt_ckpt_save_begin(dir, world, meta->state->step, tmp, sizeof tmp));
    dt_status st = dt_ckpt_save_rank(tmp, world->rank, g, v, io, io_len);
    return dt_ckpt_save_finish(dir, tmp, world, g, meta, st);
}

/* Sharded checkpoints: verify (checksums) and load into any layout (each rank reads the
 * slices it needs by pread). See checkpoint.h. */
#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "io/atomic.h"
#include "io/crc32c.h"
#include "train/checkpoint_impl.h"
#include "train/finite.h"

#define PATH_LEN 4096
#define MANIFEST_MAX ((size_t)256 << 20)

dt_status dt_ckpt_folder_kind(const char *folder, bool *sharded) {
    char path[PATH_LEN + 32];
    struct stat sb;
    *sharded = dt_ckpt_is_sharded(folder);
    snprintf(path, sizeof path, "%s/state.json", folder);
    if (*sharded || stat(path, &sb) == 0)
        return DT_OK;
    snprintf(path, sizeof path, "%s/rank-00000.safetensors", folder);
    if (stat(path, &sb) == 0)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s: a sharded checkpoint's rank files without its "
                          "manifest.json: not a complete checkpoint (its save did not finish, "
                          "or the manifest was removed)",
                          folder);
    DIR *d = opendir(folder);
    long long step = -1;
    for (struct dirent *e; d && (e = readdir(d));)
        if (dt_ckpt_folder_step(e->d_name) > step)
            step = dt_ckpt_folder_step(e->d_name);
    if (d)
        closedir(d);
    if (step >= 0)
        return dt_err_set(DT_ERR_ARG,
                          "%s is a checkpoint.dir, not a step folder: give one of "
                          "its step folders (the newest is %s/step-%lld), or resume=auto",
                          folder, folder, step);
    return dt_err_set(DT_ERR_ARG,
                      "%s is not a checkpoint step folder: it has neither "
                      "manifest.json (sharded) nor state.json (whole)",
                      folder);
}

bool dt_ckpt_is_sharded(const char *folder) {
    char path[PATH_LEN + 32];
    struct stat sb;
    snprintf(path, sizeof path, "%s/manifest.json", folder);
    return stat(path, &sb) == 0;
}

/* The manifest's "format" and "version" are the ones this build writes (checkpoint_shard.c):
 * the checksum guards against damage, not against a file meant for another reader. */
static dt_status check_format(const cJSON *man, const char *folder) {
    const char *fmt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(man, "format"));
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(man, "version");
    if (!fmt || strcmp(fmt, "dtrain-sharded") != 0)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s/manifest.json: \"format\" is %s%s%s, not "
                          "\"dtrain-sharded\" (the sharded checkpoints this build writes)",
                          folder, fmt ? "\"" : "", fmt ? fmt : "missing", fmt ? "\"" : "");
    if (!cJSON_IsNumber(v) || v->valuedouble != 1)
        return dt_err_set(DT_ERR_FORMAT,
                          "%s/manifest.json: \"version\" is %s%g; this build "
                          "reads version 1",
                          folder, cJSON_IsNumber(v) ? "" : "missing, ",
                          cJSON_IsNumber(v) ? v->valuedouble : 0.0);
    return DT_OK;
}

/* The manifest, parsed, after its text matched manifest.crc32c. */
static dt_status read_manifest(const char *folder, cJSON **out) {
    char path[PATH_LEN + 32], *text = NULL, *sum = NULL;
    *out = NULL;
    snprintf(path, sizeof path, "%s/manifest.json", folder);
    DT_TRY(dt_read_text(path, "checkpoint manifest", MANIFEST_MAX, &text));
    snprintf(path, sizeof path, "%s/manifest.crc32c", folder);
    dt_status st = dt_read_text(path, "checkpoint manifest checksum", 64, &sum);
    if (st == DT_OK) {
        unsigned long want = strtoul(sum, NULL, 16);
        uint32_t got = dt_crc32c(0, text, strlen(text));
        if (got != (uint32_t)want)
            st = dt_err_set(DT_ERR_FORMAT, "%s/manifest.json: checksum %08x, expected %08lx "
                            "(the manifest was changed or damaged)", folder, got, want);
    }
    if (st == DT_OK) {
        *out = cJSON_Parse(text);
        if (!cJSON_IsObject(*out))
            st = dt_err_set(DT_ERR_FORMAT, "%s/manifest.json: not a JSON object", folder);
        else
            st = check_format(*out, folder);
    }
    free(text);
    free(sum);
    if (st != DT_OK) {
        cJSON_Delete(*out);
        *out = NULL;
    }
    return st;
}

static const cJSON *files_of(const cJSON *man, const char *folder, dt_status *st) {
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(man, "files");
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) < 1)
        *st = dt_err_set(DT_ERR_FORMAT, "%s/manifest.json: \"files\" is missing", folder);
    return files;
}

/* a file entry's name (a plain name inside the folder), size and checksum */
static dt_status file_entry(const cJSON *f, const char *folder, const char **name,
                            double *bytes, uint32_t *crc) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(f, "file");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(f, "bytes");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(f, "crc32c");
    if (!cJSON_IsString(n) || strchr(n->valuestring, '/') || !n->valuestring[0] ||
        !cJSON_IsNumber(b) || !(b->valuedouble >= 0) || !cJSON_IsString(c))
        return dt_err_set(DT_ERR_FORMAT, "%s/manifest.json: a file entry lacks a plain "
                          "\"file\" name, \"bytes\" or \"crc32c\"", folder);
    *name = n->valuestring;
    *bytes = b->valuedouble;
    *crc = (uint32_t)strtoul(c->valuestring, NULL, 16);
    return DT_OK;
}

dt_status dt_ckpt_verify(const char *folder, dt_comm *world, void *io, size_t io_len) {
    cJSON *man = NULL;
    dt_status st = read_manifest(folder, &man);
    if (st == DT_OK) { /* the state too: resume=auto skips a folder whose state cannot load */
        char path[PATH_LEN + 32];
        dt_train_state s = {0};
        int adam_steps;
        snprintf(path, sizeof path, "%s/manifest.json", folder);
        st = dt_ckpt_state_from_json(man, path, &s, &adam_steps);
        if (st == DT_OK)
            st = dt_ckpt_check_step(folder, s.step);
    }
    const cJSON *files = st == DT_OK ? files_of(man, folder, &st) : NULL;
    for (int i = 0; st == DT_OK && i < cJSON_GetArraySize(files); i++) {
        const char *name;
        double bytes;
        uint32_t want, crc;
        uint64_t size;
        char path[PATH_LEN + 300];
        struct stat sb;
        st = file_entry(cJSON_GetArrayItem(files, i), folder, &name, &bytes, &want);
        if (st != DT_OK)
            break;
        snprintf(path, sizeof path, "%s/%s", folder, name);
        if (stat(path, &sb) != 0) {
            st = dt_err_set(DT_ERR_IO, "%s: missing (%s)", path, strerror(errno));
        } else if ((double)sb.st_size != bytes) {
            st = dt_err_set(DT_ERR_FORMAT, "%s: %lld bytes, the manifest says %.0f (truncated "
                            "or damaged)", path, (long long)sb.st_size, bytes);
        } else if (i % world->size == world->rank) {
            st = dt_crc32c_file(path, io, io_len, &crc, &size);
            if (st == DT_OK && crc != want)
                st = dt_err_set(DT_ERR_FORMAT, "%s: checksum %08x, the manifest says %08x "
                                "(damaged)", path, crc, want);
        }
    }
    cJSON_Delete(man);
    return dt_comm_agree(world, st);
}

/* ---- load ------------------------------------------------------------------------------- */

typedef struct piece {
    int file;
    dt_shard spec; /* kind, parts, index, full shape (from the model) */
    int64_t rows, cols, first, count, at[4]; /* weights, exp_avg, exp_avg_sq, (ema) */
} piece;

typedef struct loader {
    const char *folder;
    const dt_model *g;
    int kinds; /* tensors a slice holds: 3, or 4 with the weights' average ("ema": true) */
    int n_files, n_pieces;
    int *fd;
    double *bytes;
    char **names;
    piece *pieces;
    int *by_tensor; /* [n_full + 1]: pieces of full tensor t are by_tensor[t]..[t+1] */
} loader;

static int64_t num(const cJSON *o, const char *key, bool *ok) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble < 9.0e15) ||
        x->valuedouble != (double)(int64_t)x->valuedouble) {
        *ok = false;
        return 0;
    }
    return (int64_t)x->valuedouble;
}

static int full_index(const dt_model *g, const char *name) {
    for (int i = 0; i < dt_model_n_full_params(g); i++)
        if (strcmp(dt_model_full_param(g, i)->name, name) == 0)
            return i;
    return -1;
}

/* The model in the manifest is the run's: shape fields and every tensor's global shape. */
static dt_status check_model(const cJSON *man, const char *folder, const dt_model *g) {
    const dt_model_config *c = dt_model_cfg(g);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(man, "model");
    const char *arch = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "arch"));
    if (!arch || strcmp(arch, dt_arch_name(c->arch)) != 0)
        return dt_err_set(DT_ERR_ARG, "%s: the checkpoint's model.arch is %s, the run's %s",
                          folder, arch ? arch : "missing", dt_arch_name(c->arch));
    dt_model_size mine[DT_MODEL_MAX_SIZES];
    for (int i = 0, n = dt_model_sizes(g, mine); i < n; i++) {
        bool ok = true;
        int64_t v = num(m, mine[i].key, &ok);
        if (!ok || v != mine[i].value)
            return dt_err_set(DT_ERR_ARG, "%s: the checkpoint's model.%s is %lld, the run's %lld",
                              folder, mine[i].key, ok ? (long long)v : -1LL,
                              (long long)mine[i].value);
    }
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(man, "tensors");
    if (cJSON_GetArraySize(ts) != dt_model_n_full_params(g))
        return dt_err_set(DT_ERR_ARG, "%s: the checkpoint has %d tensors, the run's model %d",
                          folder, cJSON_GetArraySize(ts), dt_model_n_full_params(g));
    for (int i = 0; i < dt_model_n_full_params(g); i++) {
        const dt_param *p = dt_model_full_param(g, i);
        const cJSON *t = cJSON_GetArrayItem(ts, i), *sh = cJSON_GetObjectItem(t, "shape");
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "name"));
        const char *dtype = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "dtype"));
        if (!dtype || strcmp(dtype, "F32") != 0)
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: tensor %d (%s) has dtype %s in the manifest; "
                              "this build writes and reads F32 shards",
                              folder, i, name ? name : "unnamed", dtype ? dtype : "missing");
        bool same = name && strcmp(name, p->name) == 0 && cJSON_GetArraySize(sh) == p->ndim;
        for (int d = 0; same && d < p->ndim; d++)
            same = cJSON_GetArrayItem(sh, d)->valuedouble == (double)p->shape[d];
        if (!same)
            return dt_err_set(DT_ERR_ARG, "%s: tensor %d is %s in the checkpoint, %s [%lld, %lld]"
                              " in the run's model", folder, i, name ? name : "unnamed",
                              p->name, (long long)p->shape[0],
                              (long long)(p->ndim > 1 ? p->shape[1] : 1));
    }
    return DT_OK;
}

/* One slice entry, checked against the model and its file's size. */
static dt_status parse_piece(loader *L, const cJSON *s, int file, piece *out, int *tensor) {
    bool ok = true;
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "tensor"));
    const char *split = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "split"));
    *tensor = name ? full_index(L->g, name) : -1;
    int kind = -1;
    for (int k = 0; split && k < DT_SHARD_KIND_COUNT; k++)
        if (strcmp(split, (const char *[]){"none", "rows", "cols", "qkv"}[k]) == 0)
            kind = k;
    if (*tensor < 0 || kind < 0)
        return dt_err_set(DT_ERR_FORMAT, "%s/%s: a slice names an unknown tensor or split "
                          "(%s, %s)", L->folder, L->names[file], name ? name : "?",
                          split ? split : "?");
    const dt_param *p = dt_model_full_param(L->g, *tensor);
    out->file = file;
    out->spec = p->shard;
    out->spec.kind = (dt_shard_kind)kind;
    int64_t parts = num(s, "parts", &ok), index = num(s, "index", &ok);
    ok = ok && parts >= 1 && parts <= (1 << 20) && index < parts; /* before the int casts */
    out->spec.parts = ok ? (int)parts : 1;
    out->spec.index = ok ? (int)index : 0;
    out->rows = num(s, "rows", &ok);
    out->cols = num(s, "cols", &ok);
    out->first = num(s, "first", &ok);
    out->count = num(s, "count", &ok);
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(s, "offsets");
    ok = ok && cJSON_GetArraySize(at) == L->kinds;
    for (int k = 0; k < L->kinds; k++) {
        const cJSON *x = cJSON_GetArrayItem(at, k);
        ok = ok && cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble < 9.0e15;
        out->at[k] = ok ? (int64_t)x->valuedouble : 0;
        ok = ok && (double)out->at[k] + 4.0 * (double)out->count <= L->bytes[file];
    }
    int64_t rows = 0, cols = 0;
    if (ok && out->spec.parts >= 1 && out->spec.index < out->spec.parts &&
        (kind != DT_SHARD_NONE || out->spec.parts == 1) &&
        (kind != DT_SHARD_COLS || p->shard.full_cols % out->spec.parts == 0) &&
        (kind != DT_SHARD_QKV || (p->shard.sec[0] % out->spec.parts == 0 &&
                                  p->shard.sec[1] % out->spec.parts == 0 &&
                                  p->shard.sec[2] % out->spec.parts == 0 &&
                                  p->shard.sec[1] >= out->spec.parts)))
        dt_shard_local_shape(&out->spec, &rows, &cols);
    if (!ok || rows != out->rows || cols != out->cols || out->count < 1 ||
        out->first + out->count > rows * cols)
        return dt_err_set(DT_ERR_FORMAT, "%s/%s: slice of %s: its split, shape, range or "
                          "offsets do not fit the tensor or the file", L->folder,
                          L->names[file], p->name);
    return DT_OK;
}

static int by_place(const void *a, const void *b) {
    const piece *x = a, *y = b;
    if (x->spec.index != y->spec.index)
        return x->spec.index < y->spec.index ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* Every tensor's slices cover each of its shards exactly once: one split for all of them,
 * every shard index, and within a shard back-to-back element ranges from 0 to its size. A
 * duplicated or overlapping slice would otherwise let one file's bytes stand for another's. */
static dt_status check_cover(loader *L) {
    for (int t = 0; t < dt_model_n_full_params(L->g); t++) {
        piece *p = L->pieces + L->by_tensor[t];
        int n = L->by_tensor[t + 1] - L->by_tensor[t];
        const char *name = dt_model_full_param(L->g, t)->name;
        if (n == 0)
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: no slice of %s in the manifest (a shard is "
                              "missing)",
                              L->folder, name);
        qsort(p, (size_t)n, sizeof *p, by_place);
        int idx = 0;
        int64_t end = 0;
        for (int i = 0; i < n; i++) {
            bool same_split =
                p[i].spec.kind == p[0].spec.kind && p[i].spec.parts == p[0].spec.parts;
            if (p[i].spec.index != idx) { /* the previous shard must be whole */
                if (i == 0 || end != p[i - 1].rows * p[i - 1].cols || p[i].spec.index != idx + 1)
                    break;
                idx++, end = 0;
            }
            if (!same_split || p[i].first != end)
                return dt_err_set(DT_ERR_FORMAT,
                                  "%s: the slices of %s do not cover it exactly "
                                  "once (shard %d of %d: %s at element %lld)",
                                  L->folder, name, p[i].spec.index, p[i].spec.parts,
                                  !same_split        ? "a different split"
                                  : p[i].first < end ? "an overlap"
                                                     : "a gap",
                                  (long long)(p[i].first < end ? p[i].first : end));
            end += p[i].count;
        }
        const piece *last = &p[n - 1];
        if (idx != p[0].spec.parts - 1 || last->spec.index != idx || end != last->rows * last->cols)
            return dt_err_set(DT_ERR_FORMAT,
                              "%s: the slices of %s do not cover it exactly once "
                              "(shard %d of %d ends at element %lld)",
                              L->folder, name, idx, p[0].spec.parts, (long long)end);
    }
    return DT_OK;
}

typedef struct byte_range {
    int file, tensor;
    int64_t start, end;
} byte_range;

static int by_start(const void *a, const void *b) {
    const byte_range *x = a, *y = b;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* No two slices (weights, exp_avg, exp_avg_sq, the average of each) share a byte of a file. */
static dt_status check_disjoint(loader *L) {
    size_t n = (size_t)L->kinds * L->n_pieces;
    byte_range *r = malloc((n + 1) * sizeof *r);
    if (!r)
        return dt_err_set(DT_ERR_OOM, "checkpoint: out of memory for the slices' ranges");
    size_t k = 0;
    for (int t = 0; t < dt_model_n_full_params(L->g); t++)
        for (int q = L->by_tensor[t]; q < L->by_tensor[t + 1]; q++)
            for (int j = 0; j < L->kinds; j++) {
                const piece *p = &L->pieces[q];
                r[k++] = (byte_range){p->file, t, p->at[j], p->at[j] + 4 * p->count};
            }
    qsort(r, k, sizeof *r, by_start);
    dt_status st = DT_OK;
    for (size_t i = 1; i < k && st == DT_OK; i++)
        if (r[i].file == r[i - 1].file && r[i].start < r[i - 1].end)
            st = dt_err_set(DT_ERR_FORMAT,
                            "%s/%s: slices of %s and %s share bytes from %lld "
                            "(each slice's bytes must be its own)",
                            L->folder, L->names[r[i].file],
                            dt_model_full_param(L->g, r[i - 1].tensor)->name,
                            dt_model_full_param(L->g, r[i].tensor)->name, (long long)r[i].start);
    free(r);
    return st;
}

static void loader_close(loader *L) {
    for (int i = 0; L->fd && i < L->n_files; i++)
        if (L->fd[i] >= 0)
            close(L->fd[i]);
    free(L->fd);
    free(L->bytes);
    free(L->names);
    free(L->pieces);
    free(L->by_tensor);
}

/* The files and their slices, grouped by full tensor (counting sort). */
static dt_status loader_open(loader *L, const cJSON *man) {
    dt_status st = DT_OK;
    const cJSON *files = files_of(man, L->folder, &st);
    DT_TRY(st);
    int nf = cJSON_GetArraySize(files), nt = dt_model_n_full_params(L->g), total = 0;
    for (int i = 0; i < nf; i++)
        total += cJSON_GetArraySize(
            cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(files, i), "slices"));
    L->n_files = nf;
    L->fd = malloc((size_t)nf * sizeof *L->fd);
    L->bytes = malloc((size_t)nf * sizeof *L->bytes);
    L->names = malloc((size_t)nf * sizeof *L->names);
    L->pieces = malloc((size_t)(total + 1) * sizeof *L->pieces);
    L->by_tensor = calloc((size_t)nt + 2, sizeof *L->by_tensor);
    piece *tmp = malloc((size_t)(total + 1) * sizeof *tmp);
    int *tid = malloc((size_t)(total + 1) * sizeof *tid);
    if (!L->fd || !L->bytes || !L->names || !L->pieces || !L->by_tensor || !tmp || !tid)
        st = dt_err_set(DT_ERR_OOM, "checkpoint: out of memory for the manifest's slices");
    for (int i = 0; L->fd && i < nf; i++)
        L->fd[i] = -1;
    int n = 0;
    for (int i = 0; st == DT_OK && i < nf; i++) {
        const cJSON *f = cJSON_GetArrayItem(files, i);
        uint32_t crc;
        st = file_entry(f, L->folder, (const char **)&L->names[i], &L->bytes[i], &crc);
        const cJSON *sl = cJSON_GetObjectItemCaseSensitive(f, "slices");
        for (int k = 0; st == DT_OK && k < cJSON_GetArraySize(sl); k++, n++)
            st = parse_piece(L, cJSON_GetArrayItem(sl, k), i, &tmp[n], &tid[n]);
    }
    if (st == DT_OK) {
        for (int i = 0; i < n; i++)
            L->by_tensor[tid[i] + 1]++;
        for (int t = 0; t < nt; t++)
            L->by_tensor[t + 1] += L->by_tensor[t];
        int *at = calloc((size_t)nt + 1, sizeof *at);
        if (!at)
            st = dt_err_set(DT_ERR_OOM, "checkpoint: out of memory");
        for (int i = 0; at && i < n; i++)
            L->pieces[L->by_tensor[tid[i]] + at[tid[i]]++] = tmp[i];
        free(at);
        L->n_pieces = n;
    }
    free(tmp);
    free(tid);
    if (st == DT_OK)
        st = check_cover(L);
    if (st == DT_OK)
        st = check_disjoint(L);
    return st;
}

static dt_status file_fd(loader *L, int file, int *fd) {
    if (L->fd[file] < 0) {
        char path[PATH_LEN + 300];
        size_t size;
        snprintf(path, sizeof path, "%s/%s", L->folder, L->names[file]);
        DT_TRY(dt_file_open_regular(path, "checkpoint shard", &L->fd[file], &size));
        if ((double)size != L->bytes[file])
            return dt_err_set(DT_ERR_FORMAT, "%s: %zu bytes, the manifest says %.0f (truncated "
                              "or damaged)", path, size, L->bytes[file]);
    }
    *fd = L->fd[file];
    return DT_OK;
}

/* Where full element (r, c) lies in shard `index` of a saved spec: local (i, j), and how many
 * columns from there stay in that shard's row. */
static int64_t saved_place(const piece *pc, int64_t r, int64_t c, int *index, int64_t *i,
                           int64_t *j) {
    const dt_shard *s = &pc->spec;
    *index = 0;
    *i = r;
    *j = c;
    switch (s->kind) {
    case DT_SHARD_ROWS: {
        int64_t rows = (s->full_rows + s->parts - 1) / s->parts;
        *index = (int)(r / rows);
        *i = r % rows;
        return s->full_cols - c;
    }
    case DT_SHARD_COLS: {
        int64_t cols = s->full_cols / s->parts;
        *index = (int)(c / cols);
        *j = c % cols;
        return cols - *j;
    }
    case DT_SHARD_QKV: {
        int64_t start = 0, before = 0;
        for (int k = 0; k < 3; k++) {
            int64_t per = s->sec[k] / s->parts;
            if (r < start + s->sec[k]) {
                *index = (int)((r - start) / per);
                *i = before + (r - start) % per;
                break;
            }
            start += s->sec[k];
            before += per;
        }
        return s->full_cols - c;
    }
    default:
        return s->full_cols - c;
    }
}

/* n floats of full tensor t from (r, c) on (one row), kind k (0 weights, 1 m, 2 v) */
static dt_status read_run(loader *L, int t, int64_t r, int64_t c, int64_t n, int k, float *dst) {
    while (n > 0) {
        int64_t got = 0;
        for (int q = L->by_tensor[t]; q < L->by_tensor[t + 1] && !got; q++) {
            const piece *pc = &L->pieces[q];
            int index;
            int64_t i, j, left = saved_place(pc, r, c, &index, &i, &j), flat = i * pc->cols + j;
            if (index != pc->spec.index || flat < pc->first || flat >= pc->first + pc->count)
                continue;
            got = n < left ? n : left;
            if (got > pc->first + pc->count - flat)
                got = pc->first + pc->count - flat;
            int fd;
            DT_TRY(file_fd(L, pc->file, &fd));
            size_t want = (size_t)got * sizeof(float);
            off_t off = (off_t)(pc->at[k] + (flat - pc->first) * (int64_t)sizeof(float));
            for (size_t done = 0; done < want;) {
                ssize_t x = pread(fd, (char *)dst + done, want - done, off + (off_t)done);
                if (x <= 0)
                    return dt_err_set(DT_ERR_IO, "%s/%s: read failed at byte %lld: %s",
                                      L->folder, L->names[pc->file], (long long)off + (long long)done,
                                      x < 0 ? strerror(errno) : "end of file");
                done += (size_t)x;
            }
        }
        if (!got)
            return dt_err_set(DT_ERR_FORMAT, "%s: element [%lld, %lld] of %s is in no file of "
                              "the checkpoint (a shard is missing)", L->folder, (long long)r,
                              (long long)c, dt_model_full_param(L->g, t)->name);
        n -= got;
        c += got;
        dst += got;
    }
    return DT_OK;
}

/* Local-arena elements [first, first + count) of kind k into dst: each local tensor's part,
 * row by row of its tp shard, zeros in padding. */
/* Values read must be finite: a checkpoint with NaN weights would only fail steps later,
 * as a divergence it did not cause. */
static dt_status all_finite(const char *folder, const dt_model *g, int k, const float *x,
                            int64_t first, int64_t count) {
    char where[200];
    if (!dt_finite_first_bad(g, false, x, first, count, where, sizeof where))
        return DT_OK;
    return dt_err_set(
        DT_ERR_FORMAT,
        "%s: the checkpoint's %s hold a non-finite value: %s "
        "(saved from a diverged run or damaged)",
        folder,
        (const char *[]){"weights", "exp_avg moments", "exp_avg_sq moments", "weight averages"}[k],
        where);
}

static dt_status fill(loader *L, int k, int64_t first, int64_t count, float *dst) {
    memset(dst, 0, (size_t)count * sizeof *dst);
    for (int pi = 0; pi < dt_model_n_params(L->g); pi++) {
        const dt_param *p = dt_model_param(L->g, pi);
        int64_t a = first > p->offset ? first : p->offset;
        int64_t b = first + count < p->offset + p->numel ? first + count : p->offset + p->numel;
        int t = full_index(L->g, p->name);
        int64_t rows, cols;
        dt_shard_local_shape(&p->shard, &rows, &cols);
        for (int64_t e = a - p->offset; e < b - p->offset;) {
            int64_t i = e / cols, j = e % cols, end = (i + 1) * cols, col0;
            if (end > b - p->offset)
                end = b - p->offset;
            int64_t r = dt_shard_full_row(&p->shard, p->shard.index, i, &col0);
            if (r >= 0)
                DT_TRY(read_run(L, t, r, col0 + j, end - e, k, dst + (p->offset + e - first)));
            e = end;
        }
    }
    return all_finite(L->folder, L->g, k, dst, first, count);
}

/* Moment k (1, 2; 3: the weights' average) of the view: straight into its memory, or,
 * offloaded, through the io buffer into the optimizer's file, io_len bytes at a time. */
static dt_status fill_moment(loader *L, int k, const dt_engine_view *v, float *io,
                             size_t io_len) {
    if (v->m && k < 3)
        return fill(L, k, v->m_first, v->m_count, k == 1 ? v->m : v->v);
    if (k == 3) { /* in memory; written through the view so the engine keeps it */
        DT_TRY(fill(L, k, v->m_first, v->m_count, v->ema));
        return dt_engine_view_write_moment(v, 2, v->m_first, v->m_count, v->ema);
    }
    int64_t step = (int64_t)(io_len / sizeof(float));
    if (step < 1)
        return dt_err_set(DT_ERR_ARG, "checkpoint: no io buffer for the offloaded moments");
    for (int64_t e = v->m_first; e < v->m_first + v->m_count; e += step) {
        int64_t n = v->m_first + v->m_count - e < step ? v->m_first + v->m_count - e : step;
        DT_TRY(fill(L, k, e, n, io));
        DT_TRY(dt_engine_view_write_moment(v, k - 1, e, n, io));
    }
    return DT_OK;
}

dt_status dt_ckpt_load_sharded(const char *folder, const dt_model *g, const dt_engine_view *v,
                               dt_train_state *s, int *adam_steps, void *io, size_t io_len) {
    cJSON *man = NULL;
    DT_TRY(read_manifest(folder, &man));
    loader L = {.folder = folder, .g = g};
    char path[PATH_LEN + 32];
    snprintf(path, sizeof path, "%s/manifest.json", folder);
    dt_status st = dt_ckpt_state_from_json(man, path, s, adam_steps);
    if (st == DT_OK)
        st = dt_ckpt_check_step(folder, s->step);
    if (st == DT_OK)
        st = check_model(man, folder, g);
    L.kinds = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(man, "ema")) ? 4 : 3;
    if (st == DT_OK)
        st = loader_open(&L, man);
    if (st == DT_OK)
        st = fill(&L, 0, v->w_first, v->w_count, v->w);
    if (st == DT_OK)
        st = fill_moment(&L, 1, v, io, io_len);
    if (st == DT_OK)
        st = fill_moment(&L, 2, v, io, io_len);
    /* the weights' average: resumed where both keep one; a run that starts one from a
     * checkpoint without it starts it from the weights, one that keeps none ignores it */
    if (st == DT_OK && L.kinds == 4 && v->ema)
        st = fill_moment(&L, 3, v, io, io_len);
    else if (st == DT_OK && v->ema && v->engine)
        dt_warn("%s holds no weight average (saved without train.ema_decay): the average "
                "starts from these weights",
                folder);
    loader_close(&L);
    cJSON_Delete(man);
    return st;
}

dt_status dt_ckpt_model_config(const char *folder, dt_model_config *c) {
    cJSON *man = NULL;
    DT_TRY(read_manifest(folder, &man));
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(man, "model");
    const char *arch = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "arch"));
    int k = 0;
    while (arch && k < DT_ARCH_COUNT && strcmp(arch, dt_arch_name((dt_arch)k)) != 0)
        k++;
    bool ok = arch && k < DT_ARCH_COUNT;
    /* the model's named sizes (as dt_model_sizes wrote them): every whole number in [0, 2^24]
     * (0: a DiT without classes, or the first value of an enum such as its attention kind);
     * dt_model_config_from_sizes checks each one's own range */
    dt_model_size sz[DT_MODEL_MAX_SIZES];
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, m) {
        bool whole = true;
        int64_t v = num(m, it->string, &whole);
        if (whole && v >= 0 && v <= (1 << 24) && n < DT_MODEL_MAX_SIZES)
            sz[n++] = (dt_model_size){.key = it->string, .value = v};
    }
    int64_t max_seq_len = num(m, "max_seq_len", &ok);
    ok = ok && max_seq_len >= 1 && max_seq_len <= (1 << 24);
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(m, "rope_theta");
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(m, "norm_eps");
    ok = ok && cJSON_IsNumber(theta) && cJSON_IsNumber(eps);
    dt_status st = DT_OK;
    if (!ok) {
        st = dt_err_set(DT_ERR_FORMAT, "%s/manifest.json: \"model\" lacks a known arch or a "
                        "positive max_seq_len, rope_theta or norm_eps", folder);
    } else {
        c->arch = (dt_arch)k;
        st = dt_model_config_from_sizes(sz, n, c);
        if (st != DT_OK)
            dt_err_wrap(st, "%s/manifest.json: \"model\": ", folder);
        c->max_seq_len = (int)max_seq_len;
        c->rope_theta = (float)theta->valuedouble;
        c->norm_eps = (float)eps->valuedouble;
        const cJSON *shift = cJSON_GetObjectItemCaseSensitive(m, "timestep_shift");
        c->timestep_shift = shift ? (float)cJSON_GetNumberValue(shift) : 1.0f;
        if (st == DT_OK && !(c->timestep_shift >= 0 && c->timestep_shift <= DT_DIT_MAX_SHIFT))
            st = dt_err_set(DT_ERR_FORMAT,
                            "%s/manifest.json: \"model\": timestep_shift is not "
                            "a number in 0..%g",
                            folder, (double)DT_DIT_MAX_SHIFT);
        dt_config whole = {.model = *c}; /* a DiT's sequence is its clip's patch tokens */
        dt_config_derive(&whole);
        *c = whole.model;
    }
    cJSON_Delete(man);
    return st;
}

dt_status dt_ckpt_load_weights(const char *folder, const dt_model *g, bool average, float *w,
                               bool *averaged) {
    cJSON *man = NULL;
    DT_TRY(read_manifest(folder, &man));
    loader L = {.folder = folder, .g = g};
    L.kinds = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(man, "ema")) ? 4 : 3;
    bool avg = average && L.kinds == 4;
    if (averaged)
        *averaged = avg;
    dt_status st = check_model(man, folder, g);
    if (st == DT_OK)
        st = loader_open(&L, man);
    if (st == DT_OK)
        st = fill(&L, avg ? 3 : 0, 0, dt_model_numel(g), w);
    loader_close(&L);
    cJSON_Delete(man);
    return st;
}

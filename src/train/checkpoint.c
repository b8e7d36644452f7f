/* Checkpoint folders: save, find the newest, load, prune. See checkpoint.h. */
#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/atomic.h"
#include "io/safetensors.h"

#define PATH_LEN 4096

static dt_status save_optim(const char *path, const dt_gpt *g, const dt_ckpt_arenas *a) {
    dt_st_writer *w = NULL;
    DT_TRY(dt_st_writer_init(&w));
    dt_status st = DT_OK;
    int n = dt_gpt_n_full_params(g);
    char (*names)[2][128] = malloc((size_t)n * sizeof *names); /* borrowed until commit */
    if (!names) {
        dt_st_writer_free(w);
        return dt_err_set(DT_ERR_OOM, "checkpoint: out of memory");
    }
    const float *m = a->m, *v = a->v;
    for (int i = 0; i < n && st == DT_OK; i++) {
        const dt_param *p = dt_gpt_full_param(g, i);
        snprintf(names[i][0], sizeof names[i][0], "exp_avg.%s", p->name);
        snprintf(names[i][1], sizeof names[i][1], "exp_avg_sq.%s", p->name);
        st = dt_st_writer_add(w, names[i][0], DT_ST_F32, p->ndim, p->shape, m + p->offset);
        if (st == DT_OK)
            st = dt_st_writer_add(w, names[i][1], DT_ST_F32, p->ndim, p->shape, v + p->offset);
    }
    if (st == DT_OK)
        st = dt_st_writer_commit(w, path);
    dt_st_writer_free(w);
    free(names);
    return st;
}

static dt_status save_state(const char *path, const dt_train_state *s, int adam_steps) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "step", (double)s->step);
    cJSON_AddNumberToObject(j, "data_pos", (double)s->data_pos);
    cJSON_AddNumberToObject(j, "data_step", (double)s->data_step);
    cJSON_AddNumberToObject(j, "adam_steps", adam_steps);
    cJSON_AddNumberToObject(j, "loss_scale", (double)s->scaler.scale); /* a float: exact */
    cJSON_AddNumberToObject(j, "loss_scale_clean_steps", s->scaler.clean_steps);
    cJSON_AddNumberToObject(j, "skipped_steps", (double)s->scaler.skipped);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed); /* exact as a string */
    cJSON_AddStringToObject(j, "seed", seed);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text)
        return dt_err_set(DT_ERR_OOM, "checkpoint: out of memory");
    dt_status st = dt_atomic_write_file(path, text, strlen(text));
    free(text);
    return st;
}

static dt_status save_config(const char *path, const dt_config *cfg) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return dt_err_set(DT_ERR_OOM, "checkpoint: out of memory");
    dt_config_print(cfg, f);
    fclose(f);
    dt_status st = dt_atomic_write_file(path, buf, len);
    free(buf);
    return st;
}

static void remove_folder(const char *path) {
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    char file[PATH_LEN + 256];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        unlink(file);
    }
    closedir(d);
    rmdir(path);
}

dt_status dt_ckpt_save(const char *dir, const dt_gpt *g, const dt_ckpt_arenas *a,
                       const dt_train_state *s, const dt_config *cfg) {
    char final[PATH_LEN], tmp[PATH_LEN + 16], file[PATH_LEN + 64];
    snprintf(final, sizeof final, "%s/step-%lld", dir, (long long)s->step);
    snprintf(tmp, sizeof tmp, "%s.partial", final);
    remove_folder(tmp); /* left by a run that died while writing */
    DT_TRY(dt_mkdirs(tmp));
    snprintf(file, sizeof file, "%s/model.safetensors", tmp);
    DT_TRY(dt_gpt_save(g, a->w, file));
    snprintf(file, sizeof file, "%s/optim.safetensors", tmp);
    DT_TRY(save_optim(file, g, a));
    snprintf(file, sizeof file, "%s/config.ini", tmp);
    DT_TRY(save_config(file, cfg));
    snprintf(file, sizeof file, "%s/state.json", tmp); /* last: its presence marks completion */
    DT_TRY(save_state(file, s, a->adam_steps));
    remove_folder(final);
    if (rename(tmp, final) != 0)
        return dt_err_set(DT_ERR_IO, "checkpoint: cannot rename %s to %s: %s", tmp, final,
                          strerror(errno));
    return DT_OK;
}

/* step number of a complete "step-N" folder name, or -1 */
static long long folder_step(const char *dir, const char *name) {
    char *end;
    if (strncmp(name, "step-", 5) != 0)
        return -1;
    long long n = strtoll(name + 5, &end, 10);
    if (*end || end == name + 5 || n < 0)
        return -1;
    char state[PATH_LEN + 300];
    snprintf(state, sizeof state, "%s/%s/state.json", dir, name);
    struct stat sb;
    return stat(state, &sb) == 0 ? n : -1;
}

static int by_step(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* sorted steps of the complete folders; *steps malloc'ed */
static dt_status list_steps(const char *dir, long long **steps, int *n) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? DT_OK
                               : dt_err_set(DT_ERR_IO, "checkpoint dir %s: %s", dir,
                                            strerror(errno));
    int cap = 0;
    struct dirent *e;
    dt_status st = DT_OK;
    while ((e = readdir(d))) {
        long long s = folder_step(dir, e->d_name);
        if (s < 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            long long *p = realloc(*steps, (size_t)cap * sizeof *p);
            if (!p) {
                st = dt_err_set(DT_ERR_OOM, "checkpoint: out of memory");
                break;
            }
            *steps = p;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (*n)
        qsort(*steps, (size_t)*n, sizeof **steps, by_step);
    return st;
}

dt_status dt_ckpt_latest(const char *dir, char *out, size_t out_len) {
    long long *steps;
    int n;
    out[0] = 0;
    DT_TRY(list_steps(dir, &steps, &n));
    if (n)
        snprintf(out, out_len, "%s/step-%lld", dir, steps[n - 1]);
    free(steps);
    return DT_OK;
}

dt_status dt_ckpt_prune(const char *dir, int keep) {
    if (keep <= 0)
        return DT_OK;
    long long *steps;
    int n;
    DT_TRY(list_steps(dir, &steps, &n));
    char path[PATH_LEN + 32];
    for (int i = 0; i + keep < n; i++) {
        snprintf(path, sizeof path, "%s/step-%lld", dir, steps[i]);
        remove_folder(path);
    }
    free(steps);
    return DT_OK;
}

static dt_status load_optim(const char *path, const dt_gpt *g, dt_ckpt_arenas *a) {
    dt_st_file *f = NULL;
    DT_TRY(dt_st_open(path, &f));
    dt_status st = DT_OK;
    float *m = a->m, *v = a->v;
    char name[160];
    for (int i = 0; i < dt_gpt_n_full_params(g) && st == DT_OK; i++) {
        const dt_param *p = dt_gpt_full_param(g, i);
        snprintf(name, sizeof name, "exp_avg.%s", p->name);
        st = dt_st_read_f32(f, name, p->ndim, p->shape, m + p->offset);
        snprintf(name, sizeof name, "exp_avg_sq.%s", p->name);
        if (st == DT_OK)
            st = dt_st_read_f32(f, name, p->ndim, p->shape, v + p->offset);
    }
    dt_st_close(f);
    return st;
}

static dt_status json_int(const cJSON *j, const char *path, const char *key, int64_t *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(x) || x->valuedouble < 0)
        return dt_err_set(DT_ERR_FORMAT, "%s: \"%s\" is missing or not a non-negative number",
                          path, key);
    *out = (int64_t)x->valuedouble;
    return DT_OK;
}

static dt_status load_state(const char *path, dt_train_state *s, int *adam_steps_out) {
    char *text;
    DT_TRY(dt_read_text(path, "checkpoint state", 1 << 20, &text));
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return dt_err_set(DT_ERR_FORMAT, "%s: not a JSON object (corrupt checkpoint state)",
                          path);
    }
    int64_t adam_steps = 0;
    dt_status st = json_int(j, path, "step", &s->step);
    if (st == DT_OK)
        st = json_int(j, path, "data_pos", &s->data_pos);
    if (st == DT_OK)
        st = json_int(j, path, "data_step", &s->data_step);
    if (st == DT_OK)
        st = json_int(j, path, "adam_steps", &adam_steps);
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(j, "seed");
    if (st == DT_OK && !cJSON_IsString(seed))
        st = dt_err_set(DT_ERR_FORMAT, "%s: \"seed\" is missing", path);
    if (st == DT_OK) {
        s->seed = strtoull(seed->valuestring, NULL, 10);
        *adam_steps_out = (int)adam_steps;
    }
    /* the loss scale: absent from checkpoints written before fp16 existed (then the fresh
     * scaler stays); when present, all three */
    const cJSON *scale = cJSON_GetObjectItemCaseSensitive(j, "loss_scale");
    if (st == DT_OK && scale) {
        int64_t clean = 0, skipped = 0;
        if (!cJSON_IsNumber(scale) || !(scale->valuedouble >= 1))
            st = dt_err_set(DT_ERR_FORMAT, "%s: \"loss_scale\" is not a number >= 1", path);
        if (st == DT_OK)
            st = json_int(j, path, "loss_scale_clean_steps", &clean);
        if (st == DT_OK)
            st = json_int(j, path, "skipped_steps", &skipped);
        if (st == DT_OK) {
            s->scaler.scale = (float)scale->valuedouble;
            s->scaler.clean_steps = (int)clean;
            s->scaler.skipped = skipped;
        }
    }
    cJSON_Delete(j);
    return st;
}

dt_status dt_ckpt_load(const char *folder, const dt_gpt *g, dt_ckpt_arenas *a,
                       dt_train_state *s) {
    char file[PATH_LEN + 64];
    snprintf(file, sizeof file, "%s/state.json", folder);
    DT_TRY(load_state(file, s, &a->adam_steps));
    snprintf(file, sizeof file, "%s/model.safetensors", folder);
    DT_TRY(dt_gpt_load(g, a->w, file));
    snprintf(file, sizeof file, "%s/optim.safetensors", folder);
    return load_optim(file, g, a);
}

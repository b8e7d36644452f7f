/* Checkpoint folders: save, find the newest, load, prune. See checkpoint.h. */
#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/grow.h"
#include "core/log.h"
#include "io/atomic.h"
#include "io/safetensors.h"
#include "train/checkpoint_impl.h"

#define PATH_LEN 4096
#define STEP_MAX 2147483647.0 /* steps are ints in the training loop */
#define POS_MAX 9007199254740992.0 /* 2^53: exact in JSON's doubles */

cJSON *dt_ckpt_state_json(const dt_train_state *s, int adam_steps) {
    cJSON *j = cJSON_CreateObject();
    if (!j)
        return NULL;
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
    return j;
}

void dt_ckpt_remove_folder(const char *path) {
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

long long dt_ckpt_folder_step(const char *name) {
    char *end;
    if (strncmp(name, "step-", 5) != 0 || !(name[5] >= '0' && name[5] <= '9'))
        return -1;
    errno = 0;
    long long n = strtoll(name + 5, &end, 10);
    if (*end || errno || n < 0 || n > STEP_MAX || (name[5] == '0' && name[6]))
        return -1;
    return n;
}

/* step number of a complete "step-N" folder name, or -1. Complete: its manifest (sharded) or
 * state.json (whole format) exists. */
static long long folder_step(const char *dir, const char *name) {
    long long n = dt_ckpt_folder_step(name);
    if (n < 0)
        return -1;
    char path[PATH_LEN + 300];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s/manifest.json", dir, name);
    if (stat(path, &sb) == 0)
        return n;
    snprintf(path, sizeof path, "%s/%s/state.json", dir, name);
    if (stat(path, &sb) == 0)
        return n;
    dt_warn("checkpoint: %s/%s has neither manifest.json nor state.json: skipped, it is not "
            "a complete checkpoint",
            dir, name);
    return -1;
}

static int by_step(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* sorted steps of the complete folders; *steps malloc'ed */
dt_status dt_ckpt_list(const char *dir, long long **steps, int *n) {
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
        long long *p = dt_grow(*steps, &cap, *n, sizeof *p, 16);
        if (!p) {
            st = dt_err_set(DT_ERR_OOM, "checkpoint: out of memory");
            break;
        }
        *steps = p;
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (*n)
        qsort(*steps, (size_t)*n, sizeof **steps, by_step);
    return st;
}

/* A partial folder names its writer's host and process, so a later save on the same host can
 * tell one whose writer was killed (never to be finished: resume = auto never takes it) from
 * one another run is still writing into the same folder. */
static void host_name(char *out, size_t n) {
    if (gethostname(out, n) != 0 || !out[0])
        snprintf(out, n, "host");
    out[n - 1] = '\0';
    for (char *c = out; *c; c++) /* '-' separates the fields of the name */
        if (*c == '-' || *c == '/')
            *c = '_';
}

int dt_ckpt_partial_name(char *out, size_t n, const char *dir, long long step, int pid,
                         unsigned long nonce) {
    char host[64];
    host_name(host, sizeof host);
    return snprintf(out, n, "%s/step-%lld.partial-%s-%d-%lx", dir, step, host, pid, nonce);
}

bool dt_ckpt_partial_is_stale(const char *name) {
    const char *p = strstr(name, ".partial-");
    if (strncmp(name, "step-", 5) != 0 || !p)
        return false;
    char host[64], *end;
    host_name(host, sizeof host);
    size_t hl = strlen(host);
    p += strlen(".partial-");
    if (strncmp(p, host, hl) != 0 || p[hl] != '-')
        return false;
    long pid = strtol(p + hl + 1, &end, 10);
    if (end == p + hl + 1 || *end != '-' || pid <= 0)
        return false;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

void dt_ckpt_other_writers(const char *dir, const char *own, char *out, size_t n) {
    out[0] = '\0';
    const char *own_name = strrchr(own, '/') ? strrchr(own, '/') + 1 : own;
    DIR *d = opendir(dir);
    if (!d)
        return;
    size_t k = 0;
    struct dirent *e;
    while ((e = readdir(d)) && k + 1 < n) {
        const char *p = strstr(e->d_name, ".partial-");
        if (strncmp(e->d_name, "step-", 5) != 0 || !p || !strcmp(e->d_name, own_name) ||
            dt_ckpt_partial_is_stale(e->d_name))
            continue;
        /* host-pid-nonce: the host holds no '-' (host_name) */
        const char *host = p + strlen(".partial-"), *dash = strchr(host, '-');
        long pid = dash ? strtol(dash + 1, NULL, 10) : 0;
        int len = snprintf(out + k, n - k, "%shost %.*s pid %ld (%s)", k ? "; " : "",
                           dash ? (int)(dash - host) : 0, host, pid, e->d_name);
        if (len < 0)
            break;
        k += (size_t)len < n - k ? (size_t)len : n - k - 1;
    }
    closedir(d);
}

/* Remove the partial folders of this host's writers that died mid-save. */
static void remove_stale_partials(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[PATH_LEN + 300];
    struct dirent *e;
    while ((e = readdir(d)))
        if (dt_ckpt_partial_is_stale(e->d_name)) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            dt_ckpt_remove_folder(path);
        }
    closedir(d);
}

dt_status dt_ckpt_prune(const char *dir, int keep) {
    remove_stale_partials(dir);
    if (keep <= 0)
        return DT_OK;
    long long *steps;
    int n;
    DT_TRY(dt_ckpt_list(dir, &steps, &n));
    char path[PATH_LEN + 32];
    for (int i = 0; i + keep < n; i++) {
        snprintf(path, sizeof path, "%s/step-%lld", dir, steps[i]);
        dt_ckpt_remove_folder(path);
    }
    free(steps);
    return DT_OK;
}

static dt_status load_optim(const char *path, const dt_model *g, dt_ckpt_arenas *a) {
    dt_st_file *f = NULL;
    DT_TRY(dt_st_open(path, &f));
    dt_status st = DT_OK;
    float *m = a->m, *v = a->v;
    char name[160];
    for (int i = 0; i < dt_model_n_full_params(g) && st == DT_OK; i++) {
        const dt_param *p = dt_model_full_param(g, i);
        snprintf(name, sizeof name, "exp_avg.%s", p->name);
        st = dt_st_read_f32(f, name, p->ndim, p->shape, m + p->offset);
        snprintf(name, sizeof name, "exp_avg_sq.%s", p->name);
        if (st == DT_OK)
            st = dt_st_read_f32(f, name, p->ndim, p->shape, v + p->offset);
    }
    dt_st_close(f);
    return st;
}

/* A whole number in [0, max]: steps are ints in the loop, positions int64 (2^53: exact in
 * JSON's doubles). */
static dt_status json_int(const cJSON *j, const char *path, const char *key, double max,
                          int64_t *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble <= max) ||
        x->valuedouble != (double)(int64_t)x->valuedouble)
        return dt_err_set(DT_ERR_FORMAT, "%s: \"%s\" is missing or not a whole number in "
                          "[0, %.0f]", path, key, max);
    *out = (int64_t)x->valuedouble;
    return DT_OK;
}

dt_status dt_ckpt_state_from_json(const cJSON *j, const char *path, dt_train_state *s,
                                  int *adam_steps_out) {
    int64_t adam_steps = 0;
    dt_status st = json_int(j, path, "step", STEP_MAX, &s->step);
    if (st == DT_OK)
        st = json_int(j, path, "data_pos", POS_MAX, &s->data_pos);
    if (st == DT_OK)
        st = json_int(j, path, "data_step", POS_MAX, &s->data_step);
    if (st == DT_OK)
        st = json_int(j, path, "adam_steps", STEP_MAX, &adam_steps);
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(j, "seed");
    if (st == DT_OK) {
        /* the seed is written as a decimal string (exact beyond 2^53): all digits, in range */
        const char *v = cJSON_GetStringValue(seed);
        char *end = NULL;
        errno = 0;
        unsigned long long x = v && v[0] >= '0' && v[0] <= '9' ? strtoull(v, &end, 10) : 0;
        if (!end || *end || errno)
            st = dt_err_set(DT_ERR_FORMAT, "%s: \"seed\" is missing or not a decimal string of "
                            "an unsigned 64-bit integer (got %s%.40s%s)", path, v ? "\"" : "",
                            v ? v : "no string", v ? "\"" : "");
        else
            s->seed = x;
    }
    if (st == DT_OK)
        *adam_steps_out = (int)adam_steps;
    /* the loss scale: absent from checkpoints written before fp16 existed (then the fresh
     * scaler stays); when present, all three */
    const cJSON *scale = cJSON_GetObjectItemCaseSensitive(j, "loss_scale");
    if (st == DT_OK && scale) {
        int64_t clean = 0, skipped = 0;
        if (!cJSON_IsNumber(scale) || !(scale->valuedouble >= 1 && scale->valuedouble <= 0x1p64))
            st = dt_err_set(DT_ERR_FORMAT, "%s: \"loss_scale\" is not a number in [1, 2^64]", path);
        if (st == DT_OK)
            st = json_int(j, path, "loss_scale_clean_steps", STEP_MAX, &clean);
        if (st == DT_OK)
            st = json_int(j, path, "skipped_steps", STEP_MAX, &skipped);
        if (st == DT_OK) {
            s->scaler.scale = (float)scale->valuedouble;
            s->scaler.clean_steps = (int)clean;
            s->scaler.skipped = skipped;
        }
    }
    return st;
}

dt_status dt_ckpt_check_step(const char *folder, int64_t step) {
    /* the last path component, trailing slashes ignored */
    size_t n = strlen(folder);
    while (n > 1 && folder[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && folder[b - 1] != '/')
        b--;
    char name[64];
    if (n - b >= sizeof name)
        return DT_OK; /* not a step-N name */
    memcpy(name, folder + b, n - b);
    name[n - b] = 0;
    long long want = dt_ckpt_folder_step(name);
    if (want >= 0 && want != step)
        return dt_err_set(DT_ERR_FORMAT, "%s: the folder is step %lld but its state says step "
                          "%lld (edited, or copied under another name); rename it or fix it",
                          folder, want, (long long)step);
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
    dt_status st = dt_ckpt_state_from_json(j, path, s, adam_steps_out);
    cJSON_Delete(j);
    return st;
}

dt_status dt_ckpt_load(const char *folder, const dt_model *g, dt_ckpt_arenas *a,
                       dt_train_state *s) {
    char file[PATH_LEN + 64];
    snprintf(file, sizeof file, "%s/state.json", folder);
    DT_TRY(load_state(file, s, &a->adam_steps));
    DT_TRY(dt_ckpt_check_step(folder, s->step));
    snprintf(file, sizeof file, "%s/model.safetensors", folder);
    DT_TRY(dt_model_load(g, a->w, file));
    snprintf(file, sizeof file, "%s/optim.safetensors", folder);
    return load_optim(file, g, a);
}

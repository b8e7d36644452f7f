/* The video DiT's rows of the memory model (plan/memory.c; see memory.h): its parameter arena
 * unit by unit, from the DiT's tensor table (models/dit.h: DiT / Open-Sora names, every
 * tensor whole, padded to 16 floats).
 *
 * Pure: no MPI, no tensors; thread-safe.
 */
#include "plan/plan_impl.h"

static int64_t pad16(int64_t floats) { return (floats + 15) / 16 * 16; }

/* A linear [out, in] and its bias [out], each padded. */
static int64_t linear_floats(int64_t out, int64_t in) { return pad16(out * in) + pad16(out); }

static int64_t patch_dim(const dt_model_config *m) {
    return (int64_t)m->channels * m->patch_t * m->patch_h * m->patch_w;
}

int64_t dt_plan_dit_unit_floats(const dt_model_config *m, int u) {
    int64_t C = m->n_embd, P = patch_dim(m);
    if (u == 0) /* x_embedder.proj, t_embedder.mlp.0 (256 timestep features), .2, label table */
        return linear_floats(C, P) + linear_floats(C, DT_PLAN_DIT_FREQ_DIM) +
               linear_floats(C, C) + (m->n_classes > 0 ? pad16((m->n_classes + 1) * C) : 0);
    if (u > m->n_layer) /* final_layer.adaLN_modulation.1, final_layer.linear */
        return linear_floats(2 * C, C) + linear_floats(P, C);
    /* adaLN_modulation.1, attn.qkv, attn.proj, mlp.fc1, mlp.fc2 */
    return linear_floats(6 * C, C) + linear_floats(3 * C, C) + linear_floats(C, C) +
           linear_floats(DT_PLAN_DIT_MLP_RATIO * C, C) +
           linear_floats(C, DT_PLAN_DIT_MLP_RATIO * C);
}

double dt_plan_dit_param_count(const dt_model_config *m) {
    double C = m->n_embd, P = (double)patch_dim(m), L = m->n_layer;
    double y = m->n_classes > 0 ? (m->n_classes + 1.0) * C : 0;
    return (C * P + C) + (C * DT_PLAN_DIT_FREQ_DIM + C) + (C * C + C) + y +
           L * (6 * C * C + 6 * C + 3 * C * C + 3 * C + C * C + C +
                2 * DT_PLAN_DIT_MLP_RATIO * C * C + DT_PLAN_DIT_MLP_RATIO * C + C) +
           (2 * C * C + 2 * C) + (P * C + P);
}

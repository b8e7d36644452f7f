/* The GPT's two carved arenas: the activations a slot keeps between a block's forward and
 * backward (with the residual positions they sit at), and the transients, where a block's and
 * the head's own buffers share one region. Each piece is 64-byte carved; plan/memory.c
 * predicts both to the byte.
 */
#include "models/gpt_impl.h"

#include "nn/lm_head.h"

/* Residual positions a slot keeps: each held block's input and output, the embedding's
 * output, the final norm's input; under act_offload not those between two held blocks, which
 * the blocks' frames keep. Numbered within their chunk (position p sits after unit p and
 * before unit p + 1, held together or alone); a slot has room for the most of a chunk. */
static void plan_positions(dt_gpt *g) {
    int L = g->cfg.n_layer;
    for (int l = 0; l <= L; l++)
        g->pos_index[l] = -1;
    for (int l = 0; l < L; l++)
        if (dt_gpt_holds_block(g, l)) {
            g->pos_index[l] = dt_gpt_offload_interior(g, l) ? -1 : 0;
            g->pos_index[l + 1] = dt_gpt_offload_interior(g, l + 1) ? -1 : 0;
        }
    if (g->unit_local[0] >= 0)
        g->pos_index[0] = 0;
    if (dt_gpt_holds_final(g))
        g->pos_index[L] = 0;
    g->n_pos = 0;
    for (int p = 0, n = 0; p <= L; p++) {
        if (g->pos_index[p] != 0)
            continue;
        if (g->unit_local[p] < 0) /* kept, so the input of a chunk's first unit */
            n = 0;
        g->pos_index[p] = n++;
        g->n_pos = n > g->n_pos ? n : g->n_pos;
    }
}

static void carve_acts(dt_gpt *g, dt_carver *cv) {
    dt_gpt_rows r = dt_gpt_rows_max(g);
    size_t C = g->dims.C, S = (size_t)g->n_slots, f4 = sizeof(float);
    bool lp = g->ctx.mm_type != DT_F32;
    g->res = dt_gpt_carve(cv, S * g->n_pos * r.Nr * C * f4);
    bool interior = false;
    for (int l = 1; l < g->cfg.n_layer; l++)
        interior |= dt_gpt_offload_interior(g, l);
    for (int i = 0; i < 2; i++) /* the transient positions, by parity */
        g->res_pass[i] = interior ? dt_gpt_carve(cv, r.Nr * C * f4) : NULL;
    dt_gpt_carve_block_acts(g, cv);
    if (!dt_gpt_holds_final(g))
        return;
    g->lnf_mean = dt_gpt_carve(cv, S * r.Nr * f4);
    g->lnf_rstd = dt_gpt_carve(cv, S * r.Nr * f4);
    g->lnf_out = dt_gpt_carve(cv, r.Nr * C * f4);
    g->lnf_lp = lp ? dt_gpt_carve(cv, r.Nt * C * sizeof(dt_bf16)) : NULL;
    g->losses = dt_gpt_carve(cv, r.Nt * f4);
}

/* The head's logits chunk (16-bit modes round its gradient over it), its statistics and, per
 * unit, its 16-bit matrix. */
static void carve_head(dt_gpt *g, dt_carver *cv) {
    size_t chunk = (size_t)g->head.chunk, V = (size_t)g->vocab_rows, C = g->dims.C;
    g->head.logits = dt_gpt_carve(cv, chunk * V * sizeof(float));
    g->head.stats = dt_gpt_carve(cv, (size_t)dt_lm_head_stats_count(&g->head) * sizeof(float));
    g->lp_head = g->lp_per_unit ? dt_gpt_carve(cv, V * C * sizeof(dt_bf16)) : NULL;
}

/* Floats of the widest block unit held here (0: none). */
static int64_t widest_block_unit(const dt_gpt *g) {
    int64_t widest = 0;
    for (int u = 0; u < g->n_units; u++) {
        int gu = g->unit_global[u];
        int64_t first, count;
        dt_gpt_unit_range(g, u, &first, &count);
        if (gu >= 1 && gu <= g->cfg.n_layer && count > widest)
            widest = count;
    }
    return widest;
}

/* What only a block call uses, forward and (training) backward: nothing of it outlives the
 * call. Buffers only a split uses (nn/block.c skips the regions of size-1 comms): the tp
 * region's entry and exit copies, Ulysses' head-layout copies. */
static void carve_block_only(dt_gpt *g, dt_carver *cv) {
    const dt_block_dims *d = &g->dims;
    dt_gpt_rows r = dt_gpt_rows_max(g);
    size_t C = d->C, F = d->F, W = dt_block_qkv_width(d), A = (size_t)d->NH * d->hs;
    size_t f4 = sizeof(float);
    bool lp = g->ctx.mm_type != DT_F32;
    bool tp = g->par.tp->size > 1, sp = g->par.sp->size > 1;
    dt_block_scratch *s = &g->scratch;
    s->ln = tp ? dt_gpt_carve(cv, r.Nr * C * f4) : NULL;
    /* bf16 q|k|v storage makes an fp32 q|k|v first only for RoPE (Llama): GPT-2's matmul
     * writes bf16 itself */
    bool rope = g->dims.kind != DT_BLOCK_GPT2;
    s->qkv_rows = sp || (dt_gpt_acts16(g) && rope) ? dt_gpt_carve(cv, r.Nt * W * f4) : NULL;
    s->packed = sp ? dt_gpt_carve(cv, r.Nt * W * f4) : NULL;
    s->att_heads = sp ? dt_gpt_carve(cv, r.Nt * A * f4) : NULL;
    s->part = tp ? dt_gpt_carve(cv, r.Nt * C * f4) : NULL;
    s->g = lp ? NULL : dt_gpt_carve(cv, r.Nt * F * f4); /* 16-bit modes write a->g_lp */
    int64_t widest_block = g->lp_per_unit ? widest_block_unit(g) : 0;
    g->lp_block =
        widest_block > 0 ? dt_gpt_carve(cv, (size_t)widest_block * sizeof(dt_bf16)) : NULL;
    if (!g->training)
        return;
    s->dln = dt_gpt_carve(cv, r.Nr * C * f4);
    s->dqkv_heads = dt_gpt_carve(cv, r.Nt * W * f4);
    s->datt = sp ? dt_gpt_carve(cv, r.Nt * A * f4) : NULL;
    s->datt_heads = dt_gpt_carve(cv, r.Nt * A * f4);
    s->dh = dt_gpt_carve(cv, r.Nt * F * f4);
    s->du = d->kind == DT_BLOCK_LLAMA ? dt_gpt_carve(cv, r.Nt * F * f4) : NULL;
    s->dg = dt_gpt_carve(cv, r.Nt * F * f4);
    s->pgrad = dt_gpt_carve(cv, 6 * C * f4);
    size_t widest = C > W ? C : W;
    widest = widest > F ? widest : F;
    s->dy_lp = lp ? dt_gpt_carve(cv, r.Nt * widest * sizeof(dt_bf16)) : NULL;
}

static void carve_scratch(dt_gpt *g, dt_carver *cv) {
    dt_gpt_rows r = dt_gpt_rows_max(g);
    size_t C = g->dims.C, f4 = sizeof(float), S = (size_t)g->n_slots;
    bool tp = g->par.tp->size > 1;
    dt_block_scratch *s = &g->scratch;
    /* shared by the blocks and the head (a tp split's entering region and its work) */
    bool bf16_norm = g->ctx.mm_type == DT_BF16 && !tp; /* the norm writes bf16 (nn/block.c) */
    s->ln_full = bf16_norm ? NULL : dt_gpt_carve(cv, r.Nt * C * f4);
    s->work = dt_gpt_carve(cv, (size_t)dt_block_work_count(&g->dims, &g->par, g->B, g->T) * f4);
    s->dln_full = g->training && tp ? dt_gpt_carve(cv, r.Nt * C * f4) : NULL;
    /* the head and a block never run at once: their own buffers share one region */
    size_t region = cv->used, head_end = region;
    if (dt_gpt_head_unit(g) >= 0) {
        carve_head(g, cv);
        head_end = cv->used;
        cv->used = region;
    }
    carve_block_only(g, cv);
    if (cv->used < head_end)
        cv->used = head_end;
    if (!g->training)
        return;
    /* live across calls: the residual's gradient buffers, the final norm's per slot, wpe's
     * rows */
    g->dres = dt_gpt_carve(cv, (size_t)g->n_grads * r.Nr * C * f4);
    g->dlnf = dt_gpt_holds_final(g) ? dt_gpt_carve(cv, S * r.Nr * C * f4) : NULL;
    g->dpos =
        g->cfg.arch == DT_ARCH_GPT2 ? dt_gpt_carve(cv, (size_t)g->n_positions * C * f4) : NULL;
}

static dt_status alloc_carved(dt_gpt *g, dt_mem_cat cat, const char *name,
                              void (*layout)(dt_gpt *, dt_carver *), void **arena) {
    dt_carver measure = {0};
    layout(g, &measure);
    DT_TRY(dt_mem_alloc(g->mem, cat, name, measure.used, arena));
    dt_carver real = {.base = *arena};
    layout(g, &real);
    return DT_OK;
}

dt_status dt_gpt_alloc_arenas(dt_gpt *g) {
    plan_positions(g);
    DT_TRY(alloc_carved(g, DT_MEM_ACTS, "activations", carve_acts, &g->act_arena));
    return alloc_carved(g, DT_MEM_TEMP, "transients", carve_scratch, &g->tmp_arena);
}

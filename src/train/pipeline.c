/* Pipeline executor. See pipeline.h. */
#include "train/pipeline.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "plan/layout.h"

enum { MSG_ACT, MSG_GRAD, MAX_TAG = 32767 }; /* MPI guarantees tags up to 32767 */

/* Buffers a (chunk, mb) takes and gives back: activation slots, boundary gradients. */
typedef struct buffer {
    bool busy;
    dt_comm_req send; /* what it sent last, completed before reuse */
} buffer;

typedef struct pool {
    const char *what; /* "activation slot" */
    int n;
    buffer *b;
    int *of; /* [n_chunks][n_mb] the buffer a (chunk, mb) holds, -1 none */
} pool;

static bool pool_init(pool *q, const char *what, int n, int pairs) {
    *q = (pool){.what = what, .n = n};
    q->b = calloc((size_t)n, sizeof *q->b);
    q->of = malloc((size_t)pairs * sizeof *q->of);
    return q->b && q->of;
}

static void pool_free(pool *q) {
    free(q->b);
    free(q->of);
}

/* every buffer free, no (chunk, mb) holding one */
static void pool_clear(pool *q, int pairs) {
    for (int i = 0; i < q->n; i++)
        q->b[i].busy = false;
    for (int k = 0; k < pairs; k++)
        q->of[k] = -1;
}

/* Completes every buffer's send (all of them, even after an error); the first error. */
static dt_status pool_drain(dt_comm *pp, pool *q) {
    dt_status st = DT_OK, w;
    for (int i = 0; i < q->n; i++)
        if ((w = dt_comm_wait(pp, &q->b[i].send)) != DT_OK && st == DT_OK)
            st = w;
    return st;
}

struct dt_pipeline {
    const dt_schedule *s;
    const dt_stage_plan *plan;
    dt_comm *pp;
    dt_comm *scatter; /* the tp group a boundary is pieced over, or NULL: whole */
    int *counts;      /* [scatter->size] each piece's floats */
    dt_model *model;
    int rank, n_mb;
    bool split; /* the schedule has W actions */
    pool slots, grads;
    float **inbox;          /* [n_inbox] landing buffers of inputs received ahead of their F */
    int n_inbox, *inbox_of; /* [n_chunks][n_mb] inbox holding a (chunk, mb)'s input, -1 */
    bool *inbox_busy;
    dt_mem *mem;
    dt_comm_req *recv_act; /* [n_chunks][n_mb] pending receive of the chunk's input */
    dt_comm_req *recv_grad;
};

/* Slots, gradient buffers and inbox buffers follow plan/schedule.h's rules
 * (dt_sched_takes_slot, _gives_slot, _takes_grad, _gives_grad, _inbox), which the planner
 * counts with too. */

static int idx(const dt_pipeline *p, int chunk, int mb) { return chunk * p->n_mb + mb; }

static int tag_of(const dt_pipeline *p, int kind, int chunk, int mb) {
    return (kind * p->plan->n_chunks + chunk) * p->n_mb + mb;
}

dt_status dt_pipeline_init(const dt_schedule *s, const dt_stage_plan *plan, dt_comm *pp,
                           dt_comm *scatter, dt_model *model, int n_slots, int n_grads,
                           int64_t boundary_floats, dt_mem *mem, dt_pipeline **out) {
    *out = NULL;
    if (s->pp != plan->pp || s->pp != pp->size || s->pp * s->n_chunks != plan->n_chunks)
        return dt_err_set(DT_ERR_ARG,
                          "pipeline: the schedule is for pp %d x %d chunks, the "
                          "model is cut into pp %d x %d chunks over %d ranks",
                          s->pp, s->n_chunks, plan->pp, plan->v, pp->size);
    int need = dt_sched_slots(s, pp->rank);
    if (need > n_slots)
        return dt_err_set(DT_ERR_ARG,
                          "pipeline: rank %d needs %d activation slots, the model "
                          "has %d",
                          pp->rank, need, n_slots);
    if (scatter && scatter->size > 1 && boundary_floats / scatter->size >= INT_MAX)
        return dt_err_set(DT_ERR_UNSUPPORTED,
                          "pipeline: a boundary of %lld floats is too large to gather in %d "
                          "pieces (plugin.pp_scatter)",
                          (long long)boundary_floats, scatter->size);
    if ((need = dt_sched_grads(s, pp->rank)) > n_grads)
        return dt_err_set(DT_ERR_ARG,
                          "pipeline: rank %d needs %d gradient buffers, the model "
                          "has %d",
                          pp->rank, need, n_grads);
    if (tag_of(&(dt_pipeline){.plan = plan, .n_mb = s->n_mb}, MSG_GRAD, plan->n_chunks, 0) >
        MAX_TAG)
        return dt_err_set(DT_ERR_UNSUPPORTED,
                          "pipeline: %d chunks x %d micro-batches need "
                          "more message tags than MPI guarantees",
                          plan->n_chunks, s->n_mb);
    dt_pipeline *p = calloc(1, sizeof *p);
    if (!p)
        return dt_err_set(DT_ERR_OOM, "pipeline: out of memory");
    int pairs = plan->n_chunks * s->n_mb;
    *p = (dt_pipeline){.s = s,
                       .plan = plan,
                       .pp = pp,
                       .scatter = scatter && scatter->size > 1 ? scatter : NULL,
                       .model = model,
                       .rank = pp->rank,
                       .n_mb = s->n_mb,
                       .split = dt_sched_split(s),
                       .n_inbox = dt_sched_inbox(s, pp->rank),
                       .mem = mem};
    bool pools = pool_init(&p->slots, "activation slot", n_slots, pairs) &&
                 pool_init(&p->grads, "gradient buffer", n_grads, pairs);
    p->recv_act = calloc((size_t)pairs, sizeof *p->recv_act);
    p->recv_grad = calloc((size_t)pairs, sizeof *p->recv_grad);
    p->inbox_of = malloc((size_t)pairs * sizeof *p->inbox_of);
    p->inbox = calloc((size_t)p->n_inbox + 1, sizeof *p->inbox);
    p->inbox_busy = calloc((size_t)p->n_inbox + 1, sizeof *p->inbox_busy);
    if (p->scatter)
        p->counts = malloc((size_t)p->scatter->size * sizeof *p->counts);
    dt_status st = DT_OK;
    if (!pools || !p->recv_act || !p->recv_grad || !p->inbox_of || !p->inbox || !p->inbox_busy ||
        (p->scatter && !p->counts))
        st = dt_err_set(DT_ERR_OOM, "pipeline: out of memory");
    size_t bytes = (size_t)boundary_floats * sizeof(float);
    for (int i = 0; st == DT_OK && i < p->n_inbox; i++)
        st = dt_mem_alloc(mem, DT_MEM_COMM, "pipeline.inbox", bytes, (void **)&p->inbox[i]);
    if (st != DT_OK) {
        dt_pipeline_free(p);
        return st;
    }
    *out = p;
    return DT_OK;
}

void dt_pipeline_free(dt_pipeline *p) {
    if (!p)
        return;
    for (int i = 0; p->inbox && i < p->n_inbox; i++)
        dt_mem_release(p->mem, p->inbox[i]);
    free(p->inbox);
    free(p->inbox_busy);
    free(p->inbox_of);
    free(p->counts);
    pool_free(&p->slots);
    pool_free(&p->grads);
    free(p->recv_act);
    free(p->recv_grad);
    free(p);
}

/* ---- slots and messages ------------------------------------------------------------------ */

static dt_status wait_traced(dt_pipeline *p, dt_comm_req *req, dt_span_kind kind, int chunk, int mb,
                             dt_trace *trace, int step) {
    if (!req->active)
        return DT_OK;
    double t0 = trace ? dt_trace_now(trace) : 0;
    DT_TRY(dt_comm_wait(p->pp, req));
    return trace ? dt_trace_add(trace, kind, chunk, mb, step, t0, dt_trace_now(trace)) : DT_OK;
}

/* The (chunk, mb)'s buffer of pool q, taken when first asked for: a free one, once what it
 * sent for its previous owner is on its way */
static dt_status take(dt_pipeline *p, pool *q, int chunk, int mb, dt_trace *trace, int step,
                      int *index) {
    int k = idx(p, chunk, mb);
    if (q->of[k] >= 0) {
        *index = q->of[k];
        return DT_OK;
    }
    for (int i = 0; i < q->n; i++) {
        buffer *b = &q->b[i];
        if (b->busy)
            continue;
        DT_TRY(wait_traced(p, &b->send, DT_SPAN_SEND, chunk, mb, trace, step));
        b->busy = true;
        q->of[k] = *index = i;
        return DT_OK;
    }
    return dt_err_set(DT_ERR_ARG,
                      "pipeline: no free %s for chunk %d micro-batch %d (all %d in use)", q->what,
                      chunk, mb, q->n);
}

static void give(dt_pipeline *p, pool *q, int chunk, int mb) {
    int k = idx(p, chunk, mb);
    q->b[q->of[k]].busy = false;
    q->of[k] = -1;
}

static int peer_of(const dt_pipeline *p, int chunk) { return chunk % p->s->pp; }

static int first_unit(const dt_pipeline *p, int chunk) { return p->plan->first[chunk]; }
static int end_unit(const dt_pipeline *p, int chunk) { return p->plan->first[chunk + 1]; }

static int64_t boundary_floats(const dt_pipeline *p, const dt_pipeline_batch *b) {
    return dt_model_boundary_count(p->model, b->B, b->T);
}

/* What of the n-float boundary at buf this rank sends or receives: its piece when pieced,
 * else all of it; *count floats. */
static float *own_part(const dt_pipeline *p, float *buf, int64_t n, int64_t *count) {
    if (!p->scatter) {
        *count = n;
        return buf;
    }
    int64_t first;
    dt_layout_piece(n, p->scatter->size, p->scatter->rank, &first, count);
    return buf + first;
}

static dt_status send_boundary(dt_pipeline *p, float *buf, int64_t n, int peer, int tag,
                               dt_comm_req *req) {
    int64_t k;
    float *part = own_part(p, buf, n, &k);
    return dt_comm_send(p->pp, part, k * (int64_t)sizeof(float), peer, tag, req);
}

static dt_status recv_boundary(dt_pipeline *p, float *buf, int64_t n, int peer, int tag,
                               dt_comm_req *req) {
    int64_t k;
    float *part = own_part(p, buf, n, &k);
    return dt_comm_recv(p->pp, part, k * (int64_t)sizeof(float), peer, tag, req);
}

/* A received boundary made whole: its pieces all-gathered over the tp group, in place */
static dt_status gather_boundary(dt_pipeline *p, float *buf, int64_t n) {
    if (!p->scatter)
        return DT_OK;
    int64_t first, k;
    for (int r = 0; r < p->scatter->size; r++) {
        dt_layout_piece(n, p->scatter->size, r, &first, &k);
        p->counts[r] = (int)k;
    }
    return dt_comm_allgather_f32(p->scatter, own_part(p, buf, n, &k), buf, p->counts, NULL);
}

/* A boundary's receive completed and, pieced, gathered; traced as one wait */
static dt_status arrived(dt_pipeline *p, dt_comm_req *req, float *buf, int64_t n, int chunk, int mb,
                         dt_trace *trace, int step) {
    bool waits = req->active || p->scatter;
    double t0 = trace ? dt_trace_now(trace) : 0;
    DT_TRY(dt_comm_wait(p->pp, req));
    DT_TRY(gather_boundary(p, buf, n));
    return trace && waits
               ? dt_trace_add(trace, DT_SPAN_RECV, chunk, mb, step, t0, dt_trace_now(trace))
               : DT_OK;
}

/* micro-batch mb of the step's batch */
static dt_batch micro_batch(const dt_pipeline_batch *b, int mb) {
    return (dt_batch){.input = (const char *)b->inputs + (size_t)mb * b->input_bytes,
                      .target = (const char *)b->targets + (size_t)mb * b->target_bytes,
                      .B = b->B,
                      .T = b->T};
}

/* ---- one step ------------------------------------------------------------------------------ */

static dt_status reset(dt_pipeline *p) {
    int pairs = p->plan->n_chunks * p->n_mb;
    pool_clear(&p->slots, pairs);
    pool_clear(&p->grads, pairs);
    for (int k = 0; k < pairs; k++)
        p->inbox_of[k] = -1;
    for (int i = 0; i < p->n_inbox; i++)
        p->inbox_busy[i] = false;
    return DT_OK;
}

/* Completes every request (even after an error, so none outlives the step's buffers). */
static dt_status drain(dt_pipeline *p) {
    dt_status st = pool_drain(p->pp, &p->slots), w = pool_drain(p->pp, &p->grads);
    st = st != DT_OK ? st : w;
    for (int k = 0; k < p->plan->n_chunks * p->n_mb; k++) {
        if ((w = dt_comm_wait(p->pp, &p->recv_act[k])) != DT_OK && st == DT_OK)
            st = w;
        if ((w = dt_comm_wait(p->pp, &p->recv_grad[k])) != DT_OK && st == DT_OK)
            st = w;
    }
    return st;
}

static dt_status run_action(dt_pipeline *p, const dt_sched_action *a, const dt_pipeline_batch *b,
                            dt_trace *trace, int step, double *loss_sum) {
    int c = a->stage, mb = a->mb, k = idx(p, c, mb), slot = -1, grad = -1;
    int last = p->plan->n_chunks - 1;
    int64_t n = boundary_floats(p, b);
    const dt_batch in = micro_batch(b, mb);
    dt_model *g = p->model;
    double t0 = trace ? dt_trace_now(trace) : 0;
    /* the model's hooks set the phase; trace steps count from 0, the timeline's from 1 */
    dt_mem_set_context(p->mem, step + 1, dt_mem_phase_now(p->mem), mb);
    switch (a->op) {
    case DT_SCHED_OP_RECV_ACT: {
        int i = 0;
        while (i < p->n_inbox && p->inbox_busy[i])
            i++;
        if (i == p->n_inbox)
            return dt_err_set(DT_ERR_ARG, "pipeline: no free inbox for chunk %d micro-batch %d", c,
                              mb);
        p->inbox_busy[i] = true;
        p->inbox_of[k] = i;
        return recv_boundary(p, p->inbox[i], n, peer_of(p, c - 1), tag_of(p, MSG_ACT, c, mb),
                             &p->recv_act[k]);
    }
    case DT_SCHED_OP_F:
        DT_TRY(take(p, &p->slots, c, mb, trace, step, &slot));
        if (p->inbox_of[k] >= 0) { /* the input arrived ahead: into the slot */
            float *box = p->inbox[p->inbox_of[k]];
            DT_TRY(arrived(p, &p->recv_act[k], box, n, c, mb, trace, step));
            memcpy(dt_model_boundary(g, slot, first_unit(p, c) - 1, b->B, b->T), box,
                   (size_t)n * sizeof(float));
            p->inbox_busy[p->inbox_of[k]] = false;
            p->inbox_of[k] = -1;
        }
        t0 = trace ? dt_trace_now(trace) : 0;
        DT_TRY(dt_model_forward_units(g, slot, first_unit(p, c), end_unit(p, c), &in));
        if (c == last) {
            double part;
            DT_TRY(dt_model_loss_slot(g, slot, &in, b->grad_scale, true, &part));
            *loss_sum += part;
        }
        return dt_trace_add(trace, DT_SPAN_FORWARD, c, mb, step, t0, dt_trace_now(trace));
    case DT_SCHED_OP_SEND_ACT:
        slot = p->slots.of[k];
        return send_boundary(p, dt_model_boundary(g, slot, end_unit(p, c) - 1, b->B, b->T), n,
                             peer_of(p, c + 1), tag_of(p, MSG_ACT, c + 1, mb),
                             &p->slots.b[slot].send);
    case DT_SCHED_OP_RECV_GRAD:
        DT_TRY(take(p, &p->grads, c, mb, trace, step, &grad));
        return recv_boundary(p, dt_model_boundary_grad(g, grad, b->B, b->T), n, peer_of(p, c + 1),
                             tag_of(p, MSG_GRAD, c, mb), &p->recv_grad[k]);
    case DT_SCHED_OP_B:
        slot = p->slots.of[k];
        DT_TRY(take(p, &p->grads, c, mb, trace, step, &grad)); /* the last chunk's starts here */
        if (c < last) /* its output's gradient, from the next chunk */
            DT_TRY(arrived(p, &p->recv_grad[k], dt_model_boundary_grad(g, grad, b->B, b->T), n, c,
                           mb, trace, step));
        t0 = trace ? dt_trace_now(trace) : 0;
        DT_TRY(dt_model_backward_units(g, slot, grad, first_unit(p, c), end_unit(p, c), &in,
                                       p->split));
        DT_TRY(dt_trace_add(trace, DT_SPAN_BACKWARD, c, mb, step, t0, dt_trace_now(trace)));
        if (dt_sched_gives_grad(a)) /* chunk 0: its input's gradient goes nowhere */
            give(p, &p->grads, c, mb);
        if (dt_sched_gives_slot(a, p->split)) /* chunk 0: nothing to send, the slot is free */
            give(p, &p->slots, c, mb);
        return DT_OK;
    case DT_SCHED_OP_W:
        slot = p->slots.of[k];
        DT_TRY(dt_model_weight_units(g, slot, first_unit(p, c), end_unit(p, c), &in));
        DT_TRY(dt_trace_add(trace, DT_SPAN_WEIGHT, c, mb, step, t0, dt_trace_now(trace)));
        if (dt_sched_gives_slot(a, p->split))
            give(p, &p->slots, c, mb);
        return DT_OK;
    case DT_SCHED_OP_SEND_GRAD:
        grad = p->grads.of[k];
        DT_TRY(send_boundary(p, dt_model_boundary_grad(g, grad, b->B, b->T), n, peer_of(p, c - 1),
                             tag_of(p, MSG_GRAD, c - 1, mb), &p->grads.b[grad].send));
        give(p, &p->grads, c, mb); /* reusable once the send completes (take waits) */
        if (dt_sched_gives_slot(a, p->split))
            give(p, &p->slots, c, mb);
        return DT_OK;
    default:
        return dt_err_set(DT_ERR_UNSUPPORTED, "pipeline: action %d is not executed", (int)a->op);
    }
}

dt_status dt_pipeline_run(dt_pipeline *p, const dt_pipeline_batch *b, dt_trace *trace, int step,
                          double *loss_sum) {
    *loss_sum = 0;
    DT_TRY(reset(p));
    int n;
    const dt_sched_action *a = dt_sched_row(p->s, p->rank, &n);
    dt_status st = DT_OK;
    for (int i = 0; i < n && st == DT_OK; i++)
        st = run_action(p, &a[i], b, trace, step, loss_sum);
    double t0 = trace ? dt_trace_now(trace) : 0;
    dt_status sd = drain(p);
    if (trace && st == DT_OK)
        st = dt_trace_add(trace, DT_SPAN_SEND, -1, -1, step, t0, dt_trace_now(trace));
    return st != DT_OK ? st : sd;
}

dt_status dt_pipeline_eval(dt_pipeline *p, const dt_pipeline_batch *b, int n_mb, double *loss_sum) {
    *loss_sum = 0;
    int last = p->plan->n_chunks - 1;
    int64_t n = boundary_floats(p, b);
    dt_model *g = p->model;
    dt_model_begin_eval(g);
    for (int mb = 0; mb < n_mb; mb++) {
        const dt_batch in = micro_batch(b, mb);
        for (int c = p->rank; c <= last; c += p->s->pp) {
            int u0 = first_unit(p, c), u1 = end_unit(p, c);
            if (c > 0) {
                float *in_ = dt_model_boundary(g, 0, u0 - 1, b->B, b->T);
                DT_TRY(
                    recv_boundary(p, in_, n, peer_of(p, c - 1), tag_of(p, MSG_ACT, c, mb), NULL));
                DT_TRY(gather_boundary(p, in_, n));
            }
            DT_TRY(dt_model_forward_units(g, 0, u0, u1, &in));
            if (c < last) {
                DT_TRY(send_boundary(p, dt_model_boundary(g, 0, u1 - 1, b->B, b->T), n,
                                     peer_of(p, c + 1), tag_of(p, MSG_ACT, c + 1, mb), NULL));
            } else {
                double part;
                DT_TRY(dt_model_loss_slot(g, 0, &in, 0.0f, false, &part));
                *loss_sum += part;
            }
        }
    }
    dt_model_drop_saved(g);
    return DT_OK;
}

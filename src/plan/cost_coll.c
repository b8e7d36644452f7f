/* The time model's collectives (see cost_impl.h): a call's seconds as latency plus its bus
 * bytes over its kind's rate, the rate dtrain probe measured at the call's message size where
 * the device has a table of them, else the group's bandwidth; the calls of a block's passes;
 * and the gradient group's traffic and what of it hides. Pure.
 */
#include "plan/cost_impl.h"

#include <math.h>

#include "plan/comm.h"
#include "plan/layout.h"

/* what dtrain probe measured for a kind at a whole message of `whole` bytes (0: nothing) */
static double measured_rate(const dt_plan_device *d, dt_plan_coll kind, double whole) {
    int n = d->n_coll < DT_PLAN_COLL_SIZES ? d->n_coll : DT_PLAN_COLL_SIZES;
    if (n < 1)
        return 0;
    if (n == 1 || whole <= d->coll_at[0])
        return d->coll[0][kind];
    for (int i = 1; i < n; i++)
        if (whole <= d->coll_at[i]) {
            double lo = d->coll_at[i - 1], f = log(whole / lo) / log(d->coll_at[i] / lo);
            return d->coll[i - 1][kind] + f * (d->coll[i][kind] - d->coll[i - 1][kind]);
        }
    return d->coll[n - 1][kind];
}

double dt_plan_kind_bw(const dt_plan_device *d, double group_bw, dt_plan_coll kind, double whole) {
    double r = measured_rate(d, kind, whole);
    return r > 0 && d->bandwidth > 0 ? group_bw * r / d->bandwidth : group_bw;
}

double dt_plan_coll_whole(dt_plan_coll kind, int p, double bytes) {
    if (p < 2 || kind == DT_PLAN_P2P)
        return bytes;
    return kind == DT_PLAN_ALLREDUCE ? bytes * p / (2.0 * (p - 1)) : bytes * p / (p - 1);
}

double dt_plan_cost_coll(const dt_plan_work *w, int p, double bytes, dt_plan_coll kind) {
    double bw = dt_plan_kind_bw(w->d, w->bw_tp, kind, dt_plan_coll_whole(kind, p, bytes));
    return p > 1 ? w->d->latency + bytes / bw : 0;
}
double dt_plan_cost_allreduce(const dt_plan_work *w, int p, double n) {
    return dt_plan_cost_coll(w, p, 2 * n * (p - 1) / p, DT_PLAN_ALLREDUCE);
}
double dt_plan_cost_gather(const dt_plan_work *w, int p, double n) {
    return dt_plan_cost_coll(w, p, n * (p - 1) / p, DT_PLAN_ALLGATHER);
}
double dt_plan_cost_reduce_scatter(const dt_plan_work *w, int p, double n) {
    return dt_plan_cost_coll(w, p, n * (p - 1) / p, DT_PLAN_REDUCE_SCATTER);
}

/* tensor-parallel region ops of a block's forward (and backward) */
double dt_plan_cost_block_tp(const dt_plan_work *w, bool backward) {
    double n = w->Nt * w->C * 4;
    if (w->sg && !backward) /* 2 gathers in, 2 reduce-scatters out */
        return 2 * dt_plan_cost_gather(w, w->tp, n) + 2 * dt_plan_cost_reduce_scatter(w, w->tp, n);
    if (w->sg) /* 4 gathers (the leaving ops' adjoints, the norm outputs rebuilt), 2
                * reduce-scatters, and the row-split parameters' gradients summed (2 norms'
                * weights, 2 row-parallel biases: 6 C floats, counted for Llama too) */
        return 4 * dt_plan_cost_gather(w, w->tp, n) + 2 * dt_plan_cost_reduce_scatter(w, w->tp, n) +
               dt_plan_cost_allreduce(w, w->tp, 6 * w->C * 4);
    return 2 * dt_plan_cost_allreduce(w, w->tp, n); /* forward: 2 all-reduces out; backward: 2 in */
}

/* hidden: one of tp pieces stays exposed, and what the products do not cover */
double dt_plan_cost_tp_exposed(const dt_plan_work *w, double comm, double gemm) {
    if (!(w->d->hides & DT_PLAN_HIDE_TP) || !w->sg || w->tp < 2)
        return comm;
    return fmax(comm / w->tp, comm - gemm);
}

double dt_plan_cost_a2a(const dt_plan_work *w, double width) {
    if (w->sp < 2)
        return 0;
    return w->d->latency + (w->N / w->sp) * (width / w->sp) * 4 * (w->sp - 1) / w->bw_sp;
}

/* the Ulysses all-to-alls of a block's forward (q|k|v's, the attention's) and backward (two
 * of the attention's width and one of q|k|v's, as the ledger, plan/comm.c, counts them) */
double dt_plan_cost_block_sp(const dt_plan_work *w, bool backward) {
    double qkv = dt_plan_cost_a2a(w, w->W), att = dt_plan_cost_a2a(w, w->A);
    return backward ? 2 * att + qkv : att + qkv;
}

/* A block's own passes around its tensor-parallel collectives (nn/region.c, nn/block.c),
 * in [rows, C] tensors of fp32. Forward, with all-reduces: each of its two entries and two
 * exits copies its [Nt, C] tensor (4 bytes read, 4 written an element); the split_gather
 * collectives land in place. Backward: each entry and exit adds its reduced gradient into its
 * destination (8 read, 4 written; an entry's holds Nr rows, an exit's Nt), and six sums are
 * zeroed first (4 written): the two column layers' inputs (Nt and Nr rows) and the two
 * exits' partials (Nt). */
double dt_plan_cost_tp_copies(const dt_plan_work *w, bool backward) {
    if (w->tp < 2 || w->d->tp_in_place)
        return 0;
    double nt = w->Nt * w->C, nr = w->Nr * w->C;
    double bytes = backward ? 12 * 2 * (nr + nt) + 4 * (4 * nt + 2 * nr) : w->sg ? 0 : 32 * nt;
    return bytes / w->act_bw;
}

/* ---- the gradient group ---------------------------------------------------------------- */

dt_plan_dp_traffic dt_plan_dp_traffic_of(const dt_plan_work *w, int world, int rank,
                                         const dt_schedule *sched, double n) {
    dt_plan_dp_traffic t = {0};
    dt_plan_comm led;
    if (dt_plan_comm_grad_bytes(w->c, world, rank, sched, &led) == DT_OK && led.grad_known) {
        t.gather_bytes = (double)led.grad_gather;
        t.gather_calls = led.calls_grad_gather;
        t.reduce_bytes = (double)(led.grad - led.grad_gather);
        t.reduce_calls = led.calls_grad - led.calls_grad_gather;
        return t;
    }
    int p = w->grad_p, units = w->L + 2;
    if (p < 2)
        return t;
    double share = 4 * n * (p - 1) / p;
    if (w->zero < 2) {
        double bucket = w->c->plugin.bucket_mb > 0 ? w->c->plugin.bucket_mb * 1048576.0 : 4 * n;
        t.reduce_bytes = 2 * share;
        t.reduce_calls = (int64_t)(4 * n / bucket) + 1;
    } else {
        t.reduce_bytes = w->n_mb * share;
        t.reduce_calls = (int64_t)w->n_mb * units + 1;
    }
    if (w->zero == 1 || w->zero == 2)
        t.gather_bytes = share, t.gather_calls = 1;
    if (w->zero == 3)
        t.gather_bytes = 2.0 * w->n_mb * share, t.gather_calls = 2 * (int64_t)w->n_mb * units;
    return t;
}

double dt_plan_behind(const dt_plan_work *w, double comm, double compute) {
    double hidden = comm < compute ? comm : compute;
    return comm - hidden + w->d->exposed_share * hidden;
}

double dt_plan_buckets_exposed(const dt_plan_work *w, const dt_plan_last_backward *lb,
                               double t_reduce, int64_t calls) {
    int closes[DT_MAX_CHUNKS + 2];
    dt_grad_buckets(lb->floats, lb->U, w->c->plugin.bucket_mb * 1048576.0, closes);
    double lat = w->d->latency, floats = 0, backward = 0;
    for (int u = 0; u < lb->U; u++)
        floats += (double)lb->floats[u], backward += lb->secs[u];
    double wire = t_reduce - (double)calls * lat, done = 0, link_free = 0, held = 0, exposed = 0;
    for (int u = lb->U - 1; u >= 0; u--) {
        done += lb->secs[u], held += (double)lb->floats[u];
        if (closes[u] < 0)
            continue;
        double start = done > link_free ? done : link_free;
        double end = start + wire * held / floats + lat;
        exposed += dt_plan_behind(w, end - start, backward > start ? backward - start : 0);
        link_free = end, held = 0;
    }
    return exposed;
}

#!/usr/bin/python3
"""Analytical count of dtrain's communication bytes per step and activation memory per rank,
for tensor parallelism (tp), Megatron sequence parallelism (sp_mode=split_gather, over the tp
ranks), Ulysses (sp ranks, all-to-all) and data parallelism with ZeRO 0-3 (over the gradient
group dp x sp). Benchmark support (bench/run_tp.sh), not a test.

Derived from the algorithm, not fitted: every collective a step makes, with its size, in the
order the code makes it (src/nn/block.c, src/models/gpt.c, src/nn/lm_head.c,
src/train/engine.c), counted with src/core/comm.c's bus-bytes convention. The activation count
replays carve_acts() in src/models/gpt.c (64-byte pieces) plus the token buffers of
src/train/booster.c.

  tp_model.py --arch gpt2 --layers 6 --embd 384 --heads 12 --vocab 256 --seq 256 --batch 8 \
      --tp 2 --mode split_gather [--explain]
  tp_model.py ... --metrics run.jsonl --mem-report run.mem.json   # compare with a run (JSON)
  tp_model.py --formulas                                          # the per-layer formulas
"""
import argparse
import json
import sys

F32, BF16 = 4, 2


# ---- bus bytes per call (src/core/comm.c): p = group size; a group of one moves nothing ----

def allreduce(p, nbytes):
    return 2 * nbytes * (p - 1) // p if p > 1 else 0


def gather_like(p, counts, rank):  # all-gather and reduce-scatter: the total less own piece
    return (sum(counts) - counts[rank]) * F32 if p > 1 else 0


def alltoall(p, n_per_block):
    return n_per_block * (p - 1) * F32 if p > 1 else 0


# ---- the layout and the local widths ---------------------------------------------------------

class Shape:
    def __init__(self, a):
        self.arch, self.L, self.C, self.NH = a.arch, a.layers, a.embd, a.heads
        self.NKV = a.kv_heads or a.heads
        self.hs = self.C // self.NH
        if a.ffn:
            self.F = a.ffn
        elif self.arch == "gpt2":
            self.F = 4 * self.C
        else:  # Llama: 2/3 of 4C rounded up to 64 (dt_gpt_ffn_hidden)
            self.F = ((8 * self.C + 2) // 3 + 63) // 64 * 64
        self.V, self.T, self.maxT = a.vocab, a.seq, a.max_seq or a.seq
        self.mb = a.micro or a.batch // a.dp  # micro-batch rows per rank
        self.n_mb = a.batch // a.dp // self.mb  # micro-batches per step
        self.prec = a.prec
        self.tp, self.sp, self.dp, self.zero = a.tp, a.sp, a.dp, a.zero
        self.sg = a.mode == "split_gather"
        self.rows = self.tp if self.sg else 1  # the comm the residual rows split over
        self.grad = self.sp * self.dp  # gradient group
        self.bucket_bytes = a.bucket_mb * 1048576.0
        # local (this tp rank's) widths: dt_block_dims
        self.NHl, self.NKVl, self.Fl = self.NH // self.tp, self.NKV // self.tp, self.F // self.tp
        self.W = (self.NHl + 2 * self.NKVl) * self.hs  # qkv width
        self.A = self.NHl * self.hs
        self.N = self.mb * self.T  # tokens of a micro-batch
        self.Nt = self.N // self.sp  # rows inside the tp region
        self.Nr = self.Nt // self.rows  # rows of the residual stream
        self.vocab_rows = (self.V + self.tp - 1) // self.tp


# ---- parameter arena (models/gpt.c: build_table_*, localize): units and their sizes ---------

def local_units(s):
    """Floats of each unit (embedding, blocks, final) in this rank's padded arena."""
    C, F, V, tp = s.C, s.F, s.V, s.tp

    def n(rows, cols, split):  # local numel, then padded to 16 floats (add_param / localize)
        if split == "rows":
            rows = (rows + tp - 1) // tp
        elif split == "cols":
            cols //= tp
        elif split == "qkv":
            rows = 3 * (rows // 3) // tp
        k = rows * cols
        return (k + 15) // 16 * 16

    if s.arch == "gpt2":
        emb = [n(V, C, "rows"), n(s.maxT, C, None)]
        blk = [n(C, 1, None), n(C, 1, None), n(3 * C, C, "qkv"), n(3 * C, 1, "qkv"),
               n(C, C, "cols"), n(C, 1, None), n(C, 1, None), n(C, 1, None),
               n(F, C, "rows"), n(F, 1, "rows"), n(C, F, "cols"), n(C, 1, None)]
        fin = [n(C, 1, None), n(C, 1, None)]
    else:
        kv = s.NKV * s.hs
        emb = [n(V, C, "rows")]
        blk = [n(C, 1, None), n(C, C, "rows"), n(kv, C, "rows"), n(kv, C, "rows"),
               n(C, C, "cols"), n(C, 1, None), n(F, C, "rows"), n(F, C, "rows"),
               n(C, F, "cols")]
        fin = [n(C, 1, None), n(V, C, "rows")]
    return [sum(emb)] + [sum(blk)] * s.L + [sum(fin)]


# ---- communication ---------------------------------------------------------------------------

class Ledger:
    """Every counted call: (comm, what, bytes), summed per comm."""

    def __init__(self):
        self.calls = []

    def add(self, comm, what, nbytes, times=1):
        for _ in range(times):
            self.calls.append((comm, what, nbytes))

    def total(self, comm):
        return sum(b for c, _, b in self.calls if c == comm)

    def explain(self):
        agg = {}
        for c, w, b in self.calls:
            k = (c, w)
            n, t = agg.get(k, (0, 0))
            agg[k] = (n + 1, t + b)
        return [{"comm": c, "what": w, "calls": n, "bytes": t} for (c, w), (n, t) in agg.items()]


def chunk_rows(V, N):  # nn/lm_head.c dt_lm_head_chunk_rows
    rows = (16 << 20) // (V if V > 0 else 1)
    rows = max(rows, 64)
    if rows >= N:
        return N
    n_chunks = (N + rows - 1) // rows
    return (N + n_chunks - 1) // n_chunks


def comm_step(s, rank=0):
    """The bytes of one training step on grad/tp/sp rank `rank` (0: what metrics report)."""
    g = Ledger()
    tp, sp, C = s.tp, s.sp, s.C
    fp32 = s.prec == "fp32"
    piece = s.Nt // tp * C  # one tp rank's rows of a [Nt, C] region tensor (split_gather)

    # region ops on [Nt, C] (nn/region.c): copy/reduce or seq_gather/seq_reduce_scatter
    def enter_fwd(what):  # copy: identity; seq_gather: all-gather rows
        if s.sg:
            g.add("tp", what + ": enter fwd all-gather", gather_like(tp, [piece] * tp, rank))

    def enter_bwd(what):  # copy: all-reduce; seq_gather: reduce-scatter rows
        if s.sg:
            g.add("tp", what + ": enter bwd reduce-scatter", gather_like(tp, [piece] * tp, rank))
        else:
            g.add("tp", what + ": enter bwd all-reduce", allreduce(tp, s.Nt * C * F32))

    def leave_fwd(what):  # reduce: all-reduce; seq_reduce_scatter: reduce-scatter rows
        if s.sg:
            g.add("tp", what + ": leave fwd reduce-scatter", gather_like(tp, [piece] * tp, rank))
        else:
            g.add("tp", what + ": leave fwd all-reduce", allreduce(tp, s.Nt * C * F32))

    def leave_bwd(what):  # reduce: identity; seq_reduce_scatter: all-gather rows
        if s.sg:
            g.add("tp", what + ": leave bwd all-gather", gather_like(tp, [piece] * tp, rank))

    # Ulysses all-to-alls (block.c): q|k|v [N, W] with sp groups of width W/sp, one block per
    # destination (N/sp) x (W/sp); attention output [N, A] over NH local heads: (N/sp)(A/sp)
    a2a_qkv = alltoall(sp, (s.N // sp) * (s.W // sp))
    a2a_att = alltoall(sp, (s.N // sp) * (s.NHl // sp) * s.hs)
    rows_ar = lambda nfloats: allreduce(s.rows, nfloats * F32)

    head_chunk = chunk_rows(s.vocab_rows, s.Nt)
    for _ in range(s.n_mb):
        # forward: embedding = vocabulary-parallel lookup, then leave the region
        leave_fwd("embedding")
        for _ in range(s.L):
            enter_fwd("ln1")
            g.add("sp", "qkv all-to-all fwd", a2a_qkv)
            g.add("sp", "attention out all-to-all fwd (adjoint)", a2a_att)
            leave_fwd("attn proj")
            enter_fwd("ln2")
            leave_fwd("mlp down")
        # loss: enter region, one all-gather of (max, sum, target logit) per row per chunk
        enter_fwd("head")
        for r0 in range(0, s.Nt, head_chunk):
            n = min(head_chunk, s.Nt - r0)
            g.add("tp", "head: xent stats all-gather", gather_like(tp, [3 * n] * tp, rank))
        enter_bwd("head")
        # backward
        g.add("tp" if s.sg else "-", "final norm grads all-reduce (rows)", rows_ar(2 * C))
        for _ in range(s.L):
            enter_fwd("ln2 recompute")  # norm output rebuilt: the entering op runs again
            leave_bwd("mlp down")
            enter_bwd("ln2")
            leave_bwd("attn proj")
            g.add("sp", "attention grad + out all-to-all (2x)", a2a_att, 2)
            g.add("sp", "qkv grad all-to-all bwd", a2a_qkv)
            enter_fwd("ln1 recompute")
            enter_bwd("ln1")
            g.add("tp" if s.sg else "-", "block row-param grads all-reduce (rows)", rows_ar(6 * C))
        if s.arch == "gpt2":
            g.add("tp" if s.sg else "-", "wpe grad all-reduce (rows)", rows_ar(s.T * C))
        leave_bwd("embedding")
    grad_comm(s, g, rank)
    g.add("tp", "grad-norm all-reduce (1 double)", allreduce(tp, 8))
    return g


def grad_comm(s, g, rank):
    """train/engine.c over the gradient group (dp x sp): buckets or per-unit ZeRO ops."""
    p, U = s.grad, s.L + 2
    units = local_units(s)
    n_total = sum(units)
    first = [sum(units[:u]) for u in range(U)]
    S = ((n_total + p - 1) // p + 15) // 16 * 16  # shard floats per rank
    ov = lambda a0, n0, a1, n1: max(0, min(a0 + n0, a1 + n1) - max(a0, a1))
    counts = lambda u: [ov(first[u], units[u], r * S, S) for r in range(p)]
    arena_counts = [ov(0, n_total, r * S, S) for r in range(p)]
    if s.zero < 2:  # buckets of whole units, all-reduced once per step (last micro-batch)
        hi, acc = U - 1, 0.0
        for u in range(U - 1, -1, -1):
            acc += 4.0 * units[u]
            if acc < s.bucket_bytes and u > 0:
                continue
            cnt = first[hi] + units[hi] - first[u]
            g.add("grad", "bucket all-reduce", allreduce(p, cnt * F32))
            hi, acc = u - 1, 0.0
    else:  # every unit's gradient reduce-scattered after its backward, every micro-batch
        for _ in range(s.n_mb):
            for u in range(U):
                g.add("grad", "unit reduce-scatter", gather_like(p, counts(u), rank))
        g.add("grad", "grad-norm all-reduce (1 double)", allreduce(p, 8))
    if s.zero in (1, 2):  # updated shards all-gathered into the whole arena
        g.add("grad", "weights all-gather (apply)", gather_like(p, arena_counts, rank))
    if s.zero == 3:  # weights gathered just in time into 2 rotating block slots + 2 fixed
        held = {}  # buffer -> unit

        def buf(u):
            return "emb" if u == 0 else "fin" if u == U - 1 else u % 2

        def gather(u):
            held[buf(u)] = u
            g.add("grad", "zero3 weights all-gather", gather_like(p, counts(u), rank))

        def ensure(u):
            if held.get(buf(u)) != u:
                gather(u)

        def prefetch(u):
            if 1 <= u <= U - 2 and held.get(buf(u)) != u:
                gather(u)

        head = 0 if s.arch == "gpt2" else U - 1
        for _ in range(s.n_mb):
            for u in range(U):  # forward: enter(u) gathers u if absent, prefetches u + 1
                ensure(u)
                prefetch(u + 1)
            ensure(head)
            for u in range(U - 1, -1, -1):  # backward: prefetches u - 1
                ensure(u)
                prefetch(u - 1)


# ---- activations (carve_acts in models/gpt.c, plus booster.c's token buffers) ---------------

def pad64(b):
    return (b + 63) // 64 * 64


def activations(s):
    """Exact bytes of the `activations` category, split into per-layer and the rest."""
    lp = s.prec == "bf16"
    Nt, Nr, N, C, W, A, F = s.Nt, s.Nr, s.N, s.C, s.W, s.A, s.Fl
    heads = s.NHl // s.sp
    layer = {
        "ln1 mean+rstd": 2 * pad64(Nr * F32), "qkv": pad64(Nt * W * F32),
        "att": pad64(Nt * A * F32), "lse": pad64(N * heads * F32), "x2": pad64(Nr * C * F32),
        "ln2 mean+rstd": 2 * pad64(Nr * F32), "h": pad64(Nt * F * F32),
        "x (block input, res[l])": pad64(Nr * C * F32),
    }
    if s.arch == "llama":
        layer["u"] = pad64(Nt * F * F32)
    if lp:  # the bf16 norm outputs are one shared buffer, rebuilt in backward
        layer["bf16 att, g"] = pad64(Nt * A * BF16) + pad64(Nt * F * BF16)
    # res is one carve of (L+1) rows x C: the per-layer share above plus one extra slice;
    # undo the per-slice rounding so the total is the single carve's
    res_total = pad64((s.L + 1) * Nr * C * F32)
    other = {
        "res[L] (last block output)": res_total - s.L * pad64(Nr * C * F32),
        "bf16 norm output (shared by the blocks)": pad64(Nt * C * BF16) if lp else 0,
        "final norm out + mean + rstd": pad64(Nr * C * F32) + 2 * pad64(Nr * F32),
        "losses": pad64(Nt * F32),
        "batch inputs + targets": 2 * s.mb * s.T * 4,
    }
    if lp:
        other["final norm bf16"] = pad64(Nt * C * BF16)
    if s.arch == "llama":
        other["rope cos + sin"] = 2 * s.T * (s.hs // 2) * F32
    per_layer = sum(layer.values())
    return {"per_layer": per_layer, "layer_terms": layer, "other": other,
            "total": s.L * per_layer + sum(other.values())}


def formula_per_layer(s):
    """The closed form of a layer's saved bytes (FORMULAS), without the 64-byte rounding."""
    sb, h, a, t, u, r = s.mb * s.T, s.C, s.NH, s.tp, s.sp, s.rows
    wq = (s.NH + 2 * s.NKV) * s.hs / h  # qkv width / h: 3 for GPT-2
    mlp = (2 if s.arch == "llama" else 1) * s.F / h  # saved MLP matmul outputs / h: 4 for GPT-2
    x = (8 + 16 / h) / r + (4 * wq + 4 + 4 * mlp + 4 * a / h) / t  # x, x2, stats | qkv, att, h, lse
    if s.prec == "bf16":  # bf16 copies of att and gelu(h); the norm outputs are rebuilt
        x += (2 + 2 * s.F / h) / t
    return sb * h * x / u


FORMULAS = """\
Per layer, fp32, flash attention (no s x s scores), GPT-2 block (F = 4h), with s = seq_len,
b = micro-batch, h = n_embd, a = heads, t = tp, u = Ulysses sp; bytes:
  saved per block: x 4sbh, x2 4sbh, ln1/ln2 mean+rstd 16sb, qkv 12sbh, att 4sbh, h 16sbh,
  lse 4sba (norm outputs and gelu(h) are recomputed in backward)
  none:                 sbh (40 + 16/h + 4a/h)
  tp = t:               sbh (8 + 16/h + (32 + 4a/h)/t)      x, x2 and the norm stats replicated
  tp = t, split_gather: sbh/t (40 + 16/h + 4a/h)            everything split over t
  Ulysses sp = u:       sbh/u (40 + 16/h + 4a/h)            everything split over u
  bf16 adds the bf16 copies of att and gelu(h): sbh (10/t) per layer (over u under Ulysses);
  the norm outputs are rebuilt in backward in both precisions (one shared bf16 buffer).
  Llama: qkv 4(a + 2 kv) hs / h, gate and up outputs 2 x 4F/h in place of 12 and 16.
Outside the layers: one more residual slice 4sbh/r + final norm output 4sbh/r + its stats
8sb/r (r = t under split_gather, else 1; /u under Ulysses) + per-token losses 4sb/u + the
token buffers 8sb (inputs and targets of the whole micro-batch, on every rank).
Korthikanti et al. 2022 (16-bit, their layer set, with the s x s attention scores):
  none sbh (34 + 5as/h); tp sbh (10 + 24/t + 5as/(ht)); tp + sp sbh/t (34 + 5as/h).
"""


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--embd", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=0)
    p.add_argument("--ffn", type=int, default=0)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--max-seq", type=int, default=0, help="wpe rows (default: --seq)")
    p.add_argument("--batch", type=int, default=8, help="global batch (sequences per step)")
    p.add_argument("--micro", type=int, default=0, help="micro-batch per rank (0: all rows)")
    p.add_argument("--prec", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--sp", type=int, default=1)
    p.add_argument("--mode", choices=["all_to_all", "split_gather"], default="all_to_all")
    p.add_argument("--dp", type=int, default=1)
    p.add_argument("--zero", type=int, default=0)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--rank", type=int, default=0, help="gradient-group rank (metrics: 0)")
    p.add_argument("--explain", action="store_true", help="list every collective")
    p.add_argument("--metrics", help="a run's --train.metrics file: compare every step")
    p.add_argument("--mem-report", help="a run's --train.mem_report file: compare")
    p.add_argument("--formulas", action="store_true")
    a = p.parse_args(argv)
    if a.formulas:
        print(FORMULAS, end="")
        return 0
    s = Shape(a)
    led = comm_step(s, a.rank)
    pred = {k: led.total(k) for k in ("grad", "tp", "sp")}
    act = activations(s)
    out = {"predicted": {"comm_bytes_grad": pred["grad"], "comm_bytes_tp": pred["tp"],
                         "comm_bytes_sp": pred["sp"], "activations": act["total"],
                         "activations_per_layer": act["per_layer"],
                         "formula_per_layer": formula_per_layer(s)}}
    ok = True
    if a.metrics:
        steps = [json.loads(line) for line in open(a.metrics)]
        meas = {k: sorted({r[k] for r in steps}) for k in
                ("comm_bytes_grad", "comm_bytes_tp", "comm_bytes_sp")}
        out["measured"] = {k: v[0] if len(v) == 1 else v for k, v in meas.items()}
        out["measured"]["steps"] = len(steps)
        for k, v in meas.items():
            ok &= v == [out["predicted"][k]]
    if a.mem_report:
        rep = json.load(open(a.mem_report))
        per = sorted({r["activations"] for r in rep["per_rank"]})
        out.setdefault("measured", {})["activations"] = per[0] if len(per) == 1 else per
        ok &= per == [act["total"]]
    if a.metrics or a.mem_report:
        out["match"] = ok
    json.dump(out, sys.stdout)
    print()
    if a.explain:
        print("\n| comm | collective (per step) | calls | bytes |\n|---|---|---:|---:|")
        for c in led.explain():
            if c["comm"] != "-" and c["bytes"]:
                print(f"| {c['comm']} | {c['what']} | {c['calls']} | {c['bytes']} |")
        print("\n| activations | bytes |\n|---|---:|")
        for k, v in act["layer_terms"].items():
            print(f"| per layer: {k} | {v} |")
        for k, v in act["other"].items():
            print(f"| {k} | {v} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

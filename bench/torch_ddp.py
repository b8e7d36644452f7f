#!/usr/bin/python3
"""PyTorch data-parallel benchmark peer (issue 3, item 10): time AdamW training steps of the same
GPT-2 / Llama models as bench/torch_step.py under torch.distributed DistributedDataParallel
(backend gloo, bucket_cap_mb 25), with --nproc processes started by this script itself
(torch.multiprocessing, rendezvous through a file:// store, each process pinned to one core).
Weak scaling: --batch is the PER-RANK batch; the global batch is nproc x batch. Prints one
JSON line:
  {"impl":"pytorch-ddp","nproc":..,"ms_per_step":..,"tokens_per_s":.. (global), ...}

  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1 \
    /usr/bin/python3 bench/torch_ddp.py --nproc 2 --n-layer 12 --n-head 12 --n-embd 768 \
      --vocab 50257 --batch 4 --seq-len 256 --warmup 2 --steps 3

--nproc 1 times a plain single process (no DDP wrapper, no process group): the baseline that
2-process DDP is compared with, exactly torch_step.py's step. A step is zero_grad + forward +
cross-entropy + backward (DDP all-reduces gradient buckets during backward) + global-norm clip +
AdamW (foreach); each rank reads its own rows of the global batch. Threads: 1 per process
(torch.set_num_threads(1), set_num_interop_threads(1)); gloo's own communication threads are
extra, as in any DDP run. --matmul as in torch_step.py (auto = torch's bundled oneDNN for fp32;
native = torch.matmul, i.e. whatever libblas.so.3 is: OpenBLAS when libopenblas0-pthread is
installed). --no-sync runs the same processes with DDP's no_sync() (no gradient communication):
the ceiling that communication overhead is measured against.
ms_per_step: median over --steps timed steps (after --warmup) of the slowest rank's step time.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models"))
import st  # noqa: E402
import torch_ref as R  # noqa: E402
import torch_step as TS  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description="PyTorch DDP (gloo) training-step benchmark")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--arch", choices=("gpt2", "llama"), default="gpt2")
    for name, default in (("n-layer", 12), ("n-head", 12), ("n-kv-head", 0), ("n-embd", 768),
                          ("vocab", 50257), ("batch", 4), ("seq-len", 256), ("steps", 3),
                          ("warmup", 2), ("ffn-hidden", 0), ("max-seq-len", 0), ("seed", 0)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--data", help="llm.c token shard; default: random tokens")
    p.add_argument("--matmul", choices=("auto", "onednn", "native"), default="auto")
    p.add_argument("--no-sync", action="store_true",
                   help="skip gradient communication (DDP no_sync): the no-communication ceiling")
    p.add_argument("--no-pin", action="store_true", help="do not pin rank r to core r")
    a = p.parse_args(argv)
    if a.nproc < 1 or a.steps < 1 or a.warmup < 0:
        p.error("--nproc and --steps must be >= 1 and --warmup >= 0")
    if a.matmul == "auto":
        a.matmul = "onednn"
    a.threads, a.dtype = 1, "fp32"
    return a


class FunctionalGPT(torch.nn.Module):
    """torch_ref's functional model as an nn.Module, so DDP can see (and hook) its parameters.
    Parameters are registered in torch_ref's order; DDP buckets them in reverse (the last
    blocks' gradients, ready first in backward, go in the first bucket)."""

    def __init__(self, P, cfg):
        super().__init__()
        self.names, self.cfg = list(P), cfg
        for i, n in enumerate(self.names):
            self.register_parameter(f"p{i}", P[n])

    def params_by_name(self):
        return {n: getattr(self, f"p{i}") for i, n in enumerate(self.names)}

    def forward(self, idx):
        return R.forward(self.params_by_name(), self.cfg, idx)


def batch_source(a, rank):
    """(inputs, targets) [B, T] of this rank: rows rank*B .. rank*B+B-1 of the global batch."""
    B, T, G = a.batch, a.seq_len, a.batch * a.nproc
    if a.data:
        tokens = st.read_tokens(a.data)
        for x, y in R.batches(tokens, G, T, 1 << 30):
            yield x[rank * B:(rank + 1) * B], y[rank * B:(rank + 1) * B]
    g = torch.Generator().manual_seed(a.seed + 1)
    while True:
        chunk = torch.randint(0, a.vocab, (G * T + 1,), generator=g)
        x, y = chunk[:-1].view(G, T), chunk[1:].view(G, T)
        yield x[rank * B:(rank + 1) * B], y[rank * B:(rank + 1) * B]


def worker(rank, a, store, out):
    if not a.no_pin and hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    R.use_onednn(a.matmul == "onednn")
    cfg = R.Config(a.arch, a.n_layer, a.n_head, a.n_embd, a.vocab, a.max_seq_len or a.seq_len,
                   n_kv_head=a.n_kv_head or a.n_head, ffn_hidden=TS.default_ffn(a))
    P = TS.init_params(cfg, a.seed)  # same seed on every rank (DDP also broadcasts rank 0's)
    model = FunctionalGPT(P, cfg)
    ddp = a.nproc > 1
    if ddp:
        dist.init_process_group("gloo", init_method="file://" + store, rank=rank,
                                world_size=a.nproc)
        model = torch.nn.parallel.DistributedDataParallel(
            model, bucket_cap_mb=a.bucket_cap_mb, broadcast_buffers=False,
            gradient_as_bucket_view=True)
    params = dict(zip(P.keys(), model.parameters()))
    opt = R.make_adamw(params, a.lr, (0.9, 0.95), 1e-8, a.weight_decay, foreach=True)
    data = batch_source(a, rank)
    times, loss = [], float("nan")
    if ddp:
        dist.barrier()
    for i in range(a.warmup + a.steps):
        x, y = next(data)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if ddp and a.no_sync:
            with model.no_sync():
                logits = model(x)
                loss_t = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
                loss_t.backward()
        else:
            logits = model(x)
            loss_t = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
            loss_t.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), a.grad_clip)
        opt.step()
        loss = loss_t.item()
        dt = time.perf_counter() - t0
        if ddp:  # the step of the slowest rank (the synchronous job's step)
            t = torch.tensor([dt, loss], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            dt = t[0].item()
        if i >= a.warmup:
            times.append(dt)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0],
                       dtype=torch.float64)
    if ddp:
        dist.all_reduce(rss, op=dist.ReduceOp.MAX)
        dist.destroy_process_group()
    if rank == 0:
        ms = 1000.0 * statistics.median(times)
        out.put({
            "impl": "pytorch-ddp" if ddp else "pytorch", "backend": "gloo" if ddp else None,
            "nproc": a.nproc, "no_sync": bool(ddp and a.no_sync), "arch": a.arch,
            "threads_per_proc": 1, "matmul": a.matmul, "bucket_cap_mb": a.bucket_cap_mb,
            "ms_per_step": round(ms, 3),
            "step_ms": [round(1000.0 * t, 3) for t in times],
            "tokens_per_s": round(a.nproc * a.batch * a.seq_len / (ms / 1000.0), 1),
            "peak_rss_mb_per_proc": round(rss.item(), 1), "torch": torch.__version__,
            "n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd, "vocab": a.vocab,
            "batch_per_rank": a.batch, "global_batch": a.nproc * a.batch, "seq_len": a.seq_len,
            "steps": a.steps, "warmup": a.warmup,
            "n_params": sum(p.numel() for p in P.values()), "final_loss": round(loss, 5)})


def main(argv):
    a = parse_args(argv)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="torch-ddp-") as tmp:
        store = os.path.join(tmp, "store")
        if a.nproc == 1:
            worker(0, a, store, out)
        else:
            mp.start_processes(worker, args=(a, store, out), nprocs=a.nproc, join=True,
                               start_method="spawn")
        print(json.dumps(out.get(timeout=60)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

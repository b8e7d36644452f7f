#!/usr/bin/python3
"""PyTorch benchmark peer: time AdamW training steps of the same GPT-2 / Llama models that
dtrain trains (models from tests/models/torch_ref.py), and print one JSON line:
  {"impl":"pytorch","arch":..,"dtype":..,"threads":..,"ms_per_step":..,"tokens_per_s":..,
   "peak_rss_mb":..,"torch":..., plus the shape}

  OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE env -u OPENBLAS_CORETYPE \
    /usr/bin/python3 bench/torch_step.py --arch gpt2 --n-layer 12 --n-head 12 --n-embd 768 \
      --vocab 50257 --batch 4 --seq-len 256 --threads 1 --dtype fp32 --warmup 1 --steps 2

Memory: glibc would serve every large tensor with mmap and unmap it on free, so each step
page-faults its activations and gradients afresh (PyTorch's CPU allocator does not cache).
Unless --malloc default, the script first calls mallopt(M_MMAP_MAX, 0) and
mallopt(M_TRIM_THRESHOLD, 1 GiB) through ctypes, as a tuned PyTorch deployment would
(jemalloc/tcmalloc, or these settings): freed blocks stay in the heap for the next step.
Environment: the caller sets it, not this script. Unset OPENBLAS_CORETYPE, set
OMP_WAIT_POLICY=PASSIVE and OMP_NUM_THREADS equal to --threads (the script also calls
torch.set_num_threads(threads)). A step is zero_grad + forward + cross-entropy + backward +
global-norm clip + AdamW (foreach).
Matmuls: Debian's python3-torch links the reference (netlib) BLAS, whose fp32 matmul runs at
a few GFLOP/s, so for fp32 the default (--matmul auto) routes every matmul through the oneDNN
that torch bundles (torch_ref.use_onednn, ~25x faster here); --matmul native measures torch as
installed. bf16 wraps forward + loss in torch.autocast("cpu", dtype=torch.bfloat16) with
fp32 master weights and uses torch.matmul (oneDNN's bf16 path needs AVX-512 BW/VL/DQ). ms_per_step is the
median over --steps timed steps after --warmup untimed ones; peak_rss_mb is ru_maxrss / 1024.
--max-seq-len (wpe rows) defaults to --seq-len. Data: random tokens (seeded), or --data SHARD
read sequentially (see bench/make_tokens.py).
"""
import argparse
import ctypes
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
import st  # noqa: E402
import torch_ref as R  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description="PyTorch training-step benchmark")
    p.add_argument("--arch", choices=("gpt2", "llama"), default="gpt2")
    for name, default in (("n-layer", 12), ("n-head", 12), ("n-kv-head", 0), ("n-embd", 768),
                          ("vocab", 50257), ("batch", 4), ("seq-len", 256), ("threads", 1),
                          ("steps", 5), ("warmup", 1), ("ffn-hidden", 0), ("max-seq-len", 0),
                          ("seed", 0)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--data", help="llm.c token shard; default: random tokens")
    p.add_argument("--malloc", choices=("tuned", "default"), default="tuned",
                   help="tuned: keep freed memory in glibc's heap (no per-step page faults)")
    p.add_argument("--matmul", choices=("auto", "onednn", "native"), default="auto",
                   help="auto: oneDNN for fp32, torch.matmul for bf16 (autocast)")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    if a.matmul == "auto":
        a.matmul = "onednn" if a.dtype == "fp32" else "native"
    if a.matmul == "onednn" and a.dtype != "fp32":
        p.error("--matmul onednn is fp32 only (autocast does not see it)")
    return a


def default_ffn(a):
    """GPT-2: 4C. Llama: 8C/3 rounded up to a multiple of 256 (the Llama convention)."""
    if a.ffn_hidden:
        return a.ffn_hidden
    return 4 * a.n_embd if a.arch == "gpt2" else 256 * math.ceil(8 * a.n_embd / 3 / 256)


def init_params(cfg, seed):
    """N(0, 0.02) matrices, zero biases, unit norm gains, as Parameters (fp32)."""
    g = torch.Generator().manual_seed(seed)
    P = {}
    for name, shape in R.param_shapes(cfg).items():
        if len(shape) >= 2:
            t = torch.randn(shape, generator=g) * 0.02
        else:
            t = torch.zeros(shape) if name.endswith(".bias") else torch.ones(shape)
        P[name] = torch.nn.Parameter(t)
    return P


def batch_source(a, V):
    """Yields (inputs, targets) [B, T] forever."""
    B, T = a.batch, a.seq_len
    if a.data:
        tokens = st.read_tokens(a.data)
        while True:
            yield from R.batches(tokens, B, T, 1 << 30)
    g = torch.Generator().manual_seed(a.seed + 1)
    while True:
        chunk = torch.randint(0, V, (B * T + 1,), generator=g)
        yield chunk[:-1].view(B, T), chunk[1:].view(B, T)


def train_step(P, cfg, opt, x, y, a):
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
        logits = R.forward(P, cfg, x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))
    loss.backward()
    if a.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(list(P.values()), a.grad_clip)
    opt.step()
    return loss.item()


M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc malloc.h


def tune_malloc():
    libc = ctypes.CDLL("libc.so.6")
    ok = libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1
    if not ok:
        raise SystemExit("torch_step.py: mallopt failed (not glibc?); use --malloc default")


def main(argv):
    a = parse_args(argv)
    if a.malloc == "tuned":
        tune_malloc()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    R.use_onednn(a.matmul == "onednn")
    cfg = R.Config(a.arch, a.n_layer, a.n_head, a.n_embd, a.vocab, a.max_seq_len or a.seq_len,
                   n_kv_head=a.n_kv_head or a.n_head, ffn_hidden=default_ffn(a))
    P = init_params(cfg, a.seed)
    opt = R.make_adamw(P, a.lr, (0.9, 0.95), 1e-8, a.weight_decay, foreach=True)
    data = batch_source(a, a.vocab)
    times, loss = [], float("nan")
    for i in range(a.warmup + a.steps):
        x, y = next(data)
        t0 = time.perf_counter()
        loss = train_step(P, cfg, opt, x, y, a)
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    ms = 1000.0 * statistics.median(times)
    print(json.dumps({
        "impl": "pytorch", "arch": a.arch, "dtype": a.dtype, "threads": a.threads,
        "matmul": a.matmul, "malloc": a.malloc,
        "cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY", "default"),
        "ms_per_step": round(ms, 3),
        "tokens_per_s": round(a.batch * a.seq_len / (ms / 1000.0), 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "torch": torch.__version__,
        "n_layer": a.n_layer, "n_head": a.n_head, "n_kv_head": cfg.n_kv_head,
        "n_embd": a.n_embd, "ffn_hidden": cfg.ffn_hidden, "vocab": a.vocab,
        "batch": a.batch, "seq_len": a.seq_len, "steps": a.steps, "warmup": a.warmup,
        "n_params": sum(p.numel() for p in P.values()), "final_loss": round(loss, 5)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

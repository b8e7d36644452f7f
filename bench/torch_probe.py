#!/usr/bin/python3
"""What the PyTorch peer runs on, and how fast its matmul routes are at one model's shapes,
so bench/run_bench.sh can give it its best and refuse an unfair comparison. Prints one JSON
line:
  {"torch": version, "blas": the libblas/openblas file loaded into this process,
   "openblas": bool, "cpu_capability": ATen's kernel level ("AVX2", "AVX512", ...),
   "fp32_gflops": {"native": .., "onednn": ..}, "bf16_gflops": .., "best_fp32": route,
   "pointwise_ms": ..}

  OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE env -u OPENBLAS_CORETYPE \
    /usr/bin/python3 bench/torch_probe.py --n-embd 768 --vocab 50257 --tokens 1024 --threads 2

GFLOP/s: the forward products of one transformer block (qkv, proj, fc, mlp proj) and an LM
head slice of 256 rows, x W^T as the models compute them, best of --reps after a warm-up:
"native" is torch.matmul (BLAS: OpenBLAS when installed), "onednn" the oneDNN route of
tests/models/torch_ref.py, bf16 torch.matmul on bf16 tensors (what autocast runs).
pointwise_ms: softmax + GELU + an AdamW-like update on [tokens, 4 C] (ATen's own kernels,
which ATEN_CPU_CAPABILITY picks). The caller sets the environment, as for torch_step.py.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
import torch_ref as R  # noqa: E402


def best_time(fn, reps):
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def shapes(C, V, N):
    """(M, K, N_out) of x [M, K] @ W[N_out, K]^T"""
    return [(N, C, 3 * C), (N, C, C), (N, C, 4 * C), (N, 4 * C, C), (256, C, V)]


def gflops(route, dtype, C, V, N, reps):
    R.use_onednn(route == "onednn")
    flops = secs = 0.0
    with torch.no_grad():
        for M, K, Nout in shapes(C, V, N):
            x, w = torch.randn(M, K).to(dtype), torch.randn(Nout, K).to(dtype)
            secs += best_time(lambda: R.linear(x, w), reps)
            flops += 2.0 * M * K * Nout
    R.use_onednn(False)
    return flops / secs / 1e9


def pointwise_ms(C, N, reps):
    x = torch.randn(N, 4 * C)
    p, g, m, v = (torch.randn(N, 4 * C) for _ in range(4))

    def run():
        torch.nn.functional.gelu(x, approximate="tanh")
        x.softmax(dim=-1)
        m.mul_(0.9).add_(g, alpha=0.1)
        v.mul_(0.95).addcmul_(g, g, value=0.05)
        p.addcdiv_(m, v.sqrt().add_(1e-8), value=-1e-4)
    return 1e3 * best_time(run, reps)


def loaded_blas():
    """the BLAS library file mapped into this process (after a matmul made torch load it)"""
    found = []
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            name = os.path.basename(path)
            if ("blas" in name or "openblas" in path) and path not in found:
                found.append(path)
    return found


def main(argv):
    ap = argparse.ArgumentParser(description="PyTorch peer probe")
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--tokens", type=int, default=1024, help="B x T of the run")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.randn(64, 64) @ torch.randn(64, 64)  # loads the BLAS
    libs = loaded_blas()
    cap = [l.split(":", 1)[1].strip() for l in torch.__config__.show().splitlines()
           if "CPU capability usage" in l]
    fp32 = {r: round(gflops(r, torch.float32, a.n_embd, a.vocab, a.tokens, a.reps), 1)
            for r in ("native", "onednn")}
    bf16 = round(gflops("native", torch.bfloat16, a.n_embd, a.vocab, a.tokens, 1), 1)
    print(json.dumps({
        "torch": torch.__version__, "blas": libs, "openblas": any("openblas" in p for p in libs),
        "cpu_capability": cap[0] if cap else "?", "threads": a.threads,
        "fp32_gflops": fp32, "best_fp32": max(fp32, key=fp32.get), "bf16_gflops": bf16,
        "pointwise_ms": round(pointwise_ms(a.n_embd, a.tokens, a.reps), 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

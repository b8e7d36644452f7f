#!/usr/bin/env python3
"""What a tuned GPU implementation reaches of its datasheet (a benchmark, run on a GPU).

The planner's GPU presets (src/cli/plan_device.c) scale the datasheet peaks by a matmul
efficiency that depends on the product's shape, a memory-bound efficiency and an attention
efficiency. This measures those three on the GPU at hand with PyTorch (cuBLAS, and its
fused scaled-dot-product attention), so the constants come from a measurement, not a guess:

  * bf16 matmuls [m, k] x [k, n] over the shapes a transformer's blocks run (m = tokens of a
    micro-batch, n and k = hidden sizes over tensor-parallel degrees): TFLOP/s each, and
    the least-squares fit of rate = E * peak * prod(x / (x + h)) over x in (m, n, k);
  * a device-to-device copy of 1 GiB: bytes read and written per second;
  * causal attention (batch 1, 4096 tokens, heads of 128) forward and backward: TFLOP/s
    counting the causal half of 4 T^2 hs a head (the planner's convention).

    python3 bench/gpu_rates.py --peak 989e12 [--out FILE.json]

--peak: the GPU's dense bf16 datasheet rate (H100 SXM and H200: 989 TFLOP/s; A100: 312).
"""
import argparse
import itertools
import json
import math
import sys

import torch


def timed(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = math.inf
    for _ in range(3):
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) / 1e3 / iters)
    return best


def matmul_rates():
    rows = []
    for m, n, k in itertools.product([2048, 8192, 16384], [256, 512, 1024, 2048, 4096, 8192,
                                                          16384], [512, 1024, 2048, 4096,
                                                                   8192, 16384]):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        t = timed(lambda: torch.matmul(x, w))
        rows.append((m, n, k, 2 * m * n * k / t))
        del x, w
    return rows


def fit(rows, peak):
    """E and h minimising the squared log error of E * peak * prod(x / (x + h))."""
    best = None
    for h in range(0, 1025, 4):
        logs = [math.log(r / peak) - sum(math.log(x / (x + h)) for x in (m, n, k))
                for m, n, k, r in rows]
        e = sum(logs) / len(logs)
        err = sum((v - e) ** 2 for v in logs)
        if best is None or err < best[0]:
            best = (err, math.exp(e), h)
    err, e, h = best
    return e, h, math.sqrt(err / len(rows))


def copy_rate():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = timed(lambda: b.copy_(a), iters=10)
    return 2 * n / t


def attention_rates(T=4096, heads=32, hs=128):
    q, k, v = (torch.randn(1, heads, T, hs, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    flops = heads * 2 * T * T * hs  # the causal half of 4 T^2 hs a head
    f = timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    g = torch.randn_like(y)

    def fwd_bwd():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(g)
    fb = timed(fwd_bwd)
    return flops / f, 2 * flops / max(fb - f, 1e-9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peak", type=float, required=True)
    ap.add_argument("--out", default="")
    o = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    name = torch.cuda.get_device_name()
    print(f"device: {name}; torch {torch.__version__}, CUDA {torch.version.cuda}")
    rows = matmul_rates()
    e, h, rms = fit(rows, o.peak)
    print(f"matmuls: {len(rows)} shapes; fit: rate = {e:.3f} x peak x prod(x / (x + {h})), "
          f"rms log error {rms:.3f}")
    for m, n, k, r in rows:
        model = e * o.peak * (m / (m + h)) * (n / (n + h)) * (k / (k + h))
        print(f"  m {m:6d} n {n:6d} k {k:6d}: {r / 1e12:7.1f} TFLOP/s "
              f"({r / o.peak:.3f} of peak; fit {model / r - 1:+.1%})")
    cp = copy_rate()
    print(f"copy: {cp / 1e12:.3f} TB/s read + written")
    af, ab = attention_rates()
    print(f"attention (causal, T 4096, hs 128): forward {af / 1e12:.1f} TFLOP/s "
          f"({af / o.peak:.3f} of peak), backward {ab / 1e12:.1f} ({ab / o.peak:.3f})")
    if o.out:
        json.dump({"device": name, "peak": o.peak, "fit_efficiency": e, "fit_half": h,
                   "fit_rms_log": rms, "matmuls": rows, "copy_bytes_s": cp,
                   "attention_fwd": af, "attention_bwd": ab}, open(o.out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

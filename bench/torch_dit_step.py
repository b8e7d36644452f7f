#!/usr/bin/python3
"""PyTorch benchmark peer of dtrain's video DiT: time rectified-flow training steps of the DiT
of tests/models/torch_dit.py (the model the cross-check holds equal to dtrain's) and print one
JSON line:
  {"impl": "pytorch-dit", "ms_per_step", "tokens_per_s" (patch tokens), "gflops", "mfu" (with
   --peak-gflops), "peak_rss_mb", "cpu", "isa", "torch", "blas", "cpu_capability", shape...}

  OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE env -u OPENBLAS_CORETYPE \
    /usr/bin/python3 bench/torch_dit_step.py --frames 16 --height 32 --width 32 \
      --n-layer 4 --n-embd 256 --n-head 4 --batch 2 --threads 2 --peak-gflops 190

A step is what dtrain train does for a DiT: zero_grad, x_t = (1 - t) x0 + t eps with a
logit-normal t, forward, MSE against v = eps - x0, backward, global-norm clip, AdamW (foreach).
The peer is given its best as bench/torch_step.py does: glibc's malloc keeps freed memory
(mallopt M_MMAP_MAX 0, M_TRIM_THRESHOLD 1 GiB) unless --malloc default; --matmul onednn routes
the linears' matmuls (and the patch embedding, as a matmul of patches) through torch's
bundled oneDNN, attention's products stay batched torch.matmul; native uses torch's own (OpenBLAS when installed: the caller
checks with bench/torch_probe.py); bf16 runs forward + loss under torch.autocast. The caller
sets OMP_NUM_THREADS (= --threads), OMP_WAIT_POLICY=PASSIVE and unsets OPENBLAS_CORETYPE.
ms_per_step: median of --steps timed steps after --warmup; MFU: model FLOPs (6 x the forward's
matmul MACs + attention, dtrain's count) per second over --peak-gflops (bench_gemm's oneDNN
peak at the same thread count, so both sides share the denominator).
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
import torch_dit as D  # noqa: E402
import torch_probe  # noqa: E402  (loaded_blas)
import torch_step  # noqa: E402  (tune_malloc)

ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile")


def cpu_info():
    """(model name, the ISA flags of ISA_FLAGS this CPU has)"""
    model, flags = "?", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    return model, " ".join(x for x in ISA_FLAGS if x in flags)


def parse_args(argv):
    p = argparse.ArgumentParser(description="PyTorch DiT training-step benchmark")
    for name, default in (("frames", 16), ("channels", 3), ("height", 32), ("width", 32),
                          ("patch-t", 1), ("patch-h", 2), ("patch-w", 2), ("n-layer", 4),
                          ("n-head", 4), ("n-embd", 256), ("n-classes", 0), ("batch", 2),
                          ("threads", 1), ("steps", 4), ("warmup", 2), ("seed", 0),
                          ("text-len", 0)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--attn", choices=("full", "spatial_temporal"), default="full")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--matmul", choices=("onednn", "native"), default="onednn")
    p.add_argument("--malloc", choices=("tuned", "default"), default="tuned")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--peak-gflops", type=float, default=0.0,
                   help="matmul peak for the MFU (0: no MFU)")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0:
        p.error("--steps must be >= 1 and --warmup >= 0")
    if a.matmul == "onednn" and a.dtype != "fp32":
        p.error("--matmul onednn is fp32 only (autocast does not see it)")
    return a


def main(argv):
    a = parse_args(argv)
    if a.malloc == "tuned":
        torch_step.tune_malloc()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    D.use_onednn(a.matmul == "onednn")
    torch.manual_seed(a.seed)
    try:
        cfg = D.DiTConfig(attn=a.attn, frames=a.frames, channels=a.channels, height=a.height,
                          width=a.width, patch_t=a.patch_t, patch_h=a.patch_h,
                          patch_w=a.patch_w, n_layer=a.n_layer, n_head=a.n_head,
                          n_embd=a.n_embd, n_classes=a.n_classes, text_len=a.text_len)
    except D.InputError as e:
        raise SystemExit(f"torch_dit_step.py: {e}")
    model = D.DiT(cfg)
    opt = D.make_adamw(model, a.lr, (0.9, 0.95), 1e-8, 0.1)
    for g in opt.param_groups:
        g["foreach"] = True
    shape = (a.batch, a.frames, a.channels, a.height, a.width)
    gen = torch.Generator().manual_seed(a.seed + 1)
    times, loss = [], float("nan")
    for i in range(a.warmup + a.steps):
        x0, eps = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
        t = torch.sigmoid(torch.randn(a.batch, generator=gen))
        labels = torch.randint(0, a.n_classes + 1, (a.batch,), generator=gen) \
            if a.n_classes else None
        text = None
        if a.text_len:  # every clip's whole caption: text_len random bytes
            text = torch.cat([torch.full((a.batch, 1), float(a.text_len)),
                              torch.randint(0, 256, (a.batch, a.text_len), generator=gen).float()],
                             dim=1)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            _, l = D.flow_loss(model, x0, eps, t, labels, text)
        l.float().backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        loss = l.item()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    ms = 1000.0 * statistics.median(times)
    flops = cfg.flops_per_clip() * a.batch / (ms / 1e3)
    cpu, isa = cpu_info()
    cap = [l.split(":", 1)[1].strip() for l in torch.__config__.show().splitlines()
           if "CPU capability usage" in l]
    print(json.dumps({
        "impl": "pytorch-dit", "dtype": a.dtype, "threads": a.threads, "matmul": a.matmul,
        "malloc": a.malloc, "ms_per_step": round(ms, 3),
        "tokens_per_s": round(a.batch * cfg.tokens / (ms / 1e3), 1),
        "gflops": round(flops / 1e9, 2),
        "mfu": round(flops / (a.peak_gflops * 1e9), 4) if a.peak_gflops > 0 else None,
        "peak_gflops": a.peak_gflops or None,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "cpu": cpu, "isa": isa, "torch": torch.__version__,
        "blas": os.path.basename(next(iter(torch_probe.loaded_blas()), "?")),
        "cpu_capability": cap[0] if cap else "?",
        "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY", "default"),
        "attn": a.attn, "frames": a.frames, "channels": a.channels, "height": a.height,
        "width": a.width, "patch": [a.patch_t, a.patch_h, a.patch_w], "n_layer": a.n_layer,
        "n_head": a.n_head, "n_embd": a.n_embd, "n_classes": a.n_classes,
        "text_len": a.text_len, "batch": a.batch,
        "tokens_per_clip": cfg.tokens, "flops_per_clip": cfg.flops_per_clip(),
        "n_params": sum(p.numel() for p in model.parameters()), "steps": a.steps,
        "warmup": a.warmup, "final_loss": round(loss, 5)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

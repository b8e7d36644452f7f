#!/usr/bin/python3
"""The planner against published GPU training runs (a benchmark, not a test).

Each row is a run whose layout, model and throughput were published; `dtrain plan` is given
the model and batch with the published layout pinned (tensor, pipeline and data-parallel
degrees, and whatever else the source states: recomputation, sequence parallelism,
micro-batch size, interleaving), searches what the source leaves open, and predicts tokens/s
per GPU on the named device preset. Prints, per row: the source, the layout, whether it fits
in 80 GiB, predicted and published tokens/s per GPU and the signed error; then the median
and largest |error|.

Published tokens/s per GPU, from each source's own figures:
  * Narayanan et al. 2021 (arXiv 2104.04473) Table 1, A100: per-GPU teraFLOP/s X and their
    Eq. (3), F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) FLOPs an iteration (with
    recomputation): tokens/s/GPU = B s X / F. s = 2048, V = 51200, full recomputation,
    interleaved schedule (chunks not stated: searched), micro-batch not stated: searched.
  * Korthikanti et al. 2022 (arXiv 2205.05198) Tables 3 and 5, A100: iteration times of full
    recomputation and of selective recomputation + sequence parallelism, data parallelism 1,
    micro-batch 1, s = 2048, V = 51200, 3 interleaved stages for 175B and 530B:
    tokens/s/GPU = B s / (t n).
  * Megatron-LM README (commit f2e5db4, July 2024, images/model_table.png), H100: per-GPU
    teraFLOP/s, s = 4096, V = 131072, data parallelism 48; FLOPs per token without
    recomputation, 72 l h^2 (1 + s/(6h) + V/(12 l h)) (the model-FLOPs count of Korthikanti
    et al., Sec. 6); recomputation, micro-batch and schedule not stated: searched.

    bench/run_calibrate.py [--dtrain build/dtrain] [--only SOURCE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (params label, heads, hidden, layers, tp, pp, gpus, batch, TFLOP/s per GPU)
NARAYANAN = [
    ("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137), ("3.6B", 32, 3072, 30, 2, 1, 64, 512, 138),
    ("7.5B", 32, 4096, 36, 4, 1, 128, 512, 142), ("18B", 48, 6144, 40, 8, 1, 256, 1024, 135),
    ("39B", 64, 8192, 48, 8, 2, 512, 1536, 138), ("76B", 80, 10240, 60, 8, 4, 1024, 1792, 140),
    ("145B", 96, 12288, 80, 8, 8, 1536, 2304, 148),
    ("310B", 128, 16384, 96, 8, 16, 1920, 2160, 155),
    ("530B", 128, 20480, 105, 8, 35, 2520, 2520, 163),
    ("1T", 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
# (label, heads, hidden, layers, tp, pp, gpus, batch, chunks, t_full, t_selective_sp)
KORTHIKANTI = [
    ("22B", 64, 6144, 48, 8, 1, 8, 4, 1, 1.42, 1.10),
    ("175B", 96, 12288, 96, 8, 8, 64, 64, 3, 18.13, 13.75),
    ("530B", 128, 20480, 105, 8, 35, 280, 280, 3, 49.05, 37.83),
    ("1T", 160, 25600, 128, 8, 64, 512, 512, 1, 94.42, 71.49),
]
# (label, heads, hidden, layers, tp, pp, gpus, batch, TFLOP/s per GPU)
MEGATRON_H100 = [
    ("1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8), ("7.1B", 32, 4096, 30, 2, 1, 96, 192, 465.9),
    ("16B", 48, 6144, 32, 4, 1, 192, 192, 489.1), ("32B", 56, 7168, 48, 8, 1, 384, 192, 459.6),
    ("70B", 64, 8192, 84, 8, 2, 768, 384, 419.7), ("119B", 80, 10240, 92, 8, 4, 1536, 768, 420.5),
    ("177B", 96, 12288, 96, 8, 6, 2304, 1152, 432.8),
    ("314B", 128, 16384, 96, 8, 8, 3072, 1536, 474.4),
    ("462B", 144, 18432, 112, 8, 16, 6144, 3072, 459.9),
]


# Megatron-LM of 2021-22 ran attention unfused (the s x s scores written out, a fused
# softmax): Korthikanti et al. Table 4's selective recomputation of the 22B layer (the
# attention core's forward again: 4 b s^2 h / t = 5.15e10 FLOPs at b 4, s 2048, h 6144, t 8)
# adds 13.2 - 11.9 = 1.3 ms, 40 TFLOP/s; the backward is taken at the same rate.
UNFUSED_ATTENTION = ["--attn16", "40T,40T"]


# Megatron-LM of 2021-22 reduced gradients with its own data-parallel wrapper (the default
# --DDP-impl local): one all-reduce of the whole fp32 gradient buffer after the last
# micro-batch's backward, in train_step, not overlapped with it; and its tensor-parallel
# collectives ran between the products, not beside them (the presets model today's tuned
# software, which overlaps both: see the 2024 rows).
LOCAL_DDP = ["--plugin.overlap=false", "--overlap", "none"]

# Megatron-LM of 2021-22 sent a pipeline boundary in tensor-parallel pieces, gathered over
# NVLink on arrival (Narayanan et al. 2021, Sec. 4.1, "scatter/gather communication
# optimization"; on by default in that code): dtrain's plugin.pp_scatter. It changes nothing
# where sequence parallelism splits the boundary already.
SCATTER = ["--plugin.pp_scatter=true"]


def model_args(heads, hidden, layers, vocab, seq, batch):
    return ["--config", os.path.join(REPO, "configs/gpt2-124m.ini"), "--model.arch=gpt2",
            f"--model.n_head={heads}", f"--model.n_embd={hidden}", f"--model.n_layer={layers}",
            f"--model.vocab_size={vocab}", f"--model.max_seq_len={seq}",
            f"--train.seq_len={seq}", f"--train.batch_size={batch}", "--train.export=",
            "--checkpoint.every=0", "--plugin.precision=bf16"]


def plan(dtrain, device, gpus, args, explain):
    cmd = [dtrain, "plan", "--world", str(gpus), "--device", device] + args
    cmd += ["--explain"] if explain else ["--json", "--top", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        return None, (out.stderr.strip().splitlines() or ["no output"])[-1]
    return json.loads(lines[0]), None


def scattered(lay):
    """plugin.pp_scatter where it is in force (dtrain's layout: tp and pp, rows whole)"""
    return (lay.get("plugin.pp_scatter") and lay["plugin.pp_size"] > 1 and
            lay["plugin.tp_size"] > 1 and lay["plugin.sp_mode"] != "split_gather")


def rows():
    for name, a, h, l, tp, pp, n, b, x in NARAYANAN:
        s, v = 2048, 51200
        flops = 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
        pins = [f"--plugin.tp_size={tp}", f"--plugin.pp_size={pp}", "--plugin.ac=full",
                "--plugin.ac_every=1", "--plugin.sp_mode=all_to_all", "--plugin.sp_size=1",
                "--plugin.type=ddp"] + LOCAL_DDP + SCATTER
        pins += UNFUSED_ATTENTION
        yield ("narayanan2021", name, "a100-80gb", n, model_args(a, h, l, v, s, b) + pins,
               False, b * s * x * 1e12 / flops, f"tp{tp} pp{pp} dp{n // (tp * pp)} ac=full")
    for name, a, h, l, tp, pp, n, b, v_chunks, t_full, t_sel in KORTHIKANTI:
        s, v = 2048, 51200
        sched = (["--plugin.pp_schedule=interleaved", f"--plugin.pp_chunks={v_chunks}"]
                 if v_chunks > 1 else ["--plugin.pp_schedule=1f1b"])
        base = model_args(a, h, l, v, s, b) + [f"--plugin.tp_size={tp}", f"--plugin.pp_size={pp}",
                                              "--train.micro_batch_size=1", "--plugin.sp_size=1",
                                              "--plugin.type=ddp", "--plugin.ac_every=1"]
        base += LOCAL_DDP + SCATTER
        base += UNFUSED_ATTENTION
        base += sched if pp > 1 else []
        yield ("korthikanti2022", name + " full", "a100-80gb", n,
               base + ["--plugin.ac=full", "--plugin.sp_mode=all_to_all"], True,
               b * s / (t_full * n), f"tp{tp} pp{pp} v{v_chunks} mb1 ac=full")
        yield ("korthikanti2022", name + " sel+sp", "a100-80gb", n,
               base + ["--plugin.ac=selective", "--plugin.sp_mode=split_gather"], True,
               b * s / (t_sel * n), f"tp{tp}+sp pp{pp} v{v_chunks} mb1 ac=selective")
    for name, a, h, l, tp, pp, n, b, x in MEGATRON_H100:
        s, v = 4096, 131072
        flops_token = 72 * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))
        pins = [f"--plugin.tp_size={tp}", f"--plugin.pp_size={pp}", "--plugin.sp_size=1",
                "--plugin.type=zero1"]  # --overlap-param-gather: the distributed optimizer
        yield ("megatron_h100_2024", name, "h100-80gb", n, model_args(a, h, l, v, s, b) + pins,
               False, x * 1e12 / flops_token, f"tp{tp} pp{pp} dp{n // (tp * pp)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtrain", default=os.path.join(REPO, "build/dtrain"))
    ap.add_argument("--only", default="")
    o = ap.parse_args()
    errs = []
    print("| source | model | device | layout pinned | planned | fits | GiB | predicted tok/s/GPU "
          "| published | error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for src, name, dev, n, args, explain, published, pinned in rows():
        if o.only and o.only != src:
            continue
        r, why = plan(o.dtrain, dev, n, args, explain)
        if r is None:
            print(f"| {src} | {name} | {dev} | {pinned} | refused: {why} | | | | "
                  f"{published:.0f} | |")
            errs.append(float("inf"))
            continue
        lay = r["layout"]
        value = lambda key: int([x for x in args if x.startswith(key + "=")][0].split("=")[1])
        tokens = value("--train.batch_size") * value("--train.seq_len")
        tps = tokens / (r["predicted"]["step_ms"] / 1e3) / n
        err = tps / published - 1
        errs.append(abs(err))
        planned = (f"mb{lay['train.micro_batch_size'] or '-'} {lay['plugin.pp_schedule']}"
                   f"/{lay['plugin.pp_chunks']} ac={lay['plugin.ac']} {lay['plugin.type']}"
                   f"{' ' + lay['plugin.sp_mode'] if lay['plugin.tp_size'] > 1 else ''}"
                   f"{' scatter' if scattered(lay) else ''}")
        gib = r["predicted"]["total"] / 2**30
        print(f"| {src} | {name} | {dev} | {pinned} | {planned} | "
              f"{'yes' if r['fits'] else 'no'} | {gib:.1f} | {tps:.0f} | {published:.0f} | "
              f"{100 * err:+.1f}% |")
    finite = [e for e in errs if e != float("inf")]
    if finite:
        print(f"\nrows {len(errs)}, planned {len(finite)}; median |error| "
              f"{100 * statistics.median(finite):.1f}%, largest {100 * max(finite):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())

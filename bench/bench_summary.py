#!/usr/bin/python3
"""Helpers for bench/run_bench.sh (stdlib only).

  bench_summary.py median METRICS.jsonl WARMUP     -> median step_ms of steps > WARMUP,
                                                      and the last record's fields, as JSON
  bench_summary.py flops ARCH L C V T              -> model FLOPs per trained token, dtrain's
                                                      count: 6 x matmul weights (incl. the LM
                                                      head, excl. wpe) + 6 L C T
  bench_summary.py table RESULTS.jsonl             -> the markdown table
  bench_summary.py perf REPORT.txt [TOP]           -> grouped per-symbol breakdown (markdown)
  bench_summary.py dnnl LOG TOKENS                 -> the last step's oneDNN matmuls by shape
                                                      (dtrain log with DNNL_VERBOSE=1)
"""
import json
import re
import statistics
import sys


def cmd_median(path, warmup):
    recs = [json.loads(l) for l in open(path) if l.strip()]
    timed = [r["step_ms"] for r in recs if r["step"] > warmup]
    if not timed:
        sys.exit("bench_summary: no timed steps in " + path)
    out = dict(recs[-1])
    out["median_step_ms"] = statistics.median(timed)
    out["timed_step_ms"] = timed
    print(json.dumps(out))


def flops_per_token(arch, L, C, V, T):
    assert arch == "gpt2"
    matmul_weights = V * C + L * 12 * C * C  # wte as LM head; qkv 3C^2, proj C^2, MLP 8C^2
    return 6.0 * matmul_weights + 6.0 * L * C * T


def fmt_ms(x):
    return "%.0f" % x if x >= 100 else "%.1f" % x


def cmd_table(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    print("| shape | thr | prec | peak GFLOP/s (oneDNN) | dtrain ms/step | dtrain tok/s "
          "| dtrain MFU | PyTorch ms/step (matmul) | PyTorch MFU | time dtrain/PyTorch "
          "| RSS dtrain MiB | RSS PyTorch MiB | RSS ratio | PyTorch matmul GFLOP/s (probe) "
          "| CPU (ISA) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        peak = r["peak_gflops"]
        d_ms = r["dtrain_ms"]
        d_tps = r["tokens"] / (d_ms / 1e3)
        d_mfu = r["flops_per_token"] * d_tps / (peak * 1e9)
        p_ms = r.get("torch_ms")
        if p_ms:
            p_mfu = r["flops_per_token"] * r["tokens"] / (p_ms / 1e3) / (peak * 1e9)
            p_cell = "%s (%s%s%s)" % (fmt_ms(p_ms), r["torch_matmul"],
                                      ", ATen " + r["torch_aten"] if r.get("torch_aten") else "",
                                      ", 1 step" if r.get("torch_steps") == 1 else "")
            p_mfu_s = "%.1f%%" % (100 * p_mfu)
            ratio = "%.2f" % (d_ms / p_ms)
        else:
            p_cell = "not run (est. ~%.0f s)" % (r["torch_est_ms"] / 1e3) \
                if r.get("torch_est_ms") else "not run"
            p_mfu_s = "-"
            ratio = "(~%.3f est.)" % (d_ms / r["torch_est_ms"]) if r.get("torch_est_ms") else "-"
        d_rss = r["dtrain_rss_kb"] / 1024
        p_rss = r.get("torch_rss_kb")
        mm = r.get("torch_mm_gflops")
        print("| %s | %d | %s | %.1f | %s | %.0f | %.1f%% | %s | %s | %s | %.0f | %s | %s | %s | %s |"
              % (r["shape"], r["threads"], r["precision"], peak, fmt_ms(d_ms), d_tps, 100 * d_mfu,
                 p_cell, p_mfu_s, ratio, d_rss, "%.0f" % (p_rss / 1024) if p_rss else "-",
                 "%.2f" % (d_rss * 1024 / p_rss) if p_rss else "-",
                 "%.1f" % mm if mm else "-",
                 "%s (%s)" % (r.get("cpu", "?"), r.get("isa", "?"))))


def cmd_perf(path, top):
    """Input: perf report --no-children --sort dso,symbol --stdio -g none. oneDNN's JIT code
    has no symbols ([JIT] tid N or [unknown] dso, or libdnnl's own code): grouped."""
    groups = {}
    line_re = re.compile(r"^\s*([\d.]+)%\s+(\S+(?: tid \d+)?)\s+\[(.)\]\s+(.*?)\s*$")
    for line in open(path):
        m = line_re.match(line)
        if not m:
            continue
        pct, dso, kind = float(m.group(1)), m.group(2), m.group(3)
        sym = re.sub(r"(\s+-)+\s*$", "", m.group(4))  # empty IPC columns
        if dso.startswith("[JIT]") or (dso == "[unknown]" and sym.startswith("0x")):
            key = "oneDNN matmul (JIT kernels)"
        elif "dnnl" in dso:
            key = "oneDNN library (non-JIT: reorders, dispatch) [%s]" % dso
        elif kind == "k":
            key = "Linux kernel (page faults, munmap, page freeing)"
        elif sym.startswith("0x"):
            key = "%s (unresolved)" % dso
        else:
            key = "%s [%s]" % (sym, dso)
        groups[key] = groups.get(key, 0.0) + pct
    print("| share of step | symbol (group) |")
    print("|---|---|")
    total = 0.0
    for key, pct in sorted(groups.items(), key=lambda kv: -kv[1])[:top]:
        print("| %.1f%% | %s |" % (pct, key))
        total += pct
    print("| %.1f%% | (everything else) |" % max(0.0, sum(groups.values()) - total))


def cmd_dnnl(path, tokens):
    """Matmuls between the last two 'step' log lines (= the last step), grouped by shape."""
    lines = open(path).read().splitlines()
    steps = [i for i, l in enumerate(lines) if l.startswith("step ")]
    lo, hi = (steps[-2], steps[-1]) if len(steps) >= 2 else (0, steps[-1])
    groups, total = {}, 0.0
    for l in lines[lo + 1:hi]:
        if ",exec," not in l or ",matmul," not in l:
            continue
        f = l.split(",")
        desc, ms = f[-2], float(f[-1])
        src, wei = desc.split(":")[0].split("x"), desc.split(":")[1].split("x")
        M = 1
        for d in src[:-1]:
            M *= int(d)
        K, N = int(src[-1]), int(wei[-1])
        wl = "B^T" if "wei_f32::blocked:ba" in l or "wei_bf16::blocked:ba" in l else "B"
        sl = "A^T" if "src_f32::blocked:ba" in l or "src_bf16::blocked:ba" in l else "A"
        # dW = dY^T X (A transposed), forward X W^T (B transposed), dX = dY W
        role = "weight grad" if sl == "A^T" else ("forward" if wl == "B^T" else "input grad")
        key = (role, M, K, N, sl, wl)
        g = groups.setdefault(key, [0, 0.0])
        g[0] += 1
        g[1] += ms
        total += ms
    print("| matmul (role) | M x K x N | layout | calls | ms in step | GFLOP/s |")
    print("|---|---|---|---|---|---|")
    for (role, M, K, N, sl, wl), (n, ms) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print("| %s | %d x %d x %d | %s*%s | %d | %.0f | %.1f |" % (
            role, M, K, N, sl, wl, n, ms, 2.0 * M * K * N * n / (ms / 1e3) / 1e9))
    print("| **all matmuls** | | | %d | %.0f | |" % (sum(g[0] for g in groups.values()), total))


def main(argv):
    if argv[0] == "median":
        cmd_median(argv[1], int(argv[2]))
    elif argv[0] == "flops":
        a = argv[1:]
        print("%.0f" % flops_per_token(a[0], *map(int, a[1:])))
    elif argv[0] == "table":
        cmd_table(argv[1])
    elif argv[0] == "dnnl":
        cmd_dnnl(argv[1], int(argv[2]))
    elif argv[0] == "perf":
        cmd_perf(argv[1], int(argv[2]) if len(argv) > 2 else 15)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])

#!/usr/bin/env python3
"""Per-kernel timings from the kernel tests' --perf modes, at 1 and 2 OpenMP threads, best of
several runs (the first figure of each line: lowest ms, or highest GB/s / GFLOP/s), and the
2-vs-1-thread speedup. The tests time every ISA variant the CPU runs (attention and
cross-entropy: base, avx2, avx512, avx512-bf16) and print one `perf ...` line per case.

    bench/kernel_perf.py BUILD_DIR [--reps N] [--tests attention,xent,...]
"""
import argparse
import os
import re
import subprocess

TESTS = ["attention", "xent", "act", "adamw", "cast", "reduce", "norm", "rope", "quant"]
NUM = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|GB/s|GFLOP/s)")


def run(build, test, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
    out = subprocess.run([os.path.join(build, "tests", "kernels_test_" + test), "--perf"],
                         env=env, capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        if not line.startswith("perf "):
            continue
        m = NUM.search(line.split(":", 1)[1] if ":" in line else line)
        if not m:
            continue
        key = re.sub(r"\s*threads=\d+", "", line.split(":", 1)[0])
        rows[key] = (float(m.group(1)), m.group(2), line.split(":", 1)[1].strip())
    return rows


def better(a, b):
    """a beats b: lower time, or higher rate"""
    return a[0] < b[0] if a[1] == "ms" else a[0] > b[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tests", default=",".join(TESTS))
    a = ap.parse_args()
    for test in a.tests.split(","):
        best = {1: {}, 2: {}}
        for _ in range(a.reps):
            for t in (1, 2):  # interleaved, so both see the same background load
                for k, v in run(a.build, test, t).items():
                    if k not in best[t] or better(v, best[t][k]):
                        best[t][k] = v
        for k in best[1]:
            one, two = best[1][k], best[2].get(k)
            if two is None:
                continue
            sp = one[0] / two[0] if one[1] == "ms" else two[0] / one[0]
            print(f"{k}: 1 thread {one[0]:g} {one[1]}, 2 threads {two[0]:g} {two[1]}, "
                  f"speedup x{sp:.2f}   [1t: {one[2]}]")


if __name__ == "__main__":
    main()

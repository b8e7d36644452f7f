#!/usr/bin/python3
"""Compare two dtrain runs: per-step losses (metrics JSON lines) and exported weights.

  compare_runs.py REF_METRICS REF.safetensors RUN_METRICS RUN.safetensors RTOL [--losses-only]
                 [--scales]

Exit 0 when every loss and every tensor agrees within RTOL (relative; tensors by
||a - b|| / ||b||), 1 otherwise, naming the worst offender. --scales: the fp16 loss scale and
skipped flag of every step must also be equal.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import st  # noqa: E402


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def losses(path):
    return [r["loss"] for r in records(path)]


def scale_diffs(ref_m, run_m):
    out = []
    for i, (x, y) in enumerate(zip(records(ref_m), records(run_m))):
        for key in ("loss_scale", "skipped", "skipped_steps"):
            if key not in x or x.get(key) != y.get(key):
                out.append(f"step {i + 1} {key} {y.get(key)} vs {x.get(key)}")
    return out


def main():
    ref_m, ref_w, run_m, run_w, rtol = sys.argv[1:6]
    rtol = float(rtol)
    losses_only = "--losses-only" in sys.argv[6:]
    bad = scale_diffs(ref_m, run_m) if "--scales" in sys.argv[6:] else []
    a, b = losses(ref_m), losses(run_m)
    if len(a) != len(b):
        bad.append(f"{len(b)} steps logged, reference has {len(a)}")
    for i, (x, y) in enumerate(zip(a, b)):
        if abs(x - y) > rtol * abs(x):
            bad.append(f"step {i + 1} loss {y:.9g} vs {x:.9g}")
    if losses_only:
        for line in bad:
            print("FAIL", line)
        print(f"losses {len(b)} steps, worst relative difference "
              f"{max(abs(x - y) / abs(x) for x, y in zip(a, b)):.2e}")
        return 1 if bad else 0
    wa, _ = st.read_safetensors(ref_w)
    wb, _ = st.read_safetensors(run_w)
    worst, worst_name = 0.0, ""
    for name, ref in wa.items():
        if name not in wb:
            bad.append(f"tensor {name} missing")
            continue
        err = float(np.linalg.norm(wb[name] - ref) / (np.linalg.norm(ref) + 1e-30))
        if err > worst:
            worst, worst_name = err, name
    if worst > rtol:
        bad.append(f"tensor {worst_name} differs by {worst:.3g} (relative)")
    for line in bad:
        print("FAIL", line)
    print(f"losses {len(b)} steps, worst tensor {worst_name} {worst:.2e}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

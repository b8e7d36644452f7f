#!/usr/bin/python3
"""Compare a run's measured memory peaks with the planner's prediction in its mem_report.

  mem_check.py REPORT.json [TOLERANCE]

On every rank, every category above 2% of the rank's total, and the total, must be within
TOLERANCE (relative, default 0.05) of the measured peak. Prints the worst ratio and whether
every category of every rank is equal to the byte; exit 1 on a miss or when the report has no
prediction.
"""
import json
import sys

CATS = ["params", "grads", "optim", "activations", "comm", "temp", "total"]


def main(path, tol):
    rep = json.load(open(path))
    worst, where, bad, unequal = 1.0, "", [], 0
    for r, entry in enumerate(rep["per_rank"]):
        pred = entry.get("predicted")
        if pred is None:
            print(f"{path}: rank {r} has no prediction")
            return 1
        for c in CATS:
            m, p = entry[c], pred[c]
            unequal += m != p
            if c != "total" and m <= 0.02 * entry["total"] and p <= 0.02 * pred["total"]:
                continue
            ratio = p / m if m else (1.0 if p == 0 else float("inf"))
            if abs(ratio - 1) > abs(worst - 1):
                worst, where = ratio, f"rank {r} {c}"
            if abs(ratio - 1) > tol:
                bad.append(f"rank {r} {c}: predicted {p:.0f}, measured {m:.0f} (x{ratio:.4f})")
    print(f"{path}: worst predicted/measured {worst:.6f}" + (f" ({where})" if where else "") +
          ("; every category exact" if not unequal else f"; {unequal} not exact"))
    for b in bad:
        print("  MISS " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.05))

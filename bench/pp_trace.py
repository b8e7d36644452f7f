#!/usr/bin/env python3
"""Pipeline benchmark helpers (issue 5, item 7): bubble share from a dtrain step trace, the
activation slots a schedule needs per rank, and the markdown tables of bench/run_pp.sh.

  pp_trace.py bubble TRACE.json [--skip N]   -> JSON: measured bubble shares (first N steps skipped)
  pp_trace.py slots SCHEDULE.txt             -> JSON: activation slots per rank (as the executor counts)
  pp_trace.py tables RESULTS.jsonl           -> markdown: bubble, activation memory, step time

Bubble, per timed step, over one window for all ranks (the ranks' clocks share an origin taken
after a barrier): from the first rank's step start to the last rank's end of schedule (the start
of its post-schedule "collective" span). The measured bubble is time outside F, B and W spans /
(ranks x window), summed over the timed steps: the step's pipeline makespan less the compute.
A rank that finishes its schedule early waits in the collective for the others; that wait is
inside the window, so it counts, as it does in the unit-time theory. Waiting for a receive or
a send is a "recv"/"send" span in the trace, not an "idle" one, so the trace's derived idle
spans alone miss most of the bubble; both are reported too. The whole-step share extends the
window to the last rank's step end and counts the optimizer as work:
1 - (F + B + optimizer) / (ranks x (first step start .. last step end)).
"""
import json
import os
import re
import statistics
import sys
from collections import defaultdict

ACTION = re.compile(r"(\d+)([A-Z]+)(\d+)")


def load_spans(path):
    ev = json.load(open(path))["traceEvents"]
    return [e for e in ev if e.get("ph") == "X"]


def bubble(path, skip=1):
    spans = load_spans(path)
    by = defaultdict(list)  # (rank, step) -> spans
    for e in spans:
        by[(e["tid"], e["args"]["step"])].append(e)
    ranks = sorted({r for r, _ in by})
    steps = sorted({s for _, s in by})
    timed = steps[skip:] if len(steps) > skip else steps
    tot = defaultdict(float)
    fb_rank = defaultdict(float)
    for step in timed:
        cut = {}
        for rank in ranks:
            es = by[(rank, step)]
            st = [e for e in es if e["name"] == "step"]
            coll = [e for e in es if e["name"] == "collective"]
            if len(st) != 1 or len(coll) != 1:
                raise SystemExit(f"{path}: rank {rank} step {step}: expected one step and one "
                                 f"collective span, got {len(st)} and {len(coll)}")
            cut[rank] = (st[0]["ts"], coll[0]["ts"], st[0]["ts"] + st[0]["dur"])
        # one window for all ranks (their clocks share an origin taken after a barrier)
        w0 = min(c[0] for c in cut.values())
        w1 = max(c[1] for c in cut.values())  # the last rank's end of schedule
        w2 = max(c[2] for c in cut.values())  # the last rank's end of step
        for rank in ranks:
            es = by[(rank, step)]

            def dur(pattern, lo, hi):
                return sum(max(0.0, min(e["ts"] + e["dur"], hi) - max(e["ts"], lo))
                           for e in es if re.fullmatch(pattern, e["name"]))
            fb = dur(r"[FBW]\d+", w0, w1)
            fb_rank[rank] += fb
            tot["fb"] += fb
            tot["wait"] += dur(r"recv\d+|send", w0, w1)
            tot["idle"] += dur(r"idle", w0, w1)
            tot["work_step"] += dur(r"[FBW]\d+|optimizer", w0, w2)
        tot["sched"] += w1 - w0
        tot["step"] += w2 - w0
    p, n = len(ranks), len(timed)
    return {
        "steps_timed": n,
        "ranks": p,
        "sched_share": 1 - tot["fb"] / (p * tot["sched"]),
        "wait_share": tot["wait"] / (p * tot["sched"]),
        "idle_share": tot["idle"] / (p * tot["sched"]),
        "step_share": 1 - tot["work_step"] / (p * tot["step"]),
        "sched_ms": tot["sched"] / 1e3 / n,
        "step_ms": tot["step"] / 1e3 / n,
        "per_rank_sched_share": [1 - fb_rank[r] / tot["sched"] for r in ranks],
        "per_rank_fb_ms": [fb_rank[r] / 1e3 / n for r in ranks],
    }


def slots(path):
    """Activation slots per rank, counted as dt_pipeline_slots does: a (chunk, micro-batch)
    takes a slot at its F (an input received earlier waits in an inbox buffer), and gives it
    back when its input gradient is sent (SG), or at its B on chunk 0, which sends none; with
    a split backward (W actions), at its W."""
    res = []
    lines = [l.strip() for l in open(path) if l.strip() and not l.startswith("#")]
    split = any(ACTION.fullmatch(a)[2] == "W" for l in lines for a in l.split(","))
    for line in lines:
        held, live, peak = set(), 0, 0
        for a in line.split(","):
            m = ACTION.fullmatch(a)
            if not m:
                raise SystemExit(f"{path}: cannot parse action {a!r}")
            chunk, op, mb = int(m[1]), m[2], int(m[3])
            k = (chunk, mb)
            gives = op == "W" if split else (op == "SG" or (op == "B" and chunk == 0))
            if op == "F" and k not in held:
                held.add(k)
                live += 1
                peak = max(peak, live)
            elif gives and k in held:
                held.discard(k)
                live -= 1
        res.append(peak)
    return res


def theory(kind, p, m, v):
    """Bubble as a share of the step (idle / (ranks x step)), unit-time model, F and B uniform.
    GPipe and 1F1B: (p-1)/(m+p-1). Interleaved 1F1B with v chunks per rank: Megatron's bubble
    time over ideal compute is (p-1)/(v m); as a share of the whole step that is
    (p-1)/(v m + p-1)."""
    if kind in ("gpipe", "1f1b"):
        return (p - 1) / (m + p - 1)
    if kind == "interleaved":
        return (p - 1) / (v * m + p - 1)
    return None


def tables(path):
    rows = [json.loads(l) for l in open(path)]
    work = os.path.dirname(os.path.abspath(path))
    for r in rows:  # the bubble from the trace next to the results, if there is one
        tr = os.path.join(work, f"{r['kind']}-p{r['pp']}-m{r['m']}-v{r['v']}.trace.json")
        if r.get("bubble") and os.path.exists(tr):
            r["bubble"] = bubble(tr, 1)
    runs = [r for r in rows if r["kind"] != "none"]
    ref = [r for r in rows if r["kind"] == "none"]

    print("Bubble share, measured from the trace vs theory (timed steps only, first step "
          "excluded):\n")
    print("| schedule | p | m | v | theory (formula) | theory (`schedule --stats`, F=1 B=2) | "
          "measured, schedule part | of which recv/send waits | trace idle spans | "
          "measured, whole step | per rank (schedule part) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in sorted(runs, key=lambda r: (r["kind"] == "zbh1", r["pp"], r["kind"], r["m"])):
        th = theory(r["kind"], r["pp"], r["m"], r["v"])
        ths = "%.3f" % th if th is not None else "-"
        st = r.get("stats_bubble")
        sts = "%.3f" % st if st is not None else "-"
        b = r.get("bubble")
        if not b:
            print(f"| {r['kind']} | {r['pp']} | {r['m']} | {r['v']} | {ths} | {sts} | "
                  f"not run: {r.get('note', 'failed')} | | | | |")
            continue
        per = " / ".join("%.2f" % x for x in b["per_rank_sched_share"])
        cont = " (CONTENDED)" if r.get("contended") else ""
        print(f"| {r['kind']}{cont} | {r['pp']} | {r['m']} | {r['v']} | {ths} | {sts} | "
              f"**{b['sched_share']:.3f}** | {b['wait_share']:.3f} | {b['idle_share']:.3f} | "
              f"{b['step_share']:.3f} | {per} |")

    # activation memory: per rank, fit fixed + per-slot bytes from the GPipe runs with the
    # fewest and the most slots, then check every run against it
    print("\nPeak activation memory per rank (`mem_report` per_rank `activations`), vs slots x "
          "per-slot bytes:\n")
    fit = {}
    for p in sorted({r["pp"] for r in runs}):
        g = [r for r in runs if r["pp"] == p and r["kind"] == "gpipe" and r.get("mem")]
        for rank in range(p):
            pts = sorted({(r["slots"][rank], r["mem"][rank]) for r in g})
            if len(pts) >= 2 and pts[-1][0] != pts[0][0]:
                (s0, a0), (s1, a1) = pts[0], pts[-1]
                b = (a1 - a0) / (s1 - s0)
                fit[(p, rank)] = (a0 - b * s0, b)
    M = 2**20
    print("| schedule | p | m | v | rank | slots (executor) | expected in flight | "
          "activations MiB | fixed + slots x per-slot MiB | per-slot MiB (fit) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in sorted(runs, key=lambda r: (r["pp"], r["kind"], r["m"])):
        if not r.get("mem"):
            continue
        for rank in range(r["pp"]):
            p, m = r["pp"], r["m"]
            exp = {"gpipe": m, "1f1b": min(m, p - rank), "zbh1": min(m, p)}.get(r["kind"], "-")
            f = fit.get((p, rank))
            pred = "%.2f" % ((f[0] + f[1] * r["slots"][rank]) / M) if f else "-"
            per = "%.2f" % (f[1] / M) if f else "-"
            print(f"| {r['kind']} | {p} | {m} | {r['v']} | {rank} | {r['slots'][rank]} | {exp} | "
                  f"{r['mem'][rank] / M:.2f} | {pred} | {per} |")

    print("\nStep time, same global batch (median step_ms of the timed steps):\n")
    print("| layout | schedule | m | global batch (seqs) | ms/step (median) | steps (ms) | "
          "speed-up vs 1 x 1 | trace bubble (schedule part) |")
    print("|---|---|---:|---:|---:|---|---:|---:|")
    for rr in ref:
        base = rr["ms"]
        cont = " (CONTENDED)" if rr.get("contended") else ""
        print(f"| 1 process x 1 thread{cont} | - | {rr['m']} | {rr['batch']} | {base:.0f} | "
              f"{', '.join('%.0f' % x for x in rr['steps_ms'])} | 1.00x | - |")
        for r in sorted(runs, key=lambda r: (r["pp"], r["kind"])):
            if r.get("ms") is None or r["batch"] != rr["batch"]:
                continue
            lay = f"pp {r['pp']}" + (" (4 ranks on 2 cores)" if r["pp"] > 2 else "")
            lay += " (CONTENDED)" if r.get("contended") else ""
            kind = r["kind"] + (f" v={r['v']}" if r["v"] > 1 else "")
            print(f"| {lay} | {kind} | {r['m']} | {r['batch']} | {r['ms']:.0f} | "
                  f"{', '.join('%.0f' % x for x in r['steps_ms'])} | {base / r['ms']:.2f}x | "
                  f"{r['bubble']['sched_share']:.3f} |")


def main(argv):
    if len(argv) >= 2 and argv[0] == "bubble":
        skip = int(argv[argv.index("--skip") + 1]) if "--skip" in argv else 1
        print(json.dumps(bubble(argv[1], skip)))
    elif len(argv) == 2 and argv[0] == "slots":
        print(json.dumps(slots(argv[1])))
    elif len(argv) == 2 and argv[0] == "tables":
        tables(argv[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

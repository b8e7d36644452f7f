"""Checks one rank's memory timeline (train.mem_timeline) against the run's memory report and
against the model shape, independently of dtrain's own code.

    check_timeline.py TIMELINE MEM_REPORT RANK STEPS SAVED_BYTES

SAVED_BYTES: the bytes a (slot, block)'s saved set must have (computed by the caller from the
model shape), or 0 to skip that check. Prints one line per failure; exit 1 on any.
"""
import json
import sys

path, report_path, rank, steps, saved = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
tl = json.load(open(path))
report = json.load(open(report_path))
cats = tl["categories"]
ev = tl["events"]
bad = []


def fail(msg):
    bad.append(msg)
    print(f"FAIL {path}: {msg}")


if tl["format"] != "dtrain-mem-timeline" or tl["rank"] != rank:
    fail(f"header: format {tl['format']}, rank {tl['rank']}")
if tl["dropped"] != 0 or not ev:
    fail(f"{tl['dropped']} events dropped, {len(ev)} kept")
# the accountant's peaks are those of the log, and the report's (no export: nothing after it)
peak_rep = report["per_rank"][rank]
for c in cats:
    seen = max(e["live"][c] for e in ev)
    if seen != peak_rep[c] or tl["peak"][c] != peak_rep[c]:
        fail(f"{c}: peak {seen} in the events, {tl['peak'][c]} in the header, {peak_rep[c]} in the report")
last = ev[-1]["live"]
if max(e["live"]["total"] for e in ev) != peak_rep["total"]:
    fail(f"peak total {max(e['live']['total'] for e in ev)} vs report {peak_rep['total']}")
for c in ["params", "grads", "optim", "activations"]:  # allocated before step 1, never freed
    if last[c] != peak_rep[c] or tl["live"][c] != last[c]:
        fail(f"{c}: live {last[c]} at the last event, report peak {peak_rep[c]}")
if last["total"] != sum(last[c] for c in cats):
    fail("live total is not the sum of the categories")
# live bytes replayed from the events themselves
live = {c: 0 for c in cats}
in_use = 0
for i, e in enumerate(ev):
    sign = {"alloc": 1, "free": -1, "use": 0, "unuse": 0}[e["kind"]]
    live[e["cat"]] += sign * e["bytes"]
    in_use += {"use": 1, "unuse": -1}.get(e["kind"], 0) * e["bytes"]
    if any(live[c] != e["live"][c] for c in cats) or in_use != e["in_use"]["activations"]:
        fail(f"event {i}: live bytes disagree with the replay")
        break
    if e["in_use"]["activations"] > e["live"]["activations"]:
        fail(f"event {i}: more activations in use than allocated")
        break
# context: set-up first, then steps 1..STEPS in order with their phases
steps_seen = sorted({e["step"] for e in ev})
if steps_seen != list(range(0, steps + 1)):
    fail(f"steps {steps_seen}, want 0..{steps}")
if any(a["step"] > b["step"] for a, b in zip(ev, ev[1:])):
    fail("steps out of order")
if any(e["phase"] != "setup" for e in ev if e["step"] == 0):
    fail("a step-0 event outside the set-up")
# saved sets: used in a forward, released by a backward (or W) of the same micro-batch
open_sets = {}
n_pairs = 0
for i, e in enumerate(ev):
    key = (e["slot"], e["block"])
    if e["kind"] == "use":
        if key in open_sets:
            fail(f"event {i}: slot {key[0]} block {key[1]} used twice")
        if e["phase"] not in ("forward", "eval"):
            fail(f"event {i}: use in phase {e['phase']}")
        if saved and e["bytes"] != saved:
            fail(f"event {i}: saved set of {e['bytes']} bytes, the model shape gives {saved}")
        open_sets[key] = e
    elif e["kind"] == "unuse":
        u = open_sets.pop(key, None)
        if u is None:
            fail(f"event {i}: unuse of slot {key[0]} block {key[1]} before its use")
            continue
        if u["phase"] == "forward":
            n_pairs += 1
            if e["phase"] not in ("backward", "weights") or e["mb"] != u["mb"] or e["step"] != u["step"]:
                fail(f"event {i}: {e['phase']} mb {e['mb']} step {e['step']} releases the set "
                     f"used in forward mb {u['mb']} step {u['step']}")
if open_sets:
    fail(f"saved sets still in use at the end: {sorted(open_sets)}")
if n_pairs == 0:
    fail("no forward/backward saved-set pairs")
print(f"ok   {path}: {len(ev)} events, {n_pairs} forward/backward pairs, peak {peak_rep['total']} bytes")
sys.exit(1 if bad else 0)

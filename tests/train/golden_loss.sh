#!/bin/bash
# The default job's loss curve is pinned: `dtrain train` on the embedded configuration (one
# process) must reproduce tests/data/golden_loss_default.txt within TOL per step. TOL sits
# between what changes across CPUs and thread counts (measured: oneDNN's AVX2 kernels in place
# of its AVX-512 ones move a loss by at most 1.2e-7) and what a real change does: the test
# also trains with the learning rate 3% higher and requires that run to miss the file (it
# misses by 3.7e-3 at step 2), so a tolerance that hides a change fails here first.
#   golden_loss.sh DTRAIN SRC_DIR [--update]
set -uo pipefail
dtrain=$(realpath "$1") src=$(realpath "$2") update=${3:-}
golden="$src/tests/data/golden_loss_default.txt"
TOL=1e-3 STEPS=20
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
train() { # metrics file, extra args...
    local out=$1; shift
    OMP_NUM_THREADS=1 "$dtrain" train --train.steps=$STEPS --train.eval_every=0 \
        --train.sample_tokens=0 --train.export="" --checkpoint.every=0 --train.log_every=100 \
        --train.metrics="$out" "$@" > "$out.log" 2>&1 || { cat "$out.log"; echo "FAIL: training failed"; exit 1; }
}
# max |loss - golden| over the steps, and the step where it is largest
compare() {
    /usr/bin/python3 - "$1" "$golden" <<'PY'
import json, sys
got = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
want = {int(s): float(l) for s, l in (ln.split() for ln in open(sys.argv[2]) if ln[0] != "#")}
if sorted(got) != sorted(want):
    print("inf steps %s vs %s" % (sorted(got), sorted(want))); sys.exit()
d, s = max((abs(got[s] - want[s]), s) for s in want)
print("%.3g step %d: %.8f vs %.8f" % (d, s, got[s], want[s]))
PY
}
train base.jsonl
if [ "$update" = --update ]; then
    { sed -n '/^#/p' "$golden"; /usr/bin/python3 -c '
import json, sys
for r in map(json.loads, open(sys.argv[1])): print("%d %.8f" % (r["step"], r["loss"]))' base.jsonl; } > "$work/new"
    cp "$work/new" "$golden" && echo "updated $golden" && exit 0
fi
passed=0 failed=0
# expect FILE within|beyond MESSAGE: FILE's largest difference from the golden losses is
# within TOL, or beyond it
expect() {
    local diff rest
    read -r diff rest < <(compare "$1")
    if /usr/bin/python3 -c "import sys; sys.exit((float('$diff') <= $TOL) != ('$2' == 'within'))"; then
        passed=$((passed + 1))
    else
        echo "FAIL: $3 ($diff at $rest, tolerance $TOL)"
        failed=$((failed + 1))
    fi
}
expect base.jsonl within "the default job's loss differs from $golden"
train lr.jsonl --optim.lr=0.00309
expect lr.jsonl beyond "a 3% higher learning rate stays within the golden losses: the check is blind"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

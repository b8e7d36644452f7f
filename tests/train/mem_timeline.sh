#!/bin/bash
# Memory timelines (train.mem_timeline) and dtrain plot: a 3-step run on one process and on a
# 2-stage pipeline (1F1B, and zero-bubble with its W passes, "%d" naming): every rank's log
# replays to its live bytes, its peaks are the memory report's, each saved set has the bytes
# the model shape gives and is used in a forward before the backward (or W) of the same
# micro-batch releases it. dtrain plot draws both kinds of file as SVG that parses as XML,
# with the series and the peak named; bad input is one error line and a non-zero exit.
#   mem_timeline.sh DTRAIN SRC_DIR
set -uo pipefail
dtrain=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
py=/usr/bin/python3
"$dtrain" prepare --input "$src/src/core" --out data > /dev/null || exit 1
tiny=(train --config "$src/configs/tiny-gpt2.ini" --data.train=data/train.bin
      --data.val=data/val.bin --train.eval_every=2 --train.eval_batches=2 --train.steps=3
      --model.n_layer=4 --train.batch_size=4 --train.seq_len=32)
passed=0 failed=0
check() { # NAME COMMAND...
    local name=$1
    shift
    if "$@"; then passed=$((passed + 1)); else echo "FAIL $name"; failed=$((failed + 1)); fi
}
# bytes of one (slot, block) saved set of the tiny GPT-2 (n_embd 64, 4 heads), fp32, from the
# shapes alone: ln1 mean/rstd, qkv, att, lse, x2, ln2 mean/rstd, MLP hidden, the block input;
# with a split backward also the kept gradients dqkv, dproj, dh, ddown (each 64-byte aligned)
saved_bytes() { # ROWS_PER_MICRO_BATCH SPLIT
    $py -c "
B, split = $1, $2
N, C, H = B * 32, 64, 4
r = lambda b: (b + 63) // 64 * 64
s = 2 * r(N * 4) + r(N * 3 * C * 4) + r(N * C * 4) + r(N * H * 4) + r(N * C * 4) \
    + 2 * r(N * 4) + r(N * 4 * C * 4) + N * C * 4
if split:
    s += r(N * 3 * C * 4) + r(N * C * 4) + r(N * 4 * C * 4) + r(N * C * 4)
print(s)"
}

# one process, two micro-batches of 2 rows, evaluation after steps 2 and 3
"$dtrain" "${tiny[@]}" --train.micro_batch_size=2 --train.metrics=m1.jsonl \
    --train.mem_timeline=t1.json --train.mem_report=r1.json > out1.txt 2>&1 || { cat out1.txt; exit 1; }
check "one process" $py "$src/tests/train/check_timeline.py" t1.json r1.json 0 3 "$(saved_bytes 2 0)"

# pp 2 with 1F1B over 4 micro-batches of 1 row; rank 1 writes t2.rank1.json
timeout 300 mpirun --oversubscribe -np 2 "$dtrain" "${tiny[@]}" --plugin.pp_size=2 \
    --plugin.microbatches=4 --train.metrics=m2.jsonl --train.mem_timeline=t2.json \
    --train.mem_report=r2.json > out2.txt 2>&1 || { cat out2.txt; exit 1; }
check "pp2 rank 0" $py "$src/tests/train/check_timeline.py" t2.json r2.json 0 3 "$(saved_bytes 1 0)"
check "pp2 rank 1" $py "$src/tests/train/check_timeline.py" t2.rank1.json r2.json 1 3 "$(saved_bytes 1 0)"

# pp 2 zero-bubble (W passes release the saved sets), every rank named by "%d"
timeout 300 mpirun --oversubscribe -np 2 "$dtrain" "${tiny[@]}" --plugin.pp_size=2 \
    --plugin.microbatches=4 --plugin.pp_schedule=zbh1 --train.mem_timeline=z%d.json \
    --train.mem_report=r3.json > out3.txt 2>&1 || { cat out3.txt; exit 1; }
for r in 0 1; do
    check "zbh1 rank $r" $py "$src/tests/train/check_timeline.py" z$r.json r3.json $r 3 "$(saved_bytes 1 1)"
done
check "zbh1 releases in W" grep -q '"kind": "unuse".*"phase": "weights"' z0.json

# the pictures: XML, self-contained, the expected series and the peak named
svg_has() { # FILE TEXT...
    local f=$1
    shift
    $py - "$f" "$@" <<'PY'
import sys, xml.etree.ElementTree as ET
f, want = sys.argv[1], sys.argv[2:]
root = ET.parse(f).getroot()
text = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
raw = open(f).read()
missing = [w for w in want if w not in text]
bad = [w for w in ("<script", "href", "url(", "@import") if w in raw]
if missing or bad or not root.tag.endswith("svg"):
    print(f"FAIL {f}: missing {missing}, not self-contained: {bad}")
    sys.exit(1)
PY
}
series=("params" "grads" "optim" "activations: saved sets in use" "activations: rest of arena"
        "comm" "temp" "peak in use" "largest buffer" "saved sets live")
for f in t1.json t2.json t2.rank1.json; do
    check "plot $f" "$dtrain" plot --timeline $f --out $f.svg > /dev/null
    check "svg $f" svg_has $f.svg "${series[@]}" "step 3" "F0" "B0"
done
check "plot --step 1" "$dtrain" plot --timeline t1.json --step 1 --out s1.svg > /dev/null
check "svg --step 1" svg_has s1.svg "step 1" "peak in use"
check "plot set-up" "$dtrain" plot --timeline t1.json --step 0 --out s0.svg > /dev/null
check "svg set-up" svg_has s0.svg "set-up" "setup"
check "plot zbh1" "$dtrain" plot --timeline z0.json --out z0.svg > /dev/null
check "svg zbh1 W" svg_has z0.svg "W0"
for m in m1.jsonl m2.jsonl; do
    check "plot $m" "$dtrain" plot --metrics $m --out $m.svg > /dev/null
    check "svg $m" svg_has $m.svg "loss" "val_loss" "learning rate" "gradient norm" "throughput" "step"
done

# bad input: one line on stderr naming the problem, exit code non-zero (not a signal)
expect_error() { # NAME PATTERN ARGS...
    local name=$1 pattern=$2
    shift 2
    "$dtrain" plot "$@" > /dev/null 2> err.txt
    local rc=$?
    if [ $rc -eq 0 ] || [ $rc -ge 128 ] || [ "$(wc -l < err.txt)" -ne 1 ] ||
       ! grep -q "error:.*$pattern" err.txt || [ -e bad.svg ]; then
        echo "FAIL $name: rc=$rc:"; cat err.txt; failed=$((failed + 1))
    else
        passed=$((passed + 1))
    fi
}
echo "not json {" > notjson.json
echo '{"loss": 1}' > nostep.jsonl
expect_error "missing timeline" "nothere.json" --timeline nothere.json --out bad.svg
expect_error "timeline not JSON" "notjson.json is not JSON" --timeline notjson.json --out bad.svg
expect_error "not a timeline" "m1.jsonl is not" --timeline m1.jsonl --out bad.svg
expect_error "step not in the file" "step 9 is not in t1.json (it holds steps 0..3" --timeline t1.json --step 9 --out bad.svg
expect_error "step not a number" "--step: 'x'" --timeline t1.json --step x --out bad.svg
expect_error "missing metrics" "nothere.jsonl" --metrics nothere.jsonl --out bad.svg
expect_error "metrics not JSON" "notjson.json line 1 is not a JSON object" --metrics notjson.json --out bad.svg
expect_error "metrics without step" "nostep.jsonl line 1 has no \"step\"" --metrics nostep.jsonl --out bad.svg
# a timeline that cannot be written fails before the first step, on every rank
timeout 120 mpirun --oversubscribe -np 2 "$dtrain" "${tiny[@]}" --plugin.pp_size=2 \
    --train.mem_timeline=nodir/t.json > out4.txt 2> err4.txt
rc=$?
if [ $rc -eq 0 ] || [ $rc -eq 124 ] || grep -q "step *1/" out4.txt ||
   [ "$(grep -c 'error: train.mem_timeline: cannot write nodir/t.json' err4.txt)" -ne 2 ]; then
    echo "FAIL unwritable timeline: rc=$rc"; cat err4.txt; failed=$((failed + 1))
else
    passed=$((passed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

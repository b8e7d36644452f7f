#!/bin/bash
# Resume is bit for bit (DESIGN invariant 4): 6 straight steps and (3 steps, checkpoint, a new
# process resuming from it, 3 more steps) export byte-identical weights and log the same
# losses (and under fp16 the same loss scales and skips). Also: a truncated checkpoint file is
# detected and named on resume.
#   resume.sh DTRAIN SRC_DIR ARCH [extra overrides...]
set -euo pipefail
dtrain=$1 src=$2 arch=$3
shift 3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$dtrain" prepare --input "$src/src/core" --out data > /dev/null
run=("$dtrain" train --config "$src/configs/tiny-$arch.ini" --data.train=data/train.bin
     --data.val=data/val.bin --train.eval_every=2 --train.steps=6 --checkpoint.keep=0 "$@")

"${run[@]}" --train.export=straight.safetensors --train.metrics=straight.jsonl > /dev/null
"${run[@]}" --checkpoint.dir=ck --checkpoint.every=3 > /dev/null
[ -f ck/step-3/manifest.json ] || { echo "FAIL: no checkpoint ck/step-3"; exit 1; }
rm -rf ck/step-6 # as if the run had been killed after its step-3 checkpoint
"${run[@]}" --checkpoint.dir=ck --checkpoint.every=3 --checkpoint.resume=auto \
    --train.export=resumed.safetensors --train.metrics=resumed.jsonl > resumed.log
grep -q "resumed from ck/step-3 at step 3" resumed.log || { echo "FAIL: did not resume"; cat resumed.log; exit 1; }
passed=0 failed=0
check() { if eval "$2"; then passed=$((passed + 1)); else echo "FAIL: $1"; failed=$((failed + 1)); fi; }
check "exported weights differ after resume" "cmp -s straight.safetensors resumed.safetensors"
fields='"loss": [^,]*\|"loss_scale": [^,]*\|"skipped[a-z_]*": [^,}]*' # fp16 adds the scale
check "steps 4-6 losses differ after resume" \
    "diff <(sed -n '4,6p' straight.jsonl | grep -o '$fields') <(grep -o '$fields' resumed.jsonl)"

# a checkpoint cut short is named, not loaded
rm -rf ck/step-6
size=$(stat -c %s ck/step-3/rank-00000.safetensors)
truncate -s $((size - 64)) ck/step-3/rank-00000.safetensors
if "${run[@]}" --checkpoint.dir=ck --checkpoint.resume=auto > out.log 2> err.log; then
    check "truncated checkpoint was accepted" false
else
    check "truncated checkpoint not named: $(cat err.log)" "grep -q 'rank-00000.safetensors.*truncated' err.log"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

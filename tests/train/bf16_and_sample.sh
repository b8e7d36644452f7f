#!/bin/bash
# bf16 matmuls track the fp32 loss curve within bf16 tolerance over 30 steps, and
# `dtrain sample` generates from the exported weights.
#   bf16_and_sample.sh DTRAIN SRC_DIR ARCH
set -uo pipefail
dtrain=$1 src=$2 arch=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$dtrain" prepare --input "$src/src/core" --out data > /dev/null || exit 1
run=("$dtrain" train --config "$src/configs/tiny-$arch.ini" --data.train=data/train.bin
     --data.val="" --train.steps=30 --optim.lr=3e-3)
passed=0 failed=0
"${run[@]}" --train.metrics=fp32.jsonl --train.export=fp32.safetensors > /dev/null &&
"${run[@]}" --plugin.precision=bf16 --train.metrics=bf16.jsonl --train.export=bf16.safetensors > /dev/null ||
    { echo "training failed"; exit 1; }
if /usr/bin/python3 "$src/tests/train/compare_runs.py" fp32.jsonl fp32.safetensors bf16.jsonl \
        bf16.safetensors 3e-2 --losses-only; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
out=$("$dtrain" sample --checkpoint fp32.safetensors --prompt "int " --tokens 40 --seed 3)
if [ $? -eq 0 ] && [ "${out:0:4}" = "int " ] && [ "${#out}" -ge 40 ]; then
    passed=$((passed + 1))
else
    echo "FAIL sample: '$out'"; failed=$((failed + 1))
fi
again=$("$dtrain" sample --checkpoint fp32.safetensors --prompt "int " --tokens 40 --seed 3)
if [ "$out" = "$again" ]; then passed=$((passed + 1)); else echo "FAIL sample not reproducible"; failed=$((failed + 1)); fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

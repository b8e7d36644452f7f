#!/bin/bash
# Whole-model cross-check against PyTorch (DESIGN invariant 2): dtrain trains a tiny GPT-2 or
# Llama for 3 AdamW steps from weights it exported; tests/models/torch_ref.py rebuilds the same
# model in PyTorch from those weights, trains on the same batches and compares the per-step
# losses and every final parameter (relative 1e-4, fp32).
#   torch_check.sh DTRAIN SRC_DIR ARCH MICRO_BATCH GRAD_CLIP
set -euo pipefail
dtrain=$1 src=$2 arch=$3 micro=$4 clip=$5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$dtrain" prepare --input "$src/src/core" --out "$work/data" > /dev/null
common=(--config "$src/configs/tiny-$arch.ini" --data.train="$work/data/train.bin"
        --data.val="" --train.eval_every=0 --checkpoint.every=0 --train.sample_tokens=0
        --optim.eps=1e-6 --optim.warmup_steps=2 --optim.lr=1e-2 --optim.min_lr=1e-3
        --train.micro_batch_size="$micro" --plugin.grad_clip="$clip")
"$dtrain" train "${common[@]}" --train.steps=0 --train.export="$work/init.safetensors" > /dev/null
"$dtrain" train "${common[@]}" --train.steps=3 --model.init="$work/init.safetensors" \
    --train.metrics="$work/metrics.jsonl" --train.export="$work/final.safetensors" > /dev/null
batch=$(grep -E '^\s*batch_size' "$src/configs/tiny-$arch.ini" | head -1 | sed 's/.*=\s*//; s/\s*#.*//')
seq=$(grep -E '^\s*seq_len' "$src/configs/tiny-$arch.ini" | head -1 | sed 's/.*=\s*//; s/\s*#.*//')
exec /usr/bin/python3 "$src/tests/models/torch_ref.py" --init "$work/init.safetensors" \
    --data "$work/data/train.bin" --metrics "$work/metrics.jsonl" --final "$work/final.safetensors" \
    --batch "$batch" --micro-batch "$micro" --seq-len "$seq" --steps 3 --lr 1e-2 --min-lr 1e-3 \
    --warmup 2 --schedule cosine --beta1 0.9 --beta2 0.95 --eps 1e-6 --weight-decay 0.1 \
    --grad-clip "$clip" --rtol 1e-4

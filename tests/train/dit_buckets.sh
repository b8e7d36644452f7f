#!/bin/bash
# Buckets of clip shape (data.buckets) through `dtrain train`: three shapes of clip with their
# own batches, drawn by weight from the seed, every one of them trained in the first steps.
# - Every layout equals the one process (losses, validation losses and exported weights within
#   1e-5): dp2 ZeRO-2 with micro-batches (a bucket's count of its own), Ulysses sp2, tp2 with
#   selective checkpointing, ZeRO-3 with full checkpointing, a 2-stage 1F1B pipeline, ZB-H1 x
#   sp2, the ring (cp2, contiguous). Each step's bucket is the same in every layout.
# - A checkpoint at step 2 resumes in another layout and continues as the straight run.
# - dtrain sample --clip samples a bucket's shape (and any other the patches cut) from the
#   exported weights; a clip the patches do not cut is refused.
# - A bucket that does not cut into patches, a malformed list, a bucket whose tokens a split
#   cannot divide, a pipeline whose buckets need different micro-batch counts, the stage
#   rebalancer and buckets on a GPT: one error naming the bucket (or key), on every rank.
#   dit_buckets.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
bk="4x8x8:8:2, 2x12x16:4, 8x8x4:8"
base=(--config "$src/configs/tiny-dit.ini" "--data.buckets=$bk" --train.steps=6
      --train.eval_every=3 --train.eval_batches=2 --optim.eps=1e-6 --optim.warmup_steps=1
      --optim.lr=3e-3 --plugin.grad_clip=1.0 --plugin.type=hybrid)
. "$src/tests/train/layout_lib.sh"

run ref 1 || { echo "reference run failed"; tail -5 ref.log; exit 1; }
check "every bucket trained in 6 steps" /usr/bin/python3 - <<'PY'
import json
rows = [json.loads(l) for l in open("ref.jsonl")]
seen = {tuple(r["clip"]) + (r["batch"],) for r in rows}
assert seen == {(4, 8, 8, 8), (2, 12, 16, 4), (8, 8, 4, 8)}, seen
assert any("val_loss" in r for r in rows)
PY
same dp2_zero2_micro 2 --plugin.zero_stage=2 --train.micro_batch_size=2
same sp2 2 --plugin.sp_size=2
same tp2_selective 2 --plugin.tp_size=2 --plugin.ac=selective
same dp2_zero3_full 2 --plugin.zero_stage=3 --plugin.ac=full
same pp2_1f1b 2 --plugin.pp_size=2 --plugin.microbatches=2 --plugin.pp_schedule=1f1b
same pp2_zbh1_sp2 4 --plugin.pp_size=2 --plugin.sp_size=2 --plugin.microbatches=2 \
    --plugin.pp_schedule=zbh1
same cp2 2 --plugin.cp_size=2 --plugin.cp_split=contiguous
check "the steps' buckets agree across layouts" bash -c \
    "diff <(grep -o 'clip [0-9x]* x [0-9]*' ref.log) <(grep -o 'clip [0-9x]* x [0-9]*' sp2.log)"

# resume: two steps in tp2, the rest in one process
ck=(--checkpoint.dir=ck --checkpoint.every=2 --checkpoint.keep=0)
ran ck_tp2 2 --plugin.tp_size=2 "${ck[@]}" && rm -rf ck/step-4 ck/step-6 &&
    ran ck_one 1 "${ck[@]}" --checkpoint.resume=auto &&
    check "resumed at step 2 continues as the straight run" /usr/bin/python3 \
        "$src/tests/train/compare_runs.py" <(tail -n 4 ref.jsonl) ref.safetensors ck_one.jsonl \
        ck_one.safetensors 1e-5

# sampling a bucket's clip shape
check "sample --clip 2x12x16" "$dtrain" sample --checkpoint ref.safetensors --out s.safetensors \
    --clip 2x12x16 --count 3 --steps 3
check "the samples are 3 clips of 2x12x16" /usr/bin/python3 - "$src/tests/models" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import st
x = st.read_safetensors("s.safetensors")[0]["latents"]
assert x.shape == (3, 3, 2, 12, 16) and np.isfinite(x).all(), x.shape
PY
check "sample --clip the patches do not cut refused" bash -c "! '$dtrain' sample --checkpoint ref.safetensors --out s.gif --clip 2x13x16 2> e.txt && grep -q 'model.height=13 is not a multiple' e.txt"

refused() { # NAME NP PATTERN ARGS...: every rank names the problem
    local name=$1 np=$2 pattern=$3; shift 3
    run "$name" "$np" "$@"
    check "$name refused on every rank" bash -c "[ \$(grep -c -- \"$pattern\" $name.log) -ge $np ]"
}
refused patch 2 "bucket 1 (3x8x8): its frames 3" "--data.buckets=4x8x8:8, 3x8x8:4" \
    --model.patch_t=2
refused malformed 2 'bucket 1 .2x12:4. is not' "--data.buckets=4x8x8:8, 2x12:4"
refused sp4 4 "bucket 1, 2x12x16 (batch 4)" --plugin.sp_size=4
refused pp_counts 2 "bucket 1, 2x12x16 (batch 4): 2 micro-batches a step, but bucket 0's 4" \
    --plugin.pp_size=2 --train.micro_batch_size=2
refused rebalance 2 "train.rebalance_every=2 with data.buckets" --plugin.pp_size=2 \
    --plugin.microbatches=2 --train.rebalance_every=2
refused gpt 2 "buckets of clip shape are a DiT's" --config "$src/configs/tiny-gpt2.ini" \
    "--data.buckets=$bk" --data.source=tokens --data.train=data/train.bin --data.val=
finish

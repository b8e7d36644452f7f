#!/bin/bash
# precision = fp16 with dynamic loss scaling:
#  - fp16 matmuls track the fp32 loss curve (30 steps within 1e-3 relative; measured ~2e-5,
#    against ~1e-4 for bf16), yet are not the fp32 run;
#  - a forced overflow (initial_scale 2^32) skips every step, halving the scale each time:
#    the exported weights equal the initial ones byte for byte, and the checkpoint holds zero
#    AdamW moments, AdamW step count 0 and the halved scale;
#  - from initial_scale 2^23 with loss_scale_window 2 some steps overflow: the logged scale,
#    skipped flags and running count follow the policy (halve and skip on overflow, double
#    after 2 clean steps), replayed here independently, and AdamW counted only clean steps;
#  - that run under dp2 x ZeRO 1-3, tp2, tp2 split_gather, Ulysses sp2 and pp2 (gpipe, 1f1b,
#    zbh1, interleaved) logs the same scale and skipped sequence, losses within 2e-3 and
#    weights within 1e-2 relative (fp16's unit roundoff is 4.9e-4; the bf16 layout check
#    allows 2e-2 for bf16's 3.9e-3).
# Bit-exact resume under fp16 is a case of resume.sh (tests.cmake).
#   fp16.sh DTRAIN SRC_DIR ARCH
dtrain=$1 src=$2 arch=$3
base=(--config "$src/configs/tiny-$arch.ini" --data.train=data/train.bin --data.val=""
      --train.batch_size=8 --optim.eps=1e-6 --optim.warmup_steps=1 --optim.lr=3e-3
      --plugin.grad_clip=1.0 --model.vocab_size=254 --model.n_layer=4)
. "$src/tests/train/layout_lib.sh"
py=/usr/bin/python3
export DT_SRC=$src

# fp16 tracks fp32 (the tiny model and 30 steps of bf16_and_sample.sh)
curve=("$dtrain" train --config "$src/configs/tiny-$arch.ini" --data.train=data/train.bin
       --data.val="" --train.steps=30 --optim.lr=3e-3)
"${curve[@]}" --train.metrics=fp32.jsonl --train.export=fp32.safetensors > fp32.log 2>&1 &&
"${curve[@]}" --plugin.precision=fp16 --train.metrics=fp16.jsonl \
    --train.export=fp16.safetensors > fp16.log 2>&1 ||
    { echo "curve runs failed"; tail -3 fp32.log fp16.log; exit 1; }
check "fp16 tracks the fp32 losses" $py "$src/tests/train/compare_runs.py" fp32.jsonl \
    fp32.safetensors fp16.jsonl fp16.safetensors 1e-3 --losses-only
check "fp16 is not the fp32 run" bash -c "! cmp -s <(grep -o '\"loss\": [^,]*' fp32.jsonl) \
    <(grep -o '\"loss\": [^,]*' fp16.jsonl)"
check "fp32 logs no loss scale" bash -c "! grep -q loss_scale fp32.jsonl"
check "fp16 progress line shows the scale" grep -q "scale 65536 (0 skipped)" fp16.log

# every step overflows: nothing moves
run initial 1 --train.steps=1 --optim.lr=0 --optim.min_lr=0 --optim.weight_decay=0 ||
    { echo "initial-weights run failed"; tail -3 initial.log; }
run allskip 1 --train.steps=5 --plugin.precision=fp16 --plugin.initial_scale=4294967296 \
    --checkpoint.dir=ck --checkpoint.every=5 --checkpoint.keep=0 ||
    { echo "all-skipped run failed"; tail -3 allskip.log; }
check "all-skipped run exports the initial weights" cmp initial.safetensors allskip.safetensors
check "all-skipped run: scale halves, every step skipped, state untouched" $py - <<'PY'
import json, os, sys
sys.path.insert(0, os.environ["DT_SRC"] + "/tests/models")
import numpy as np, st
rec = [json.loads(l) for l in open("allskip.jsonl")]
want = [(2.0 ** (32 - i), 1, i + 1) for i in range(5)]
got = [(r["loss_scale"], r["skipped"], r["skipped_steps"]) for r in rec]
assert got == want, f"{got} != {want}"
assert all(r["grad_norm"] is None for r in rec), "an overflowed norm is logged as null"
s = json.load(open("ck/step-5/manifest.json"))
assert s["adam_steps"] == 0 and s["loss_scale"] == 2.0 ** 27 and s["skipped_steps"] == 5, s
m, _ = st.read_safetensors("ck/step-5/rank-00000.safetensors")
assert all(not np.any(t) for k, t in m.items() if k.startswith("exp_avg")), "AdamW moments moved"
PY

# some steps overflow: the policy, and every layout agrees on it
dyn=(--train.steps=12 --plugin.precision=fp16 --plugin.initial_scale=8388608
     --plugin.loss_scale_window=2)
base+=("${dyn[@]}")
run ref 1 --checkpoint.dir=ck_dyn --checkpoint.every=12 --checkpoint.keep=0 ||
    { echo "reference run failed"; tail -3 ref.log; exit 1; }
check "loss scale follows the policy" $py - <<'PY'
import json
rec = [json.loads(l) for l in open("ref.jsonl")]
scale, clean, skipped = 2.0 ** 23, 0, 0
for r in rec:
    assert r["loss_scale"] == scale, (r["step"], r["loss_scale"], scale)
    if r["skipped"]:
        scale, clean, skipped = max(scale / 2, 1), 0, skipped + 1
    else:
        clean += 1
        if clean == 2:
            scale, clean = scale * 2, 0
    assert r["skipped_steps"] == skipped, r
assert 0 < skipped < len(rec), f"want some steps skipped, some not: {skipped}"
s = json.load(open("ck_dyn/step-12/manifest.json"))
assert s["adam_steps"] == len(rec) - skipped, (s, skipped)
assert s["loss_scale"] == scale and s["loss_scale_clean_steps"] == clean, (s, scale, clean)
PY
fp16_same() {
    local name=$1
    if ! run "$@"; then
        echo "FAIL $name: run failed"; tail -3 "$name.log"; failed=$((failed + 1)); return
    fi
    check "$name losses and scales" $py "$src/tests/train/compare_runs.py" \
        ref.jsonl ref.safetensors "$name.jsonl" "$name.safetensors" 2e-3 --scales --losses-only
    check "$name weights" $py "$src/tests/train/compare_runs.py" \
        ref.jsonl ref.safetensors "$name.jsonl" "$name.safetensors" 1e-2
}
for zero in 1 2 3; do
    fp16_same dp2_zero$zero 2 --plugin.type=zero$zero
done
fp16_same tp2 2 --plugin.type=hybrid --plugin.tp_size=2
fp16_same tp2_split_gather 2 --plugin.type=hybrid --plugin.tp_size=2 --plugin.sp_mode=split_gather
fp16_same sp2 2 --plugin.type=hybrid --plugin.sp_size=2
for kind in gpipe 1f1b zbh1; do
    fp16_same pp2_$kind 2 --plugin.pp_size=2 --plugin.pp_schedule=$kind --plugin.microbatches=2
done
fp16_same pp2_interleaved 2 --plugin.pp_size=2 --plugin.pp_schedule=interleaved \
    --plugin.pp_chunks=2 --plugin.microbatches=2
fp16_same pp2_dp2_zero2 4 --plugin.pp_size=2 --plugin.type=zero2 --plugin.microbatches=2
finish

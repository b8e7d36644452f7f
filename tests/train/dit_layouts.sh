#!/bin/bash
# The video DiT through `dtrain train` equals the single process in every layout (DESIGN
# invariant 1): per-step losses (train and validation) and exported weights within 1e-5
# relative in fp32, for both attention kinds: Ulysses sp 2 and 4 (all_to_all), dp2 x sp2 x
# ZeRO-2 with micro-batches, a 2-stage pipeline (alone, 1F1B with sp 2, and zero-bubble
# ZB-H1, and tp 2 x pp 2 with boundaries in pieces), ZeRO-3 with full activation
# checkpointing, and tp 2; the ring (cp 2, zigzag and
# contiguous) alone and with Ulysses, dp x ZeRO-2, tp with selective checkpointing, 1F1B; a checkpoint of sp2 x dp2
# resumes in one process. A bf16 run trains (its losses track fp32's within bf16 tolerance). A split that does not divide (tokens % sp, heads % sp) and a
# clip that does not divide into patches are one clear error on every rank, before the first
# collective.
#   dit_layouts.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
base=(--config "$src/configs/tiny-dit.ini" --train.batch_size=8 --train.steps=4
      --train.eval_every=2 --train.eval_batches=1 --optim.eps=1e-6 --optim.warmup_steps=1
      --optim.lr=3e-3 --plugin.grad_clip=1.0)
. "$src/tests/train/layout_lib.sh"

for attn in spatial_temporal full; do
    a=(--model.attn=$attn)
    run ref 1 "${a[@]}" || { echo "reference run ($attn) failed"; tail -5 ref.log; exit 1; }
    grep -q val_loss ref.jsonl || { echo "FAIL $attn: no validation loss"; failed=$((failed + 1)); }
    hy=(--plugin.type=hybrid "${a[@]}")
    same "${attn}_sp2" 2 "${hy[@]}" --plugin.sp_size=2
    same "${attn}_sp4" 4 "${hy[@]}" --plugin.sp_size=4
    same "${attn}_dp2_sp2_zero2_micro" 4 "${hy[@]}" --plugin.sp_size=2 --plugin.zero_stage=2 \
        --train.micro_batch_size=2
    same "${attn}_pp2" 2 "${hy[@]}" --plugin.pp_size=2 --plugin.microbatches=2
    same "${attn}_pp2_sp2_1f1b" 4 "${hy[@]}" --plugin.pp_size=2 --plugin.sp_size=2 \
        --plugin.microbatches=2 --plugin.pp_schedule=1f1b
    same "${attn}_dp2_zero3_ac" 2 "${hy[@]}" --plugin.zero_stage=3 --plugin.ac=full
    same "${attn}_tp2" 2 "${hy[@]}" --plugin.tp_size=2
    same "${attn}_pp2_zbh1" 2 "${hy[@]}" --plugin.pp_size=2 --plugin.microbatches=2 \
        --plugin.pp_schedule=zbh1
    same "${attn}_tp2_pp2_scatter" 4 "${hy[@]}" --plugin.tp_size=2 --plugin.pp_size=2 \
        --plugin.microbatches=2 --plugin.pp_scatter=true
    # the ring (context parallelism): full and temporal attention go around it, spatial
    # attention stays on the ring rank's whole frames
    same "${attn}_cp2" 2 "${hy[@]}" --plugin.cp_size=2
    same "${attn}_cp2_contiguous_sp2" 4 "${hy[@]}" --plugin.cp_size=2 --plugin.cp_split=contiguous \
        --plugin.sp_size=2
    same "${attn}_cp2_dp2_zero2_micro" 4 "${hy[@]}" --plugin.cp_size=2 --plugin.zero_stage=2 \
        --train.micro_batch_size=2
    same "${attn}_cp2_tp2_selective" 4 "${hy[@]}" --plugin.cp_size=2 --plugin.tp_size=2 \
        --plugin.ac=selective
    same "${attn}_cp2_pp2_1f1b" 4 "${hy[@]}" --plugin.cp_size=2 --plugin.pp_size=2 \
        --plugin.microbatches=2 --plugin.pp_schedule=1f1b
    mv ref.jsonl "ref_$attn.jsonl"
    mv ref.safetensors "ref_$attn.safetensors"
done

# checkpoints carry the DiT's sizes: an sp 2 x dp 2 ZeRO-2 checkpoint resumes in one process
# and continues as the uninterrupted run (the last two steps and the weights)
ck=(--model.attn=full --checkpoint.dir=ck --checkpoint.every=2 --checkpoint.keep=0)
run ck_sp2 4 --plugin.type=hybrid --plugin.sp_size=2 --plugin.zero_stage=2 "${ck[@]}" ||
    { echo "FAIL checkpointed sp2 run"; tail -3 ck_sp2.log; failed=$((failed + 1)); }
rm -rf ck/step-4
run ck_one 1 "${ck[@]}" --checkpoint.resume=auto ||
    { echo "FAIL resumed run"; tail -3 ck_one.log; failed=$((failed + 1)); }
check "resumed from step 2" grep -q "resumed from ck/step-2 at step 2" ck_one.log
check "sp2 checkpoint resumed in one process" /usr/bin/python3 "$src/tests/train/compare_runs.py" \
    <(tail -n 2 ref_full.jsonl) ref_full.safetensors ck_one.jsonl ck_one.safetensors 1e-5
check "the manifest records the DiT's sizes" /usr/bin/python3 -c "import json, sys
m = json.load(open('ck/step-2/manifest.json'))['model']
want = dict(arch='dit', n_layer=2, n_head=4, n_embd=64, frames=4, channels=3, height=8, width=8,
            patch_t=1, patch_h=2, patch_w=2, n_classes=3, attn=0)
sys.exit(any(m.get(k) != v for k, v in want.items()))"

# bf16: trains (the loss falls) and tracks the fp32 run within bf16 tolerance
run bf16 1 --model.attn=full --plugin.precision=bf16 --train.steps=4 ||
    { echo "FAIL bf16 run"; tail -3 bf16.log; failed=$((failed + 1)); }
check "bf16 tracks fp32" /usr/bin/python3 "$src/tests/train/compare_runs.py" ref_full.jsonl \
    ref_full.safetensors bf16.jsonl bf16.safetensors 3e-2 --losses-only

# bad splits: the same one-line error on every rank, non-zero exit, no hang
expect_all_ranks() { # NAME NP PATTERN ARGS...
    local name=$1 np=$2 pattern=$3 n distinct
    shift 3
    timeout 60 mpirun --oversubscribe -np "$np" "$dtrain" train "${base[@]}" "$@" > out.txt 2> err.txt
    local rc=$?
    n=$(grep -c "error:.*$pattern" err.txt)
    distinct=$(grep "error:" err.txt | sed 's/^dtrain\[rank [0-9]*\]: //' | sort -u | wc -l)
    if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ "$n" -ne "$np" ] || [ "$distinct" -ne 1 ]; then
        echo "FAIL $name: rc=$rc, $n of $np ranks reported it, $distinct distinct messages"
        head -8 err.txt
        failed=$((failed + 1))
    else
        echo "ok   $name: $(grep -m1 error: err.txt)"
        passed=$((passed + 1))
    fi
}
# 3 frames of 6 x 6 in 1 x 2 x 2 patches: 27 tokens
expect_all_ranks "tokens not divisible by sp" 2 "27.* not divisible by plugin.sp_size=2" \
    --plugin.type=hybrid --plugin.sp_size=2 --model.frames=3 --model.height=6 --model.width=6
expect_all_ranks "ring chunks not whole frames" 4 "do not cut into the 8 chunks of plugin.cp_size=4" \
    --plugin.type=hybrid --plugin.cp_size=4
expect_all_ranks "heads not divisible by sp" 4 "model.n_head=2 .*not divisible by plugin.sp_size=4" \
    --plugin.type=hybrid --plugin.sp_size=4 --model.n_head=2
expect_all_ranks "frames not divisible by patch_t" 2 "model.frames=4 is not a multiple of model.patch_t=3" \
    --plugin.type=hybrid --plugin.sp_size=2 --model.patch_t=3
finish

#!/bin/bash
# Memory is what the planner says, for the video DiT (DESIGN invariant 3): a matrix of DiT
# layouts (dp x ZeRO 0-3, Ulysses sp, Megatron tp alone and with sp, pp and ZeRO-3, pipelines
# under GPipe, 1F1B, interleaved and ZB-H1 (split backward), with dp and sp, Megatron-SP,
# int8 activation storage, fp32 and bf16, micro-batches, activation checkpointing full / selective / every 2nd
# block, a checkpoint save, optimizer offload, the ring, text, buckets of clip shape) is trained for one step, and on every rank
# every memory category and the total must EQUAL the measured peak to the byte
# (plan/memory_dit.c predicts the DiT's arenas, batch buffers and pipeline boundaries from
# their carves; tests/plan/mem_check.py with tolerance 0).
#   mem_predict_dit.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
base=(--config "$src/configs/tiny-dit.ini" --train.steps=1 --train.log_every=1)
. "$src/tests/train/layout_lib.sh"

case_() {
    local name=$1 np=$2; shift 2
    if ! timeout 120 mpirun --oversubscribe -np "$np" "$dtrain" train "${base[@]}" \
        --train.mem_report="$name.mem.json" "$@" > "$name.log" 2>&1; then
        echo "FAIL $name: run failed"; tail -3 "$name.log"; failed=$((failed + 1)); return
    fi
    check "$name" /usr/bin/python3 "$src/tests/plan/mem_check.py" "$name.mem.json" 0
    /usr/bin/python3 "$src/tests/plan/mem_check.py" "$name.mem.json" 0 | head -1
}
z() { echo --plugin.type=hybrid --plugin.zero_stage="$1"; }
pp() { echo --plugin.pp_size=2 --plugin.pp_schedule="$1" --plugin.microbatches="$2"; }
ac() { echo --plugin.ac="$1" --plugin.ac_every="${2:-1}"; }
bf16=--plugin.precision=bf16

case_ dit_single 1
case_ dit_single_bf16_micro 1 $bf16 --train.micro_batch_size=2
case_ dit_full_attention_labels 1 --model.attn=full --model.n_classes=3
for zero in 1 2 3; do
    case_ dit_dp2_zero$zero 2 $(z $zero)
done
case_ dit_sp2 2 --plugin.sp_size=2
case_ dit_sp2_dp2_zero2_bf16 4 --plugin.sp_size=2 $(z 2) $bf16
case_ dit_pp2_gpipe 2 $(pp gpipe 4)
case_ dit_pp2_1f1b_ac_full 2 $(pp 1f1b 4) $(ac full)
case_ dit_pp2_interleaved 2 $(pp interleaved 2) --plugin.pp_chunks=2 --model.n_layer=4
case_ dit_pp2_sp2_selective 4 $(pp 1f1b 2) --plugin.sp_size=2 $(ac selective)
case_ dit_tp2 2 --plugin.tp_size=2
case_ dit_tp2_sp2_bf16_selective 4 --plugin.tp_size=2 --plugin.sp_size=2 $bf16 $(ac selective)
case_ dit_tp2_pp2_1f1b 4 --plugin.tp_size=2 $(pp 1f1b 4)
case_ dit_tp2_dp2_zero3_ac_full 4 --plugin.tp_size=2 $(z 3) $(ac full)
case_ dit_tp2_checkpoint 2 --plugin.tp_size=2 --checkpoint.every=1 --checkpoint.dir=ck2
# Megatron-SP (the residual rows split over tp), int8 activation storage, split backward
sg=--plugin.sp_mode=split_gather
int8=--plugin.act_compress=int8
case_ dit_tp2_split_gather 2 --plugin.tp_size=2 $sg
case_ dit_tp2_split_gather_bf16_selective_dp2 4 --plugin.tp_size=2 $sg $bf16 $(ac selective)
case_ dit_int8 1 $int8
case_ dit_int8_selective_sp2 2 $int8 $(ac selective) --plugin.sp_size=2
case_ dit_int8_full_every2_tp2_split_gather 2 $int8 $(ac full 2) --plugin.tp_size=2 $sg \
    --model.n_layer=3
case_ dit_pp2_zbh1 2 $(pp zbh1 4)
case_ dit_pp2_zbh1_sp2_selective 4 $(pp zbh1 2) --plugin.sp_size=2 $(ac selective)
case_ dit_pp2_zbh1_int8_bf16 2 $(pp zbh1 4) $int8 $bf16
case_ dit_ac_full 1 $(ac full)
case_ dit_ac_selective_bf16 1 $(ac selective) $bf16
case_ dit_ac_full_every2_sp2 2 $(ac full 2) --plugin.sp_size=2 --model.n_layer=3
case_ dit_checkpoint_dp2 2 --checkpoint.every=1 --checkpoint.dir=ck
case_ dit_offload_zero2 2 $(z 2) --plugin.offload=disk --plugin.offload_dir=off \
    --plugin.offload_window_mb=0.01
# the ring: its blocks in the region work, a ring rank's tokens, whole-clip positions
ring=(--plugin.type=hybrid --plugin.cp_size=2)
case_ dit_cp2 2 "${ring[@]}"
case_ dit_cp2_full_attention_sp2_bf16 4 "${ring[@]}" --model.attn=full --plugin.sp_size=2 $bf16
case_ dit_cp2_tp2_pp2_1f1b_selective 8 "${ring[@]}" --plugin.tp_size=2 $(pp 1f1b 2) $(ac selective)
case_ dit_cp2_contiguous_dp2_zero3_ac_full 4 "${ring[@]}" --plugin.cp_split=contiguous $(z 3) $(ac full)
# text: the byte encoder and the cross-attention's saved sets, the text in the boundaries
text=(--model.text_len=12)
case_ dit_text 1 "${text[@]}"
case_ dit_text_bf16_selective 1 "${text[@]}" $bf16 $(ac selective)
case_ dit_text_tp2_split_gather_ac_full 2 "${text[@]}" --plugin.tp_size=2 $sg $(ac full)
case_ dit_text_pp2_zbh1_sp2 4 "${text[@]}" $(pp zbh1 2) --plugin.sp_size=2
case_ dit_text_int8_dp2_zero3 2 "${text[@]}" $int8 $(z 3)
case_ dit_text_cp2_bf16 2 "${text[@]}" "${ring[@]}" $bf16
# buckets of clip shape: the largest bucket's arenas, batch buffers and boundaries (the widest
# clip, the most clips and the most tokens are three different buckets)
bk=("--data.buckets=4x8x8:8:2, 2x12x16:4, 8x8x4:16" --train.steps=2)
case_ dit_buckets 1 "${bk[@]}"
case_ dit_buckets_pp2_1f1b_sp2_bf16 4 "${bk[@]}" $(pp 1f1b 2) --plugin.sp_size=2 $bf16
case_ dit_buckets_text_tp2_dp2_zero3_selective 4 "${bk[@]}" "${text[@]}" --plugin.tp_size=2 \
    $(z 3) $(ac selective)
finish

#!/bin/bash
# Context parallelism (ring attention, plugin.cp_size) equals the single process (DESIGN
# invariant 1): per-step losses and exported weights within 1e-5 relative (fp32) for cp 2 and
# 4 under the zigzag and contiguous splits, and cp with every other way to split work: dp and
# ZeRO 1-3, micro-batches, tp (and Megatron-SP), Ulysses inside the ring (sp2 x cp2), pipelines
# (1F1B, ZB-H1's split backward, interleaved), grouped-query heads and RoPE (llama). Selective
# and full checkpointing rerun the ring and give the same bits as the layout without them;
# bf16 follows one bf16 process. A seq_len that does not cut into the ring's chunks, and a
# DiT, are refused on every rank with the reason.
#   cp_layouts.sh DTRAIN SRC_DIR ARCH
dtrain=$1 src=$2 arch=$3
base=(--config "$src/configs/tiny-$arch.ini" --data.train=data/train.bin --data.val=data/val.bin
      --train.batch_size=8 --train.steps=3 --train.eval_every=3 --optim.eps=1e-6
      --optim.warmup_steps=1 --optim.lr=3e-3 --plugin.grad_clip=1.0 --model.vocab_size=254
      --plugin.type=hybrid)
[ "$arch" = llama ] && base+=(--model.n_head=4 --model.n_kv_head=2)
. "$src/tests/train/layout_lib.sh"


run ref 1 || { echo "reference run failed"; cat ref.log; exit 1; }
same cp2 2 --plugin.cp_size=2
same cp4 4 --plugin.cp_size=4
same cp2_contiguous 2 --plugin.cp_size=2 --plugin.cp_split=contiguous
same cp4_contiguous 4 --plugin.cp_size=4 --plugin.cp_split=contiguous
same cp2_micro 2 --plugin.cp_size=2 --train.micro_batch_size=2
for zero in 1 2 3; do
    same cp2_dp2_zero$zero 4 --plugin.cp_size=2 --plugin.zero_stage=$zero
done
same cp2_tp2 4 --plugin.cp_size=2 --plugin.tp_size=2
same cp2_tp2_split_gather 4 --plugin.cp_size=2 --plugin.tp_size=2 --plugin.sp_mode=split_gather
same cp2_sp2 4 --plugin.cp_size=2 --plugin.sp_size=2
same cp2_pp2_1f1b 4 --plugin.cp_size=2 --plugin.pp_size=2 --plugin.microbatches=4
same cp2_pp2_zbh1 4 --plugin.cp_size=2 --plugin.pp_size=2 --plugin.pp_schedule=zbh1 \
    --plugin.microbatches=4
ran cp2_pp2_interleaved 4 --plugin.cp_size=2 --plugin.pp_size=2 \
    --plugin.pp_schedule=interleaved --plugin.pp_chunks=2 --plugin.microbatches=2 --model.n_layer=4
# interleaved needs 4 layers: its own single-process reference
run ref4 1 --model.n_layer=4 && check "cp2 pp2 interleaved == one process" \
    /usr/bin/python3 "$src/tests/train/compare_runs.py" ref4.jsonl ref4.safetensors \
    cp2_pp2_interleaved.jsonl cp2_pp2_interleaved.safetensors 1e-5
for m in selective full; do
    ran cp2_$m 2 --plugin.cp_size=2 --plugin.ac=$m && identical cp2_$m cp2
done
# bf16: the ring merges fp32 partial results of bf16 products, one process rounds y once
ran one_bf16 1 --plugin.precision=bf16 &&
    ran cp2_bf16 2 --plugin.cp_size=2 --plugin.precision=bf16 &&
    check "cp2 bf16 follows one bf16 process (losses within 2e-3)" \
        /usr/bin/python3 "$src/tests/train/compare_runs.py" one_bf16.jsonl one_bf16.safetensors \
        cp2_bf16.jsonl cp2_bf16.safetensors 2e-3 --losses-only

# refusals, on every rank
refused() { # NAME NP PATTERN ARGS...
    local name=$1 np=$2 pat=$3; shift 3
    if run "$name" "$np" "$@"; then echo "FAIL $name: ran"; failed=$((failed + 1)); return; fi
    n=$(grep -c -- "$pat" "$name.log")
    check "$name refused on all $np ranks ($n)" test "$n" -ge "$np"
}
refused bad_seq 2 "train.seq_len=30 does not split into the 4 chunks of plugin.cp_size=2" \
    --plugin.cp_size=2 --train.seq_len=30
refused bad_world 3 "cp_size 2" --plugin.cp_size=2
finish

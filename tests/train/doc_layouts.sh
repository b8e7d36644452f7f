#!/bin/bash
# Documents kept apart (data.doc_mask) in every layout equal the single process (DESIGN
# invariant 1): per-step losses (training and validation) and exported weights within 1e-5
# relative (fp32) under dp with ZeRO 1 and 3 and micro-batches, tp (and Megatron-SP), Ulysses,
# the ring (zigzag and contiguous, and inside it Ulysses), pipelines (1F1B, ZB-H1),
# checkpointing (selective and full) and activations on disk; bf16 follows one bf16 process.
# Documents end at newlines (data.eot_token=10), several to a 64-token row, so a ring's chunks
# and Ulysses' heads cut through documents. The mask is real: the single process's losses
# differ from the same run without it.
#   doc_layouts.sh DTRAIN SRC_DIR ARCH
dtrain=$1 src=$2 arch=$3
base=(--config "$src/configs/tiny-$arch.ini" --data.train=data/train.bin --data.val=data/val.bin
      --train.batch_size=8 --train.seq_len=64 --train.steps=3 --train.eval_every=3
      --optim.eps=1e-6 --optim.warmup_steps=1 --optim.lr=3e-3 --plugin.grad_clip=1.0
      --model.vocab_size=254 --plugin.type=hybrid --data.doc_mask=true --data.eot_token=10)
[ "$arch" = llama ] && base+=(--model.n_head=4 --model.n_kv_head=2)
. "$src/tests/train/layout_lib.sh"

run ref 1 || { echo "reference run failed"; cat ref.log; exit 1; }
run unmasked 1 --data.doc_mask=false || { echo "unmasked run failed"; cat unmasked.log; exit 1; }
check "doc_mask changes the losses" bash -c "! /usr/bin/python3 '$src/tests/train/compare_runs.py' \
    ref.jsonl ref.safetensors unmasked.jsonl unmasked.safetensors 1e-4 --losses-only"
same dp2_zero1 2 --plugin.zero_stage=1
same dp2_zero3_micro 2 --plugin.zero_stage=3 --train.micro_batch_size=2
same tp2 2 --plugin.tp_size=2
same tp2_split_gather 2 --plugin.tp_size=2 --plugin.sp_mode=split_gather
same sp2 2 --plugin.sp_size=2
same cp2 2 --plugin.cp_size=2
same cp2_contiguous 2 --plugin.cp_size=2 --plugin.cp_split=contiguous
same cp2_sp2 4 --plugin.cp_size=2 --plugin.sp_size=2
same pp2_1f1b 2 --plugin.pp_size=2 --plugin.microbatches=4
same pp2_zbh1 2 --plugin.pp_size=2 --plugin.pp_schedule=zbh1 --plugin.microbatches=4
same ac_selective 1 --plugin.ac=selective
same cp2_ac_full 2 --plugin.cp_size=2 --plugin.ac=full
same act_disk 1 --plugin.act_offload=disk --plugin.act_offload_dir=spill
run ref_bf16 1 --plugin.precision=bf16 || { echo "bf16 reference failed"; cat ref_bf16.log; exit 1; }
ran sp2_bf16 2 --plugin.precision=bf16 --plugin.sp_size=2 &&
    check "sp2 bf16 == one bf16 process" /usr/bin/python3 "$src/tests/train/compare_runs.py" \
        ref_bf16.jsonl ref_bf16.safetensors sp2_bf16.jsonl sp2_bf16.safetensors 2e-2
finish

#!/bin/bash
# Memory is what the planner says (DESIGN invariant 3): a matrix of layouts (ZeRO 0-3 over dp,
# tp, Megatron-SP, Ulysses, pipelines under GPipe, 1F1B, interleaved and ZB-H1 and one read
# from a file, fp32 and bf16, micro-batches, checkpoints, GPT-2 and Llama) is run for one
# step, and on every rank every memory category above 2% of the total, and the total, must be
# within 5% of the measured peak (plan/memory.c predicts it to the byte; the worst ratio is
# printed). The bytes rank 0 moved per comm in the last step (metrics comm_bytes_grad/_tp/
# _sp/_pp) must equal the communication ledger's (plan/comm.c, through dtrain plan --explain;
# ZeRO-3's gathers under a pipeline are not in it).
#   mem_predict.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
base=(--data.train=data/train.bin --train.batch_size=8 --train.steps=1 --model.n_layer=4
      --model.vocab_size=254)
. "$src/tests/train/layout_lib.sh"

case_() {
    local name=$1 arch=$2 np=$3; shift 3
    if ! timeout 120 mpirun --oversubscribe -np "$np" "$dtrain" train \
        --config "$src/configs/tiny-$arch.ini" "${base[@]}" --train.mem_report="$name.mem.json" \
        --train.metrics="$name.jsonl" "$@" > "$name.log" 2>&1; then
        echo "FAIL $name: run failed"; tail -3 "$name.log"; failed=$((failed + 1)); return
    fi
    check "$name" /usr/bin/python3 "$src/tests/plan/mem_check.py" "$name.mem.json"
    /usr/bin/python3 "$src/tests/plan/mem_check.py" "$name.mem.json" | head -1
    "$dtrain" plan --config "$src/configs/tiny-$arch.ini" "${base[@]}" --world "$np" --explain \
        "$@" > "$name.plan.json" 2>&1
    check "$name bytes" /usr/bin/python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))
m = [json.loads(l) for l in open(sys.argv[2])][-1]
keys = [k for k in ("comm_bytes_grad", "comm_bytes_tp", "comm_bytes_sp", "comm_bytes_pp")
        if k in p]
bad = [f"{k}: predicted {p[k]}, measured {m[k]}" for k in keys if p[k] != m[k]]
print("; ".join(bad) or "bytes equal")
sys.exit(1 if bad else 0)' "$name.plan.json" "$name.jsonl"
}
z() { echo --plugin.type=hybrid --plugin.zero_stage="$1"; }
pp() { echo --plugin.pp_size=2 --plugin.pp_schedule="$1" --plugin.microbatches="$2"; }
bf16=--plugin.precision=bf16

case_ gpt2_single gpt2 1
case_ llama_single_bf16_micro llama 1 $bf16 --train.micro_batch_size=2
for zero in 0 1 2 3; do
    case_ gpt2_dp2_zero$zero gpt2 2 $(z $zero)
done
case_ llama_dp2_zero3_bf16 llama 2 $(z 3) $bf16
case_ llama_dp4_zero2_micro llama 4 $(z 2) --train.micro_batch_size=1
case_ gpt2_tp2 gpt2 2 --plugin.tp_size=2
case_ llama_tp2_split_gather_bf16 llama 2 --plugin.tp_size=2 --plugin.sp_mode=split_gather $bf16
case_ gpt2_sp2 gpt2 2 --plugin.sp_size=2
case_ llama_sp2_zero1 llama 4 --plugin.sp_size=2 $(z 1)
case_ gpt2_pp2_gpipe gpt2 2 $(pp gpipe 4)
case_ llama_pp2_1f1b llama 2 $(pp 1f1b 4)
case_ gpt2_pp2_zbh1_bf16 gpt2 2 $(pp zbh1 4) $bf16
case_ llama_pp2_interleaved llama 2 $(pp interleaved 2) --plugin.pp_chunks=2
case_ gpt2_pp2_zbh1_dp2_zero2 gpt2 4 $(pp zbh1 2) $(z 2)
case_ llama_pp2_tp2_zero3 llama 4 $(pp 1f1b 2) --plugin.tp_size=2 $(z 3) --model.n_layer=3
"$dtrain" schedule --pp 2 --microbatches 4 --kind zbh1 > zbh1.txt
case_ llama_pp2_file_schedule llama 2 --plugin.pp_size=2 --plugin.pp_schedule=file:zbh1.txt \
    --plugin.microbatches=4
case_ gpt2_checkpoint_tp2 gpt2 2 --plugin.tp_size=2 --checkpoint.every=1 --checkpoint.dir=ck
finish

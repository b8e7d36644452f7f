#!/bin/bash
# The communication ledger of the video DiT equals what a real run moved (plan/comm.c): a
# matrix of DiT layouts (Ulysses sp with spatial_temporal and with full attention, Megatron tp
# and Megatron-SP, dp under ZeRO 1-3, pipelines under 1F1B and ZB-H1 (split backward), full
# and selective checkpointing, and mixes) is trained for one step, and the bytes rank 0 moved
# on each comm in it (metrics comm_bytes_grad/_tp/_sp/_pp, counted by core/comm.c) must equal
# dtrain plan --explain's to the byte (ZeRO-3's gathers under a pipeline are not in it).
# Each step also says how long it read its rows and updated (metrics data_ms, optimizer_ms).
# Last, the ranking's premise: Ulysses moves fewer bytes with spatial_temporal attention
# (half its blocks need no all-to-all) than with full attention.
#   comm_predict_dit.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
base=(--config "$src/configs/tiny-dit.ini" --train.steps=1 --train.log_every=1)
. "$src/tests/train/layout_lib.sh"

case_() {
    local name=$1 np=$2; shift 2
    if ! timeout 120 mpirun --oversubscribe -np "$np" "$dtrain" train "${base[@]}" \
        --train.metrics="$name.jsonl" "$@" > "$name.log" 2>&1; then
        echo "FAIL $name: run failed"; tail -3 "$name.log"; failed=$((failed + 1)); return
    fi
    "$dtrain" plan "${base[@]}" --world "$np" --explain "$@" > "$name.plan.json" 2>&1
    check "$name bytes" /usr/bin/python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))
m = [json.loads(l) for l in open(sys.argv[2])][-1]
keys = [k for k in ("comm_bytes_grad", "comm_bytes_tp", "comm_bytes_sp", "comm_bytes_pp",
                   "comm_bytes_cp")
        if k in p]
bad = [f"{k}: predicted {p[k]}, measured {m[k]}" for k in keys if p[k] != m[k]]
# the reading of the rows and the update, timed within the step
t = {k: m[k] for k in ("step_ms", "data_ms", "optimizer_ms")}
if not (0 < t["data_ms"] and 0 < t["optimizer_ms"] and t["data_ms"] + t["optimizer_ms"] < t["step_ms"]):
    bad.append(f"timed parts {t}")
print("; ".join(bad) or "bytes equal")
sys.exit(1 if bad else 0)' "$name.plan.json" "$name.jsonl"
    echo "$name: $(/usr/bin/python3 -c '
import json, sys
p = json.load(open(sys.argv[1]))
print(" ".join(f"{k[11:]}={p[k]}" for k in p if k.startswith("comm_bytes")))' "$name.plan.json")"
}
z() { echo --plugin.type=hybrid --plugin.zero_stage="$1"; }
pp() { echo --plugin.pp_size=2 --plugin.pp_schedule="$1" --plugin.microbatches="$2"; }
ac() { echo --plugin.ac="$1" --plugin.ac_every="${2:-1}"; }
sg=--plugin.sp_mode=split_gather
bf16=--plugin.precision=bf16

case_ dit_sp2 2 --plugin.sp_size=2
case_ dit_sp2_full_attention 2 --plugin.sp_size=2 --model.attn=full
case_ dit_tp2 2 --plugin.tp_size=2
case_ dit_tp2_split_gather 2 --plugin.tp_size=2 $sg
case_ dit_dp2_zero1 2 $(z 1)
case_ dit_dp2_zero2 2 $(z 2)
case_ dit_dp2_zero3_micro 2 $(z 3) --train.micro_batch_size=1
case_ dit_pp2_1f1b 2 $(pp 1f1b 4)
case_ dit_pp2_zbh1_ac_full 2 $(pp zbh1 4) $(ac full)
case_ dit_sp2_tp2_ac_full_every2 4 --plugin.sp_size=2 --plugin.tp_size=2 $(ac full 2) \
    --model.n_layer=3
case_ dit_tp2_split_gather_pp2_zbh1_bf16 4 --plugin.tp_size=2 $sg $(pp zbh1 2) $bf16
case_ dit_sp2_dp2_zero2_selective 4 --plugin.sp_size=2 $(z 2) $(ac selective)
case_ dit_sp2_pp2_interleaved 4 --plugin.sp_size=2 $(pp interleaved 2) --plugin.pp_chunks=2 \
    --model.n_layer=4
# the ring: full and temporal attention around it, selective and full reruns, with Ulysses
ring=(--plugin.type=hybrid --plugin.cp_size=2)
case_ dit_cp2 2 "${ring[@]}"
case_ dit_cp2_full_attention_selective 2 "${ring[@]}" --model.attn=full $(ac selective)
case_ dit_cp2_sp2_pp2_zbh1_full 8 "${ring[@]}" --plugin.cp_split=contiguous --plugin.sp_size=2 \
    $(pp zbh1 2) $(ac full) --model.n_layer=3
case_ dit_cp2_zbh1_selective 4 "${ring[@]}" $(pp zbh1 2) $(ac selective)
# text: the cross-attention's region ops, the text's gradient summed over tp, boundaries
case_ dit_text_tp2_split_gather_pp2_zbh1 4 --model.text_len=12 --plugin.tp_size=2 $sg \
    $(pp zbh1 2)
# boundaries in tp pieces (with text they travel whole: its gradient is partial over tp)
case_ dit_tp2_pp2_scatter 4 --plugin.tp_size=2 $(pp 1f1b 2) --plugin.pp_scatter=true
case_ dit_text_tp2_pp2_scatter_whole 4 --model.text_len=12 --plugin.tp_size=2 $(pp 1f1b 2) \
    --plugin.pp_scatter=true
case_ dit_text_tp2_sp2_selective 4 --model.text_len=12 --plugin.tp_size=2 --plugin.sp_size=2 \
    $(ac selective)
sp_of() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["comm_bytes_sp"])' "$1"; }
st=$(sp_of dit_sp2.plan.json) full=$(sp_of dit_sp2_full_attention.plan.json)
check "ulysses bytes: spatial_temporal $st < full $full" test "$st" -lt "$full"
finish

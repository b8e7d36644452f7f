#!/bin/bash
# Pipeline parallelism equals the single process (DESIGN invariant 1): per-step losses and
# exported weights within 1e-5 relative (fp32) for GPipe and 1F1B at pp 2 and 4 with pp and
# 2 pp micro-batches, ZB-H1 (split backward) likewise and with dp x ZeRO 1-3 and tp x
# split_gather, interleaved 1F1B with 2 chunks per rank likewise, uneven pp_layers, and the
# compositions pp2 x dp2 with ZeRO 1, 2 and 3, pp2 x tp2, pp2 x sp2 and pp2 x tp2 x dp2 on
# 8 ranks; boundaries sent in tp pieces (plugin.pp_scatter) under 1F1B, ZB-H1 and interleaved,
# the same bits as whole. Checkpoints: bit-exact resume at pp2 x dp2 ZeRO-3, and a pp 2 checkpoint resumed in
# one process. A step trace is written and shows idle spans. Broken schedules given with
# pp_schedule=file: are rejected on every rank, naming the first offending action.
#   pp_layouts.sh DTRAIN SRC_DIR ARCH
dtrain=$1 src=$2 arch=$3
base=(--config "$src/configs/tiny-$arch.ini" --data.train=data/train.bin --data.val=data/val.bin
      --train.batch_size=8 --train.steps=4 --train.eval_every=2 --optim.eps=1e-6
      --optim.warmup_steps=1 --optim.lr=3e-3 --plugin.grad_clip=1.0 --model.vocab_size=254
      --model.n_layer=4)
. "$src/tests/train/layout_lib.sh"

run ref 1 || { echo "reference run failed"; cat ref.log; exit 1; }
for pp in 2 4; do
    for kind in gpipe 1f1b; do
        for m in $pp $((2 * pp)); do
            same "pp${pp}_${kind}_m$m" "$pp" --plugin.pp_size=$pp --plugin.pp_schedule=$kind \
                --plugin.microbatches=$m
        done
    done
done
for m in 4 8; do
    same pp4_zbh1_m$m 4 --plugin.pp_size=4 --plugin.pp_schedule=zbh1 --plugin.microbatches=$m
done
for m in 2 4; do
    same pp2_zbh1_m$m 2 --plugin.pp_size=2 --plugin.pp_schedule=zbh1 --plugin.microbatches=$m
done
for zero in 1 2 3; do
    same pp2_zbh1_dp2_zero$zero 4 --plugin.pp_size=2 --plugin.pp_schedule=zbh1 \
        --plugin.type=hybrid --plugin.zero_stage=$zero --plugin.microbatches=2
done
same pp2_zbh1_tp2_split_gather 4 --plugin.pp_size=2 --plugin.pp_schedule=zbh1 --plugin.tp_size=2 \
    --plugin.sp_mode=split_gather --plugin.microbatches=2
# interleaved 1F1B, 2 chunks per rank: pp x 2 chunks of 1 layer at pp 4 needs 8 layers, so
# these compare with an 8-layer reference
ref_layers=4
for pp in 2 4; do
    for m in $pp $((2 * pp)); do
        if [ $((2 * pp)) -gt $ref_layers ]; then
            base+=(--model.n_layer=$((2 * pp))); ref_layers=$((2 * pp))
            run ref 1 || { echo "8-layer reference run failed"; cat ref.log; exit 1; }
        fi
        same pp${pp}_interleaved_m$m "$pp" --plugin.pp_size=$pp --plugin.pp_schedule=interleaved \
            --plugin.pp_chunks=2 --plugin.microbatches=$m
    done
done
base+=(--model.n_layer=4)
run ref 1 || { echo "reference run failed"; cat ref.log; exit 1; }
same pp2_layers_3_1 2 --plugin.pp_size=2 --plugin.pp_layers=3,1 --plugin.microbatches=4
# stage boundaries the time model picks on this machine (rank 0 measures, all run its counts)
same pp2_layers_auto 2 --plugin.pp_size=2 --plugin.pp_layers=auto --plugin.microbatches=4
check "pp_layers=auto names its counts" grep -q "plugin.pp_layers=auto: [0-9]*,[0-9]* layers" \
    pp2_layers_auto.log
for zero in 1 2 3; do
    same pp2_dp2_zero$zero 4 --plugin.pp_size=2 --plugin.type=hybrid --plugin.zero_stage=$zero \
        --plugin.microbatches=2
done
same pp2_tp2 4 --plugin.pp_size=2 --plugin.tp_size=2 --plugin.microbatches=2
# boundaries in pieces (plugin.pp_scatter): each tp rank sends its half, the next stage's tp
# group gathers them; the same bits as whole messages, and half the bytes between stages
same pp2_tp2_scatter 4 --plugin.pp_size=2 --plugin.tp_size=2 --plugin.microbatches=2 \
    --plugin.pp_scatter=true
identical pp2_tp2_scatter pp2_tp2
check "pp_scatter halves the bytes between stages" /usr/bin/python3 -c '
import json, sys
whole, piece = ([json.loads(l)["comm_bytes_pp"] for l in open(f)][-1] for f in sys.argv[1:])
norm = 8  # the gradient norm all-reduce over pp (2 ranks: 2 x 8 x 1/2 bytes)
print(whole, piece)
sys.exit(0 if whole - norm == 2 * (piece - norm) else 1)' pp2_tp2.jsonl pp2_tp2_scatter.jsonl
same pp2_zbh1_tp2_scatter 4 --plugin.pp_size=2 --plugin.pp_schedule=zbh1 --plugin.tp_size=2 \
    --plugin.microbatches=2 --plugin.pp_scatter=true
same pp2_interleaved_tp2_scatter 4 --plugin.pp_size=2 --plugin.pp_schedule=interleaved \
    --plugin.pp_chunks=2 --plugin.tp_size=2 --plugin.microbatches=2 --plugin.pp_scatter=true
same pp2_sp2 4 --plugin.pp_size=2 --plugin.sp_size=2 --plugin.microbatches=2
same pp2_tp2_dp2_zero2 8 --plugin.pp_size=2 --plugin.tp_size=2 --plugin.type=zero2 \
    --plugin.microbatches=2

# checkpoints
ck=(--checkpoint.keep=0 --plugin.microbatches=2)
p3=(--plugin.pp_size=2 --plugin.type=zero3)
run p3_straight 4 "${p3[@]}" "${ck[@]}" --checkpoint.dir=a --checkpoint.every=0 || failed=$((failed + 1))
run p3_first 4 "${p3[@]}" "${ck[@]}" --checkpoint.dir=a --checkpoint.every=2 || failed=$((failed + 1))
rm -rf a/step-4
run p3_resumed 4 "${p3[@]}" "${ck[@]}" --checkpoint.dir=a --checkpoint.every=2 \
    --checkpoint.resume=auto || failed=$((failed + 1))
check "pp2 dp2 zero3 resume is bit-exact" cmp p3_straight.safetensors p3_resumed.safetensors
run pp2_ck 2 --plugin.pp_size=2 "${ck[@]}" --checkpoint.dir=b --checkpoint.every=2 \
    || failed=$((failed + 1))
rm -rf b/step-4
run one_resumed 1 --checkpoint.keep=0 --checkpoint.dir=b --checkpoint.every=2 \
    --checkpoint.resume=auto || failed=$((failed + 1))
check "pp2 checkpoint resumed in one process" /usr/bin/python3 "$src/tests/train/compare_runs.py" \
    <(tail -n 2 ref.jsonl) ref.safetensors <(tail -n 2 one_resumed.jsonl) one_resumed.safetensors 1e-5

# the trace: one JSON document, F and B spans of every micro-batch, idle time in the bubble
run traced 2 --plugin.pp_size=2 --plugin.microbatches=4 --train.trace=trace.json || failed=$((failed + 1))
check "trace of a pp2 run" /usr/bin/python3 - trace.json <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {(e["tid"], e["name"]) for e in ev if e.get("ph") == "X"}
for rank in (0, 1):
    for mb in range(4):
        assert (rank, f"F{mb}") in names and (rank, f"B{mb}") in names, (rank, mb)
idle = [e for e in ev if e.get("name") == "idle"]
assert idle, "no idle spans"
print(f"{len(ev)} events, {len(idle)} idle spans")
PY

# broken schedules never reach the wire: every rank names the first offending action
bad() { # NAME TEXT PATTERN
    local name=$1 text=$2 pattern=$3
    printf '%b' "$text" > "$name.txt"
    timeout 60 mpirun --oversubscribe -np 2 "$dtrain" train "${base[@]}" --plugin.pp_size=2 \
        --plugin.microbatches=2 --plugin.pp_schedule="file:$name.txt" > "$name.out" 2> "$name.err"
    local rc=$? n
    n=$(grep -c "error:.*$pattern" "$name.err")
    if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ "$n" -ne 2 ]; then
        echo "FAIL $name: rc=$rc, $n of 2 ranks named it"; head -4 "$name.err"; failed=$((failed + 1))
    else
        passed=$((passed + 1))
    fi
}
bad missing_recv '0F0,0SA0,0F1,0SA1,0RG0,0B0,0RG1,0B1\n1RA0,1F0,1B0,1SG0,1F1,1B1,1SG1\n' \
    'rank 0 action 3 (0SA1): no matching 1RA1 on rank 1'
bad b_before_f '0F0,0SA0,0F1,0SA1,0RG0,0B0,0RG1,0B1\n1RA0,1B0,1F0,1SG0,1RA1,1F1,1B1,1SG1\n' \
    'rank 1 action 1 (1B0): B before its F'
bad crosswise '0F0,0RG0,0SA0,0F1,0SA1,0B0,0RG1,0B1\n1RA0,1F0,1B0,1SG0,1RA1,1F1,1B1,1SG1\n' \
    'deadlock.*rank 0 action 1 (0RG0) waits for 1SG0'
finish

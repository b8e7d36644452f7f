#!/bin/bash
# Layout equivalence (DESIGN invariant 1): for one arch, the single-process run and every
# data-parallel layout (dp 2 and 4 x ZeRO 0-3 x 1 or 2 micro-batches per rank) log the same
# losses and export the same weights (fp32: relative 1e-5; bf16: 2e-2 on a dp2 ZeRO-2 run).
# Memory: per rank, AdamW state is 1/dp of the single process's (plus < 16 floats of padding
# per moment) for ZeRO >= 1, and so are weights (ZeRO 3) and gradients (ZeRO 2, 3).
#   layouts.sh DTRAIN SRC_DIR ARCH
dtrain=$1 src=$2 arch=$3
base=(--config "$src/configs/tiny-$arch.ini" --data.train=data/train.bin --data.val=data/val.bin
      --train.batch_size=8 --train.steps=4 --train.eval_every=2 --optim.eps=1e-6
      --optim.warmup_steps=1 --optim.lr=3e-3 --plugin.grad_clip=1.0)
. "$src/tests/train/layout_lib.sh"
peak() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['peak'][sys.argv[2]])" "$1" "$2"; }

run ref 1 || { echo "reference run failed"; cat ref.log; exit 1; }
run ref_bf16 1 --plugin.precision=bf16 || { echo "bf16 reference failed"; cat ref_bf16.log; exit 1; }
for dp in 2 4; do
    for zero in 0 1 2 3; do
        for micro in 1 2; do
            name=dp${dp}_zero${zero}_micro${micro}
            mb=$((8 / dp / micro))
            if ! run "$name" "$dp" --plugin.type=hybrid --plugin.zero_stage=$zero \
                    --train.micro_batch_size=$mb; then
                echo "FAIL $name: run failed"; tail -3 "$name.log"; failed=$((failed + 1)); continue
            fi
            check "$name equivalence" /usr/bin/python3 "$src/tests/train/compare_runs.py" \
                ref.jsonl ref.safetensors "$name.jsonl" "$name.safetensors" 1e-5
            [ "$micro" -eq 1 ] || continue
            # memory per rank follows the ZeRO formulas
            check "$name memory" /usr/bin/python3 - "$zero" "$dp" ref.mem.json "$name.mem.json" <<'PY'
import json, sys
zero, dp = int(sys.argv[1]), int(sys.argv[2])
ref = json.load(open(sys.argv[3]))["peak"]; run = json.load(open(sys.argv[4]))["peak"]
slack = 2 * 4 * 16 + 64  # two moments padded to 16 floats, plus allocation rounding
def expect(cat, sharded):
    want = ref[cat] / dp if sharded else ref[cat]
    ok = abs(run[cat] - want) <= slack + 4 * 16
    print(f"{cat}: {run[cat]:.0f} bytes, expected {want:.0f}{'' if ok else '  <-- FAIL'}")
    return ok
ok = expect("optim", zero >= 1) & expect("grads", zero >= 2) & expect("params", zero >= 3)
sys.exit(0 if ok else 1)
PY
        done
    done
done
if run dp2_zero2_bf16 2 --plugin.type=zero2 --plugin.precision=bf16; then
    check "bf16 dp2 zero2 within bf16 tolerance" /usr/bin/python3 "$src/tests/train/compare_runs.py" \
        ref_bf16.jsonl ref_bf16.safetensors dp2_zero2_bf16.jsonl dp2_zero2_bf16.safetensors 2e-2
else
    echo "FAIL bf16 run"; tail -3 dp2_zero2_bf16.log; failed=$((failed + 1))
fi
# resume from a dp2 zero2 checkpoint continues bit-exactly at the same layout
z2=(--plugin.type=zero2 --train.steps=4 --checkpoint.dir=ck --checkpoint.keep=0)
run z2_straight 2 "${z2[@]}" --checkpoint.every=0 || failed=$((failed + 1))
run z2_first 2 "${z2[@]}" --checkpoint.every=2 || failed=$((failed + 1))
rm -rf ck/step-4
run z2_resumed 2 "${z2[@]}" --checkpoint.every=2 --checkpoint.resume=auto || failed=$((failed + 1))
check "dp2 zero2 resume is bit-exact" cmp z2_straight.safetensors z2_resumed.safetensors
finish

#!/bin/bash
# Optimizer state on disk (plugin.offload=disk) moves AdamW's moments into a file per rank and
# changes nothing else: against the same run with offload=none, the logged losses and grad
# norms are the same digits and the exported weights the same bytes, on one process (fp32 and
# bf16), dp2 x ZeRO 1, 2, 3 and pp2; the mem_report's optim category is exactly the window,
# 16 x chunk bytes, chunk = max(16, min(floor(window / 256) x 16, ceil16(ceil(count / 2)))),
# count = the floats each moment has in memory (the offload=none run's optim bytes / 8). A
# dp2 ZeRO-2 checkpoint saved with offload resumes bit-exactly with and without it, and one
# saved without resumes with it. No file is left in offload_dir. A folder that cannot be
# created or written is one clear error on both ranks of mpirun -np 2, before any step.
#   offload.sh DTRAIN SRC_DIR ARCH
dtrain=$1 src=$2 arch=$3
base=(--config "$src/configs/tiny-$arch.ini" --data.train=data/train.bin --data.val=data/val.bin
      --train.batch_size=8 --train.steps=4 --train.eval_every=2 --optim.eps=1e-6
      --optim.warmup_steps=1 --optim.lr=3e-3 --plugin.grad_clip=1.0)
. "$src/tests/train/layout_lib.sh"
window_mb=0.01 # 640 floats per chunk: the tiny models' state streams in many chunks
disk=(--plugin.offload=disk --plugin.offload_dir="$work/od" --plugin.offload_window_mb=$window_mb)
fields() { grep -o '"\(loss\|grad_norm\)": [^,]*' "$1"; }

# NAME_A NAME_B: same logged losses and grad norms (all digits), byte-identical weights
identical() {
    check "$2: weights identical to $1" cmp "$1.safetensors" "$2.safetensors"
    check "$2: losses identical to $1" diff <(fields "$1.jsonl") <(fields "$2.jsonl")
}

# NAME_NONE NAME_DISK: the disk run's optim bytes are the window the formula gives
window() {
    check "$2: optim is the window" \
        /usr/bin/python3 - "$1.mem.json" "$2.mem.json" "$window_mb" <<'PY'
import json, math, sys
none, disk = (json.load(open(p))["per_rank"] for p in sys.argv[1:3])
ok = len(none) == len(disk)
for r, (a, b) in enumerate(zip(none, disk)):
    count = a["optim"] // 8  # m and v, one float each per element
    fit = math.floor(float(sys.argv[3]) * 1048576 / 256) * 16
    want = 16 * max(16, min(fit, ((count + 1) // 2 + 15) // 16 * 16))
    ok &= b["optim"] == want
    print(f"rank {r}: optim {b['optim']} bytes (none: {a['optim']}), want {want}")
sys.exit(0 if ok else 1)
PY
}

# NAME NP ARGS...: run with offload=none and =disk, and compare
pair() {
    local name=$1 np=$2; shift 2
    if ! run "$name" "$np" "$@" || ! run "${name}_disk" "$np" "$@" "${disk[@]}"; then
        echo "FAIL $name: run failed"; tail -3 "$name.log" "${name}_disk.log"
        failed=$((failed + 1)); return
    fi
    identical "$name" "${name}_disk"
    window "$name" "${name}_disk"
}

pair single 1
pair single_bf16 1 --plugin.precision=bf16
pair micro 1 --train.micro_batch_size=2
for zero in 1 2 3; do
    pair dp2_zero$zero 2 --plugin.type=hybrid --plugin.zero_stage=$zero
done
pair pp2 2 --plugin.pp_size=2 --model.n_layer=4
# the offloaded layouts still equal the single process (the layout harness's tolerance)
check "dp2 zero3 offload equals one process" /usr/bin/python3 "$src/tests/train/compare_runs.py" \
    single.jsonl single.safetensors dp2_zero3_disk.jsonl dp2_zero3_disk.safetensors 1e-5

# resume: a dp2 ZeRO-2 checkpoint written through the files, read back with and without them
z2=(--plugin.type=zero2 --checkpoint.keep=0 --checkpoint.every=2)
run ck_disk 2 "${z2[@]}" --checkpoint.dir=ck_disk "${disk[@]}" || failed=$((failed + 1))
run ck_none 2 "${z2[@]}" --checkpoint.dir=ck_none || failed=$((failed + 1))
rm -rf ck_disk/step-4 ck_none/step-4
for resume in "disk disk" "disk none" "none disk"; do
    set -- $resume
    extra=(); [ "$2" = disk ] && extra=("${disk[@]}")
    name=from_$1_to_$2
    if run "$name" 2 "${z2[@]}" --checkpoint.dir=ck_$1 --checkpoint.resume=ck_$1/step-2 \
            "${extra[@]}"; then
        check "$name: resumed at step 2" grep -q "resumed from ck_$1/step-2 at step 2" "$name.log"
        check "$name: weights identical to the straight run" \
            cmp dp2_zero2_disk.safetensors "$name.safetensors"
        check "$name: losses of steps 3-4 identical" \
            diff <(fields dp2_zero2_disk.jsonl | tail -4) <(fields "$name.jsonl")
    else
        echo "FAIL $name: run failed"; tail -3 "$name.log"; failed=$((failed + 1))
    fi
done
check "no file left in offload_dir" test -z "$(ls -A "$work/od")"

# bad offload_dir: one clear error on every rank, before the first step
touch plain
for bad in "plain/sub|cannot be created" "/sys/kernel|is not writable"; do
    dir=${bad%%|*} want=${bad#*|}
    if run bad 2 --plugin.type=zero2 --plugin.offload=disk --plugin.offload_dir="$dir"; then
        echo "FAIL offload_dir=$dir was accepted"; failed=$((failed + 1)); continue
    fi
    for r in 0 1; do
        check "offload_dir=$dir: rank $r says '$want'" \
            grep -q "rank $r\]: error: plugin.offload=disk: offload_dir $dir $want" bad.log
    done
    check "offload_dir=$dir: no step ran" test ! -s bad.jsonl
done
finish

#!/bin/bash
# Sharded checkpoints reshard (issue 11, items 1, 3, 4): a checkpoint saved at step 2 of 4 in
# one layout resumes in one process and in another layout, and steps 3-4's losses and the
# exported weights equal the uninterrupted single-process run's (1e-5 relative; bf16 against
# the bf16 reference at 2e-2); resumed in its own layout the export is byte-identical to that
# layout's uninterrupted run. Each rank writes its own file: a dp2 ZeRO-3 save leaves two
# rank files and a manifest, and no partial folder. Item 8's matrix: on a 4-layer model (4 kv
# heads), a checkpoint saved in pp2 x tp2 x dp2 (8 ranks) resumes in dp4 x ZeRO-3, tp4, pp4
# and one process, each within 1e-5 of the uninterrupted run, and in its own layout byte for
# byte; the save is async, which writes the same bytes as sync (train/ckpt_async).
#   ckpt_layouts.sh DTRAIN SRC_DIR ARCH
dtrain=$1 src=$2 arch=$3
base=(--config "$src/configs/tiny-$arch.ini" --data.train=data/train.bin
      --train.batch_size=8 --train.steps=4 --optim.eps=1e-6 --optim.warmup_steps=1
      --optim.lr=3e-3 --plugin.grad_clip=1.0 --model.vocab_size=254 --checkpoint.keep=0)
. "$src/tests/train/layout_lib.sh"
cmp_ref() { # NAME REF: steps 3-4 and the export against REF (tolerance $3, default 1e-5)
    check "$1 equals $2" /usr/bin/python3 "$src/tests/train/compare_runs.py" \
        <(tail -n 2 "$2.jsonl") "$2.safetensors" <(tail -n 2 "$1.jsonl") "$1.safetensors" "${3:-1e-5}"
}
run ref 1 || { echo "reference run failed"; cat ref.log; exit 1; }
run ref_bf16 1 --plugin.precision=bf16 || { echo "bf16 reference failed"; exit 1; }
hy=(--plugin.type=hybrid)
# NAME NP ARGS... -- NP2 ARGS2...: save under the first layout (uninterrupted run NAME_save),
# resume in one process (NAME_one), in the same layout (NAME_same: byte-identical) and in the
# second (NAME_other)
reshard() {
    local name=$1 np=$2 ref=ref tol=1e-5; shift 2
    local -a a=() b=() extra=()
    while [ "$1" != -- ]; do a+=("$1"); shift; done; shift
    local np2=$1; shift; b=("$@")
    [[ " ${a[*]} ${b[*]} " == *bf16* ]] && { ref=ref_bf16; tol=2e-2; extra=(--plugin.precision=bf16); }
    if ! run ${name}_save "$np" "${a[@]}" --checkpoint.dir=ck_$name --checkpoint.every=2; then
        echo "FAIL $name: save run failed"; tail -3 ${name}_save.log; failed=$((failed + 1)); return
    fi
    check "$name: a complete step-2 folder, no partial one" \
        bash -c "[ -f ck_$name/step-2/manifest.json ] && ! ls -d ck_$name/*partial* 2>/dev/null"
    rm -rf ck_$name/step-4 # as if killed after step 2's checkpoint
    local rs=(--checkpoint.dir=ck_$name --checkpoint.every=0 --checkpoint.resume=auto)
    run ${name}_one 1 "${extra[@]}" "${rs[@]}" && grep -q "resumed from ck_$name/step-2 at step 2" \
        ${name}_one.log && cmp_ref ${name}_one $ref $tol ||
        { echo "FAIL $name: one-process resume"; tail -3 ${name}_one.log; failed=$((failed + 1)); }
    run ${name}_same "$np" "${a[@]}" "${rs[@]}" &&
        check "$name: same-layout resume is byte-identical" cmp ${name}_save.safetensors \
            ${name}_same.safetensors || { echo "FAIL $name: same-layout resume";
                                          tail -3 ${name}_same.log; failed=$((failed + 1)); }
    run ${name}_other "$np2" "${b[@]}" "${rs[@]}" && cmp_ref ${name}_other $ref $tol ||
        { echo "FAIL $name: resume in another layout"; tail -3 ${name}_other.log; failed=$((failed + 1)); }
}
reshard zero3 2 --plugin.type=zero3 -- 2 "${hy[@]}" --plugin.tp_size=2
check "zero3: one file per rank" bash -c "ls ck_zero3/step-2 | sort | tr '\n' ' ' |
    grep -qx 'manifest.crc32c manifest.json rank-00000.safetensors rank-00001.safetensors '"
reshard tp2 2 "${hy[@]}" --plugin.tp_size=2 -- 2 --plugin.pp_size=2 --plugin.pp_schedule=1f1b
reshard pp2 2 --plugin.pp_size=2 --plugin.pp_schedule=1f1b -- 2 --plugin.type=zero1
reshard sp2 2 "${hy[@]}" --plugin.sp_size=2 -- 4 "${hy[@]}" --plugin.tp_size=2 --plugin.zero_stage=3 \
    --train.micro_batch_size=2
reshard bf16 2 --plugin.type=zero2 --plugin.precision=bf16 -- 2 "${hy[@]}" --plugin.tp_size=2 \
    --plugin.precision=bf16
reshard offload 2 --plugin.type=zero2 --plugin.offload=disk --plugin.offload_dir="$work/od" -- \
    2 "${hy[@]}" --plugin.tp_size=2 --plugin.pp_size=1 --plugin.zero_stage=1

# item 8's matrix on a deeper model (pp4 needs 4 layers, tp4 4 kv heads)
base+=(--model.n_layer=4 $([ "$arch" = llama ] && echo --model.n_kv_head=4))
run ref4 1 || { echo "FAIL matrix: reference run failed"; failed=$((failed + 1)); }
if run m_save 8 "${hy[@]}" --plugin.pp_size=2 --plugin.tp_size=2 --checkpoint.dir=ck_m \
        --checkpoint.every=2 --checkpoint.async=true; then
    rm -rf ck_m/step-4
    check "matrix: one file per rank" bash -c "[ \$(ls ck_m/step-2/rank-*.safetensors | wc -l) -eq 8 ]"
    rs=(--checkpoint.dir=ck_m --checkpoint.every=0 --checkpoint.resume=auto)
    # NAME NP ARGS...: resumed from step 2 in that layout, within 1e-5 of ref4
    matrix() {
        local name=$1 np=$2; shift 2
        run m_$name "$np" "$@" "${rs[@]}" && grep -q "resumed from ck_m/step-2 at step 2" m_$name.log &&
            cmp_ref m_$name ref4 || { echo "FAIL matrix: resume in $name"; tail -3 m_$name.log;
                                       failed=$((failed + 1)); }
    }
    matrix dp4_zero3 4 --plugin.type=zero3
    matrix tp4 4 "${hy[@]}" --plugin.tp_size=4
    matrix pp4 4 --plugin.pp_size=4 --plugin.pp_schedule=1f1b
    matrix one 1
    run m_same 8 "${hy[@]}" --plugin.pp_size=2 --plugin.tp_size=2 "${rs[@]}" &&
        check "matrix: same-layout resume is byte-identical" cmp m_save.safetensors m_same.safetensors ||
        { echo "FAIL matrix: same-layout resume"; tail -3 m_same.log; failed=$((failed + 1)); }
else
    echo "FAIL matrix: save run failed"; tail -3 m_save.log; failed=$((failed + 1))
fi
finish

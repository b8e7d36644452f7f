#!/bin/bash
# Async checkpoint save (issue 11, item 2): with checkpoint.async the shards are written by a
# background thread, and the folders are the sync save's byte for byte (rank files; the
# manifest too, but for the config text it records, which names its own dir and async); the
# run's losses and export equal the sync run's, and a resume from an async checkpoint is
# byte-identical to the uninterrupted run. Layouts: dp2 ZeRO-2, ZeRO-2 with offloaded moments,
# and pp2 x tp2 (4 ranks). A background write that fails (a full 1 MiB tmpfs) is a clear
# error on every rank at a later step, and leaves neither step-N nor a partial folder; an
# unwritable folder fails at the save itself.
#   ckpt_async.sh DTRAIN SRC_DIR ARCH
dtrain=$1 src=$2 arch=$3
base=(--config "$src/configs/tiny-$arch.ini" --data.train=data/train.bin --train.steps=6
      --checkpoint.keep=0 --checkpoint.every=2 --optim.warmup_steps=1)
. "$src/tests/train/layout_lib.sh"
# the manifest without its config text, canonical
strip() { /usr/bin/python3 -c 'import json, sys
d = json.load(open(sys.argv[1])); d.pop("config"); print(json.dumps(d, sort_keys=True))' "$1"; }
same_folder() { # A B: the same files; rank files byte-identical, manifests but for config
    [ "$(ls "$1")" == "$(ls "$2")" ] || { echo "files differ: $(ls "$1") / $(ls "$2")"; return 1; }
    for f in "$1"/rank-*; do cmp "$f" "$2/$(basename "$f")" || return 1; done
    cmp <(strip "$1/manifest.json") <(strip "$2/manifest.json")
}
# NAME NP ARGS...: the same run saved sync and async
pair() {
    local name=$1 np=$2; shift 2
    if ! run ${name}_sync "$np" "$@" --checkpoint.dir=ck_${name}_sync ||
       ! run ${name}_async "$np" "$@" --checkpoint.dir=ck_${name}_async --checkpoint.async=true; then
        echo "FAIL $name: run failed"; tail -3 ${name}_sync.log ${name}_async.log
        failed=$((failed + 1)); return
    fi
    check "$name: async writes in the background" grep -q "step-2: writing in the background" \
        ${name}_async.log
    for s in 2 4 6; do
        check "$name: step-$s async = sync" same_folder ck_${name}_sync/step-$s ck_${name}_async/step-$s
    done
    check "$name: no partial folder" bash -c "! ls -d ck_${name}_async/*partial* 2>/dev/null"
    check "$name: same losses" cmp <(cut -d, -f1-3 ${name}_sync.jsonl) <(cut -d, -f1-3 ${name}_async.jsonl)
    check "$name: same export" cmp ${name}_sync.safetensors ${name}_async.safetensors
    # exact resume from the async step-4 (in async mode itself)
    rm -rf ck_${name}_async/step-6
    run ${name}_resumed "$np" "$@" --checkpoint.dir=ck_${name}_async --checkpoint.resume=auto \
        --checkpoint.async=true
    check "$name: resumed at step 4" grep -q "resumed from ck_${name}_async/step-4 at step 4" \
        ${name}_resumed.log
    check "$name: resume is byte-identical" cmp ${name}_sync.safetensors ${name}_resumed.safetensors
}
pair zero2 2 --plugin.type=zero2
pair offload 2 --plugin.type=zero2 --plugin.offload=disk --plugin.offload_dir="$work/od" \
    --plugin.offload_window_mb=0.01
pair pp2tp2 4 --plugin.type=hybrid --plugin.pp_size=2 --plugin.tp_size=2 --plugin.microbatches=2

# a background write that fails: a 1 MiB tmpfs holds the folder, not both ranks' files
# (~750 KB each). Steps 1-2 run, the save starts, the error comes at a later step boundary
# (or at the latest with the next save), on both ranks.
mkdir -p full
if mount -t tmpfs -o size=1m tmpfs full 2> /dev/null; then
    run disk_full 2 --plugin.type=zero2 --checkpoint.dir=full/ck --checkpoint.async=true
    check "disk full: the run fails" test $? -ne 0
    check "disk full: named on both ranks" bash -c "[ \$(grep -c 'checkpoint full/ck/step-2 failed in the background:.*No space left' disk_full.log) -eq 2 ]"
    check "disk full: it was written in the background" grep -q "step-2: writing in the background" disk_full.log
    check "disk full: no step or partial folder" bash -c "! ls -d full/ck/step-* 2>/dev/null"
    umount full
else
    echo "note: cannot mount a tmpfs here; the full-disk case is not tried"
fi
touch afile
run unwritable 2 --plugin.type=zero2 --checkpoint.dir=afile/ck --checkpoint.async=true
check "unwritable: the run fails" test $? -ne 0
check "unwritable: named" grep -q "afile" unwritable.log
check "unwritable: nothing written" bash -c "! ls -d afile/* 2>/dev/null"
finish

#!/bin/bash
# Damaged checkpoints (issue 11, items 5c and 5e). resume=auto takes the newest checkpoint
# whose manifest and checksums verify: a step-4 folder with a truncated rank file, a flipped
# byte, a missing rank file or an edited manifest is named in a warning and skipped, step 3
# is resumed, and the export is byte-identical to the uninterrupted run's. When every
# checkpoint is damaged, resume is an error naming them, not a silent fresh start. A save
# that cannot be written (a full 1 MiB tmpfs) is a clear error and
# leaves neither step-N nor a partial folder; so does an unwritable folder. A partial folder
# left by a writer that was killed is removed by the next save on its host.
# A checkpoint in the whole format of older dtrain still resumes bit for bit.
# Also dtrain convert (sharded <-> one HF file, byte-exact) and sample from a step folder.
#   ckpt_faults.sh DTRAIN SRC_DIR ARCH
set -uo pipefail
dtrain=$1 src=$2 arch=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
"$dtrain" prepare --input "$src/src/core" --out data > /dev/null || exit 1
run=("$dtrain" train --config "$src/configs/tiny-$arch.ini" --data.train=data/train.bin
     --train.steps=4 --checkpoint.keep=0)
passed=0 failed=0
check() { if eval "$2"; then passed=$((passed + 1)); else echo "FAIL: $1"; failed=$((failed + 1)); fi; }
"${run[@]}" --train.export=straight.safetensors --checkpoint.dir=good --checkpoint.every=1 \
    > /dev/null || { echo "reference run failed"; exit 1; }
file=rank-00000.safetensors
# NAME COMMAND: damage a copy's step-4 with COMMAND (run inside step-4), then resume
damaged() {
    rm -rf ck && cp -r good ck && (cd ck/step-4 && eval "$2")
    "${run[@]}" --checkpoint.dir=ck --checkpoint.resume=auto --train.export=$1.safetensors \
        > $1.log 2>&1
    check "$1: step-4 named and skipped" "grep -q 'skipping damaged checkpoint ck/step-4' $1.log"
    check "$1: step 3 resumed" "grep -q 'resumed from ck/step-3 at step 3' $1.log"
    check "$1: export byte-identical" "cmp -s straight.safetensors $1.safetensors"
}
damaged truncated "truncate -s -100 $file"
check "truncated: the file is named" "grep -q \"$file.*truncated\" truncated.log"
damaged flipped "printf '\\xff' | dd of=$file bs=1 seek=1000 conv=notrunc status=none"
check "flipped: checksum named" "grep -q \"$file: checksum\" flipped.log"
damaged missing "rm $file"
damaged edited "sed -i 's/\"step\":[[:space:]]*4,/\"step\": 5,/' manifest.json && grep -q '\"step\": 5' manifest.json"
check "edited: manifest named" "grep -q 'manifest.json: checksum' edited.log"

# convert: the step-4 folder to one HF file equals the run's export byte for byte, and back
# to a step-0 checkpoint and out again; sample reads a step folder as it reads the export
check "convert to HF equals the export" \
    "$dtrain convert --from good/step-4 --to conv.safetensors > /dev/null && cmp -s straight.safetensors conv.safetensors"
check "convert from HF and back round-trips" \
    "$dtrain convert --from conv.safetensors --to conv_ck > /dev/null && [ -f conv_ck/step-0/manifest.json ] &&
     $dtrain convert --from conv_ck/step-0 --to back.safetensors > /dev/null && cmp -s conv.safetensors back.safetensors"
check "sample from a step folder" \
    "$dtrain sample --checkpoint good/step-4 --tokens 20 > s1.txt && $dtrain sample --checkpoint straight.safetensors --tokens 20 > s2.txt && cmp -s s1.txt s2.txt"
check "convert of a folder without a manifest is an error" \
    "! $dtrain convert --from data --to x.safetensors 2> conv_err.log && grep -q 'not a sharded checkpoint' conv_err.log"

# the whole format of older dtrain still resumes, exactly (built from step 3 by a script)
"$dtrain" convert --from good/step-3 --to w3.safetensors > /dev/null &&
    /usr/bin/python3 "$src/tests/train/make_whole_ckpt.py" good/step-3 w3.safetensors whole/step-3
"${run[@]}" --checkpoint.dir=whole --checkpoint.resume=auto --train.export=whole.safetensors \
    > whole.log 2>&1
check "whole format: resumed" "grep -q 'resumed from whole/step-3 at step 3' whole.log"
check "whole format: export byte-identical" "cmp -s straight.safetensors whole.safetensors"

# every checkpoint damaged: an error, not a fresh start
rm -rf ck && mkdir ck && cp -r good/step-4 ck/ && truncate -s -100 ck/step-4/$file
check "all damaged is an error" "! \"\${run[@]}\" --checkpoint.dir=ck --checkpoint.resume=auto > all.log 2>&1"
check "all damaged: named" "grep -q 'every checkpoint in ck is damaged' all.log"

# a save that cannot be written: a clear error, no step-N, no partial folder. A full disk: a
# 1 MiB tmpfs (when this user may mount one; the rank file is larger); an unwritable folder:
# its parent is a regular file.
# NAME DIR: the run fails at its first save, naming the cause, and DIR holds no folder
unsaved() {
    "${run[@]}" --checkpoint.dir=$2 --checkpoint.every=2 > $1.log 2>&1
    check "$1: save fails" "[ $? -ne 0 ]"
    check "$1: cause named" "grep -q '$3' $1.log"
    check "$1: no step or partial folder" "! ls -d $2/step-* 2>/dev/null"
}
mkdir -p full
if mount -t tmpfs -o size=1m tmpfs full 2> /dev/null; then
    unsaved disk_full full "rank-00000.safetensors.*No space left"
    umount full
else
    echo "note: cannot mount a tmpfs here; the full-disk case is not tried"
fi
touch afile
unsaved unwritable afile/ck "afile"
# a writer killed mid-save leaves its partial folder: the next save on this host removes it
# once its process is gone, and leaves alone one whose writer still runs (another job)
host=$(hostname | tr -- '-/' '__')
dead=999999999
mkdir -p stale/step-3.partial-$host-$dead-abc stale/step-3.partial-$host-$$-def \
    stale/step-3.partial-otherhost-$dead-123
"${run[@]}" --checkpoint.dir=stale --checkpoint.every=2 > stale.log 2>&1
check "stale partial: removed" "[ ! -e stale/step-3.partial-$host-$dead-abc ]"
check "live writer's partial: kept" "[ -d stale/step-3.partial-$host-$$-def ]"
check "other host's partial: kept" "[ -d stale/step-3.partial-otherhost-$dead-123 ]"
check "stale partial: run saved" "[ -d stale/step-4 ]"
# two runs given one checkpoint.dir race for every step-N (issue 25, item 6): a run that
# loses says so, naming the other writer or the folder's sharing, never a bare rename error
raced=0
for t in 1 2 3 4 5 6; do
    rm -rf two
    "${run[@]}" --train.steps=6 --checkpoint.dir=two --checkpoint.every=1 > two_a.log 2>&1 &
    "${run[@]}" --train.steps=6 --checkpoint.dir=two --checkpoint.every=1 > two_b.log 2>&1
    wait
    for f in two_a.log two_b.log; do
        grep -q "error:" $f || continue
        raced=$((raced + 1))
        check "two writers: the loser names the sharing ($t)" \
            "grep -qE 'another run is writing into checkpoint.dir: host|did another run write this step' $f"
    done
done
echo "two writers: $raced of 12 runs lost a race"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/bin/bash
# The end-of-run sample works in every layout a user can ask for: each run exits 0 and prints
# the same sample as the single process (the weights are equal, and rank 0 samples from a
# one-process copy of the model).
#   sample_layouts.sh DTRAIN SRC_DIR ARCH
dtrain=$1 src=$2 arch=$3
base=(--config "$src/configs/tiny-$arch.ini" --data.train=data/train.bin --data.val=""
      --train.steps=4 --train.sample_tokens=60 --model.n_layer=4)
source "$src/tests/train/layout_lib.sh"
sample_of() { sed -n '/sample (temperature/{n;p}' "$1.log"; }
run ref 1 || { echo "FAIL reference run"; tail -3 ref.log; exit 1; }
sample_of ref > ref.sample  # a byte-level sample may hold any byte, NUL included
[ -s ref.sample ] || { echo "FAIL no sample in the reference run"; exit 1; }
for layout in "tp2|--plugin.tp_size=2" "split_gather|--plugin.tp_size=2|--plugin.sp_mode=split_gather" \
              "sp2|--plugin.sp_size=2" "pp2|--plugin.pp_size=2" "zero3|--plugin.type=zero3" \
              "pp2_zbh1|--plugin.pp_size=2|--plugin.pp_schedule=zbh1|--plugin.microbatches=2"; do
    IFS='|' read -r -a parts <<< "$layout"
    name=${parts[0]}
    if ! run "$name" 2 --plugin.type=hybrid "${parts[@]:1}"; then
        echo "FAIL $name: exit status != 0"; tail -3 "$name.log"; failed=$((failed + 1)); continue
    fi
    sample_of "$name" > "$name.sample"
    check "$name sample" cmp "$name.sample" ref.sample
done
finish

#!/bin/bash
# The weights' average (train.ema_decay): against an independent computation, then in every
# layout, through checkpoints, and in dtrain sample.
# - One process, decay 0.8, 4 steps, a checkpoint every step: the exported average equals,
#   within 1e-6 of the weights' scale, the average numpy computes in double from the initial
#   weights (a 0-step run's export) and each step's weights (dtrain convert of each
#   checkpoint): ema_k = 0.8 ema_(k-1) + 0.2 w_k, ema_0 = w_0. A run without the key exports
#   no average; decay 0 and 1 are refused. dtrain convert of a step folder writes its average
#   beside the weights, equal to the export's.
# - dp2 with ZeRO 0-3, tp2, Ulysses sp2 and pp2 1F1B export the one-process average (1e-5).
# - Resume is bit for bit: 4 straight steps and 2 + resume + 2 (also with async checkpoints
#   and under ZeRO-2 on 2 ranks) export the same average; a checkpoint saved without the key
#   resumes into a run with it, the average starting from its weights (a warning says so).
# - dtrain sample takes the average by default (a step folder, or NAME.ema.safetensors beside
#   an exported file) and the weights with --raw: the two differ, and each equals sampling from
#   a file of those weights.
#   ema.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
base=(--config "$src/configs/tiny-gpt2.ini" --data.train=data/train.bin --data.val=
      --train.batch_size=8 --train.steps=4 --optim.lr=3e-3 --optim.warmup_steps=1
      --optim.eps=1e-6 --train.ema_decay=0.8 --plugin.type=hybrid)
. "$src/tests/train/layout_lib.sh"
py=/usr/bin/python3
cmp_ema() { # NAME: its average against the one process's
    check "$1 average" $py "$src/tests/train/compare_runs.py" ref.jsonl ref.ema.safetensors \
        "$1.jsonl" "$1.ema.safetensors" 1e-5
}

run w0 1 --train.steps=0 || { echo "initial weights run failed"; cat w0.log; exit 1; }
run ref 1 --checkpoint.every=1 --checkpoint.dir=ck --checkpoint.keep=0 ||
    { echo "reference run failed"; cat ref.log; exit 1; }
for k in 1 2 3 4; do
    "$dtrain" convert --from ck/step-$k --to w$k.safetensors > /dev/null || { echo "convert $k failed"; exit 1; }
done
check "convert writes the average beside the weights" $py - "$src/tests/models" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import st
a, b = st.read_safetensors("w4.ema.safetensors")[0], st.read_safetensors("ref.ema.safetensors")[0]
sys.exit(0 if a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a) else 1)
PY
check "the average against numpy" $py - "$src/tests/models" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import st
d = 0.8
w = [st.read_safetensors(f)[0] for f in ["w0.safetensors"] + [f"w{k}.safetensors" for k in range(1, 5)]]
got = st.read_safetensors("ref.ema.safetensors")[0]
last = st.read_safetensors("ref.safetensors")[0]
worst = 0.0
for name in w[0]:
    ema = np.asarray(w[0][name], dtype=np.float64)
    for k in range(1, 5):
        ema = d * ema + (1 - d) * np.asarray(w[k][name], dtype=np.float64)
    scale = max(np.abs(np.asarray(w[4][name], dtype=np.float64)).max(), 1e-12)
    worst = max(worst, np.abs(np.asarray(got[name], dtype=np.float64) - ema).max() / scale)
    assert np.array_equal(np.asarray(last[name]), np.asarray(w[4][name])), name
moved = max(np.abs(np.asarray(got[n], dtype=np.float64) - np.asarray(w[4][n], dtype=np.float64)).max() for n in w[0])
print(f"average vs numpy: worst {worst:.3g} of the weights' scale; average vs last weights {moved:.3g}")
sys.exit(0 if worst < 1e-6 and moved > 1e-4 else 1)
PY
run plain 1 --train.ema_decay=0
check "no average without the key" test ! -e plain.ema.safetensors
for bad in 1 -0.5; do
    if "$dtrain" train "${base[@]}" --train.ema_decay=$bad > bad.log 2>&1; then
        echo "FAIL ema_decay=$bad accepted"; failed=$((failed + 1))
    else
        check "ema_decay=$bad refused by name" grep -q "train.ema_decay=$bad must be in \[0, 1)" bad.log
    fi
done

# every layout: the one process's average
for zero in 0 1 2 3; do
    ran dp2_zero$zero 2 --plugin.zero_stage=$zero && cmp_ema dp2_zero$zero
done
ran tp2 2 --plugin.tp_size=2 && cmp_ema tp2
ran sp2 2 --plugin.sp_size=2 && cmp_ema sp2
ran pp2 2 --plugin.pp_size=2 --plugin.microbatches=4 && cmp_ema pp2

# resume: bit for bit, sync and async, and across a layout's checkpoint
ck=(--checkpoint.every=2 --checkpoint.keep=0)
resumed() { # NAME NP ARGS...: 4 steps in two runs (the second resuming the first's step-2)
    local name=$1 np=$2; shift 2
    ran "${name}_first" "$np" "${ck[@]}" --checkpoint.dir="$name" "$@" || return 1
    rm -rf "$name/step-4"
    ran "$name" "$np" "${ck[@]}" --checkpoint.dir="$name" --checkpoint.resume=auto "$@"
}
for r in r_sync r_async; do
    resumed $r 1 $([ $r = r_async ] && echo --checkpoint.async=true) || continue
    check "$r weights" cmp $r.safetensors ref.safetensors
    check "$r average" cmp $r.ema.safetensors ref.ema.safetensors
done
ran z2 2 --plugin.zero_stage=2 && resumed r_z2 2 --plugin.zero_stage=2 &&
    check "r_z2 average" cmp r_z2.ema.safetensors z2.ema.safetensors
# a checkpoint without the average: the average starts from its weights
ran noavg_first 1 --train.ema_decay=0 "${ck[@]}" --checkpoint.dir=noavg && rm -rf noavg/step-4 &&
    ran noavg 1 "${ck[@]}" --checkpoint.dir=noavg --checkpoint.resume=auto &&
    check "resume without an average warns" grep -q "holds no weight average" noavg.log

# sampling: the average by default, the weights with --raw
s=(--prompt "int " --tokens 40 --seed 3)
"$dtrain" sample --checkpoint ck/step-4 "${s[@]}" > avg.txt 2> avg.err
"$dtrain" sample --checkpoint ck/step-4 --raw "${s[@]}" > raw.txt 2> raw.err
"$dtrain" sample --checkpoint ref.safetensors "${s[@]}" > file_avg.txt 2> /dev/null
"$dtrain" sample --checkpoint ref.safetensors --raw "${s[@]}" > file_raw.txt 2> /dev/null
cp ref.ema.safetensors lone.safetensors
"$dtrain" sample --checkpoint lone.safetensors "${s[@]}" > lone.txt 2> /dev/null
check "sample says it takes the average" grep -q "sampling from the weights' average" avg.txt
check "the average and the weights sample differently" bash -c "! cmp -s <(tail -1 avg.txt) <(tail -1 raw.txt)"
check "a step folder's average = the exported average" cmp <(tail -1 avg.txt) <(tail -1 file_avg.txt)
check "an exported file's average = that file alone" cmp <(tail -1 file_avg.txt) <(tail -1 lone.txt)
check "--raw: the weights" cmp <(tail -1 raw.txt) <(tail -1 file_raw.txt)
finish

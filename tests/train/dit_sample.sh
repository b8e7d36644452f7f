#!/bin/bash
# The video DiT end to end: `dtrain train` on bouncing-shapes clips (a small config, briefly),
# then `dtrain sample --out` from its checkpoint. The sampled GIF is measured against the
# training clips drawn through the same GIF writer (tests/train/clip_stats.c): the samples'
# mean share of background pixels per frame, motion between frames and mean pixel must fall
# within the range of the training clips' frames, and far from pure noise's. Then every bad sample input is one clear
# error naming the value, exit status non-zero, and no file written (an old GIF untouched).
#   dit_sample.sh DTRAIN SRC_DIR CLIP_STATS
set -uo pipefail
dtrain=$1 src=$2 stats=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }

# a small DiT that learns the clips' look within a minute or two on 2 cores
steps=600
"$dtrain" train --config "$src/configs/dit-bounce.ini" --train.steps=$steps \
    --model.n_layer=2 --model.n_embd=96 --train.batch_size=8 --optim.lr=2e-3 \
    --optim.warmup_steps=20 --optim.min_lr=2e-4 --train.eval_every=0 --train.log_every=50 \
    --train.metrics=m.jsonl --train.export=dit.safetensors --checkpoint.dir=ckpt \
    --checkpoint.every=$steps > train.log 2>&1 || { tail -5 train.log; echo "training failed"; exit 1; }
first=$(head -1 m.jsonl | sed 's/.*"loss": \([0-9.e+-]*\).*/\1/')
last=$(tail -20 m.jsonl | sed 's/.*"loss": \([0-9.e+-]*\).*/\1/' | awk '{s += $1} END {print s / NR}')
if awk -v a="$first" -v b="$last" 'BEGIN {exit !(b < 0.6 * a)}'; then ok; else
    bad "flow loss $first -> $last (mean of the last 20 steps): not learning"; fi

# 8 clips, labels 0,1,2,0,...; the training clips and noise as references (16 x 16 RGB)
geom="3 16 16"
"$dtrain" sample --checkpoint ckpt/step-$steps --out samples.gif --count 8 --steps 32 \
    --seed 5 > sample.log 2>&1 || { cat sample.log; bad "sample failed"; }
read -r -a s <<< "$("$stats" gif samples.gif $geom)"
read -r -a d <<< "$("$stats" bounce 64 8 $geom 2 1)"
read -r -a n <<< "$("$stats" noise 8 8 $geom 5)"
echo "samples: ${s[*]}"
echo "data:    ${d[*]}"
echo "noise:   ${n[*]}"
# fields: bg mean min max (1-3), motion mean min max (5-7), mean mean min max (9-11), each
# over every frame of every clip
within() { # NAME VALUE LO HI
    if awk -v v="$2" -v lo="$3" -v hi="$4" 'BEGIN {exit !(v >= lo && v <= hi)}'; then ok; else
        bad "$1 $2 is outside [$3, $4]"; fi
}
if [ "${#s[@]}" -ge 12 ] && [ "${#d[@]}" -ge 12 ] && [ "${#n[@]}" -ge 12 ]; then
    # the samples' means within the range of the training clips' frames
    within "background share" "${s[1]}" "${d[2]}" "${d[3]}"
    within "motion" "${s[5]}" "${d[6]}" "${d[7]}"
    within "mean pixel" "${s[9]}" "${d[10]}" "${d[11]}"
    # and far from noise: each at most a third as far from the training clips' mean as from noise's
    nearer() { # NAME SAMPLE DATA NOISE
        if awk -v s="$2" -v d="$3" -v n="$4" 'BEGIN {a = s - d; b = s - n;
                exit !(3 * (a < 0 ? -a : a) < (b < 0 ? -b : b))}'; then ok; else
            bad "$1 $2: not within a third of its distance to noise's $4 of the data's $3"; fi
    }
    nearer "background share" "${s[1]}" "${d[1]}" "${n[1]}"
    nearer "motion" "${s[5]}" "${d[5]}" "${n[5]}"
    nearer "mean pixel" "${s[9]}" "${d[9]}" "${n[9]}"
else
    bad "clip statistics missing"
fi
# reproducible from the seed
"$dtrain" sample --checkpoint ckpt/step-$steps --out again.gif --count 8 --steps 32 \
    --seed 5 > /dev/null 2>&1 && cmp -s samples.gif again.gif && ok || bad "sample not reproducible"
# the exported safetensors samples the same clips as the checkpoint
"$dtrain" sample --checkpoint dit.safetensors --out exported.gif --count 8 --steps 32 \
    --seed 5 > /dev/null 2>&1 && cmp -s samples.gif exported.gif && ok || bad "export samples differ"
# the training curves of a DiT name its loss: the rectified flow's velocity MSE
"$dtrain" plot --metrics m.jsonl --out curves.svg > /dev/null 2>&1 &&
    grep -q "velocity MSE" curves.svg && ! grep -q "cross-entropy" curves.svg && ok ||
    bad "a DiT's training curves do not name its loss"
# convert both ways (issue 25, item 6): the step folder to one file, that file back to a step
# folder, each sampling the same clips
"$dtrain" convert --from ckpt/step-$steps --to conv.safetensors > /dev/null 2>&1 &&
    "$dtrain" sample --checkpoint conv.safetensors --out conv.gif --count 8 --steps 32 \
        --seed 5 > /dev/null 2>&1 && cmp -s samples.gif conv.gif && ok ||
    bad "convert --from the DiT's step folder: its file does not sample the same clips"
"$dtrain" convert --from conv.safetensors --to back > /dev/null 2>&1 &&
    "$dtrain" sample --checkpoint back/step-0 --out back.gif --count 8 --steps 32 \
        --seed 5 > /dev/null 2>&1 && cmp -s samples.gif back.gif && ok ||
    bad "convert --from the DiT's file: its step folder does not sample the same clips"
# a DiT whose config's max_seq_len is not its clip's tokens (tiny-dit: 128 against 64)
"$dtrain" train --config "$src/configs/tiny-dit.ini" --train.steps=1 --checkpoint.dir=tiny \
    --checkpoint.every=1 --train.export=tiny.safetensors > tiny.log 2>&1 &&
    "$dtrain" convert --from tiny/step-1 --to tiny2.safetensors > /dev/null 2>&1 &&
    "$dtrain" sample --checkpoint tiny.safetensors --out t1.gif --count 1 --steps 2 > /dev/null 2>&1 &&
    "$dtrain" sample --checkpoint tiny2.safetensors --out t2.gif --count 1 --steps 2 > /dev/null 2>&1 &&
    cmp -s t1.gif t2.gif && ok || bad "tiny DiT: export, convert and sample disagree or fail"
# a shifted flow: the file and the step folder record the shift and both sample by it; the
# same weights stepped without it give other clips, a manifest's impossible shift one error
"$dtrain" train --config "$src/configs/tiny-dit.ini" --train.steps=1 --checkpoint.dir=sh \
    --checkpoint.every=1 --train.export=sh.safetensors --model.timestep_shift=3 > sh.log 2>&1 &&
    "$dtrain" sample --checkpoint sh.safetensors --out s1.gif --count 1 --steps 3 > /dev/null 2>&1 &&
    "$dtrain" sample --checkpoint sh/step-1 --out s2.gif --count 1 --steps 3 > /dev/null 2>&1 &&
    cmp -s s1.gif s2.gif && grep -q '"timestep_shift":[[:space:]]*3' sh/step-1/manifest.json &&
    ok || bad "a shifted DiT: export and step folder disagree, or the manifest lacks the shift"
mkdir sh1 && cp -r ckpt/step-$steps sh1/ &&
    /usr/bin/python3 "$src/tests/io/edit_manifest.py" sh1/step-$steps model.timestep_shift=3 &&
    "$dtrain" sample --checkpoint sh1/step-$steps --out s3.gif --count 8 --steps 32 --seed 5 \
        > /dev/null 2>&1 && ! cmp -s samples.gif s3.gif && ok ||
    bad "the manifest's timestep_shift does not set the sampler's steps"
/usr/bin/python3 "$src/tests/io/st_edit.py" sh.safetensors bad.safetensors meta timestep_shift abc &&
    out=$("$dtrain" sample --checkpoint bad.safetensors --out s5.gif --count 1 --steps 3 2>&1)
[ $? -ne 0 ] && echo "$out" | grep -q "metadata timestep_shift = abc is not in 0..1000" && ok ||
    bad "a file's shift of abc: $out"
/usr/bin/python3 "$src/tests/io/edit_manifest.py" sh1/step-$steps model.timestep_shift=-1
out=$("$dtrain" sample --checkpoint sh1/step-$steps --out s4.gif --count 1 --steps 3 2>&1)
[ $? -ne 0 ] && echo "$out" | grep -q "timestep_shift is not a number in 0..1000" && ok ||
    bad "a manifest's shift of -1: $out"

# bad input: exit non-zero, one error naming the value, nothing written
fails() { # NAME PATTERN -- ARGS...
    local name=$1 pattern=$2
    shift 3
    out=$("$dtrain" sample "$@" 2>&1)
    local rc=$?
    if [ $rc -ne 0 ] && echo "$out" | grep -q -- "$pattern"; then ok; else
        bad "$name: exit $rc, want an error matching '$pattern': $out"; fi
}
cp samples.gif keep.gif
fails label_range "--label 3 is outside the model's classes 0..2" -- \
    --checkpoint ckpt/step-$steps --out keep.gif --label 3
fails label_negative "--label -1 is outside" -- --checkpoint ckpt/step-$steps --out keep.gif --label -1
cmp -s samples.gif keep.gif && ok || bad "a failed sample changed the existing GIF"
fails no_folder "--out missing/x.gif: cannot be written" -- \
    --checkpoint ckpt/step-$steps --out missing/x.gif
mkdir ro && chmod 500 ro
if [ "$(id -u)" -ne 0 ]; then
    fails read_only "--out ro/x.gif: cannot be written" -- --checkpoint ckpt/step-$steps --out ro/x.gif
fi
fails out_folder "--out ro is a folder" -- --checkpoint ckpt/step-$steps --out ro
fails prompt "--prompt \"hello\": checkpoint .* holds a dit model" -- \
    --checkpoint ckpt/step-$steps --prompt hello
fails prompt_out "--prompt \"hello\": the model in .* has no text (model.text_len = 0)" -- \
    --checkpoint ckpt/step-$steps --prompt hello --out p.gif
fails no_out "holds a dit model, which makes no text: sample its clips with --out" -- \
    --checkpoint ckpt/step-$steps
fails count "--count: '0' is not a whole number from 1" -- --checkpoint ckpt/step-$steps --out c.gif --count 0
fails steps_word "--steps: 'many' is not a whole number" -- --checkpoint ckpt/step-$steps --out c.gif --steps many
fails steps_no_out "--steps samples clips and needs --out" -- --checkpoint ckpt/step-$steps --steps 4
# a language model's checkpoint given --out
"$dtrain" prepare --input "$src/src/core" --out data > /dev/null || exit 1
"$dtrain" train --config "$src/configs/tiny-gpt2.ini" --data.train=data/train.bin --data.val="" \
    --train.steps=1 --train.export=gpt.safetensors > /dev/null 2>&1 || bad "gpt2 training failed"
fails gpt_out "--out g.gif: checkpoint gpt.safetensors holds a gpt2 model, which makes text; --out samples clips from a dit" -- \
    --checkpoint gpt.safetensors --out g.gif
ls ./*.tmp* c.gif p.gif g.gif > /dev/null 2>&1 && bad "a failed sample left a file behind" || ok
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

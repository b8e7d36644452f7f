#!/usr/bin/env bash
# The text-conditioned DiT end to end on real video files (not a test): captioned mp4 files
# of one coloured shape moving one way (tests/train/text_demo.py make: 4 colours x 3 kinds x 4
# ways, 8 combinations held out), read through dtrain prepare --video, the classifier checked
# on the training clips first, configs/dit-text.ini trained on both cores (timed), then
# TD_COUNT clips sampled for every held-out prompt, for a prompt seen in training of each one's
# colour and kind (another way), and with no prompt (chance), each scored by the classifier (colour, kind and way right), and a
# GIF per held-out prompt to look at.
#
#   bash bench/run_text_demo.sh
#
# Knobs (environment): TD_DTRAIN=PATH (default build/dtrain), TD_WORK=DIR (default
# runs/dit-text, where the config reads its clips), TD_PER=8 (videos a prompt), TD_COUNT=8,
# TD_GUIDANCE=4, TD_STEPS=32 (Euler steps), TD_TRAIN="" (more dtrain train flags).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DTRAIN=${TD_DTRAIN:-$REPO/build/dtrain}
WORK=${TD_WORK:-runs/dit-text}
PER=${TD_PER:-8} COUNT=${TD_COUNT:-8} GUIDE=${TD_GUIDANCE:-4} STEPS=${TD_STEPS:-32}
PY=/usr/bin/python3 DEMO=$REPO/tests/train/text_demo.py
cd "$REPO"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); dtrain: $(git rev-parse --short HEAD)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') ($(grep -qm1 avx512_bf16 /proc/cpuinfo && echo AVX-512-BF16 || echo no AVX-512-BF16)), $(nproc --all) cores"
rm -rf "$WORK"
mkdir -p "$WORK/samples"
$PY "$DEMO" make "$WORK/videos" "$PER"
"$DTRAIN" prepare --video "$WORK/videos" --out "$WORK/clips" --frames 8 --height 24 --width 24 \
    --fps 8 --val-fraction 0.05 2>&1 | grep -v '^$'
echo "classifier on the training clips:"
$PY "$DEMO" check-clips "$WORK/clips/train"
start=$(date +%s.%N)
# shellcheck disable=SC2086
OMP_NUM_THREADS=$(nproc) "$DTRAIN" train --config configs/dit-text.ini \
    --data.train="$WORK/clips/train" --data.val="$WORK/clips/val" \
    --train.metrics="$WORK/metrics.jsonl" --train.export="$WORK/model.safetensors" \
    --checkpoint.dir="$WORK/ckpt" ${TD_TRAIN:-} > "$WORK/train.log" 2>&1
end=$(date +%s.%N)
echo "trained in $(echo "$end - $start" | bc) s: $(grep -E '^step' "$WORK/train.log" | tail -1)"
grep -E 'val' "$WORK/train.log" | tail -2 || true
sample() { # OUT PROMPT GUIDANCE
    local args=(--checkpoint "$WORK/model.safetensors" --out "$1" --count "$COUNT"
                --steps "$STEPS" --seed 11)
    [ -n "$2" ] && args+=(--prompt "$2" --guidance "$3")
    "$DTRAIN" sample "${args[@]}" > /dev/null
}
pairs=() seen=() none=()
i=0
while read -r p; do
    sample "$WORK/samples/held$i.safetensors" "$p" "$GUIDE"
    sample "$WORK/samples/held$i.gif" "$p" "$GUIDE"
    pairs+=("$WORK/samples/held$i.safetensors" "$p")
    i=$((i + 1))
done < <($PY "$DEMO" prompts)
i=0
while read -r p; do
    sample "$WORK/samples/seen$i.safetensors" "$p" "$GUIDE"
    seen+=("$WORK/samples/seen$i.safetensors" "$p")
    i=$((i + 1))
done < <($PY "$DEMO" seen)
sample "$WORK/samples/none.safetensors" "" 0
echo "held-out prompts, guidance $GUIDE ($COUNT clips each):"
$PY "$DEMO" score "${pairs[@]}"
echo "prompts seen in training, guidance $GUIDE:"
$PY "$DEMO" score "${seen[@]}"
echo "no prompt, scored against the held-out prompts (chance):"
none=()
while read -r p; do none+=("$WORK/samples/none.safetensors" "$p"); done < <($PY "$DEMO" prompts)
$PY "$DEMO" score "${none[@]}" | tail -1

#!/bin/bash
# The text demo's judge on real files (bench/run_text_demo.sh scores samples with it): one
# captioned mp4 per training prompt (tests/train/text_demo.py make, libx264 through the
# ffmpeg command), read back through dtrain prepare --video at 24x24; the classifier must
# name the colour, kind and way of 95% of the clips, from their pixels, as their captions
# do. A model with text then trains on them for a few steps, samples every held-out prompt,
# and text_demo.py prior reads what it expects from a caption alone.
#   text_demo.sh DTRAIN SRC_DIR
set -euo pipefail
dtrain=$1 src=$2
py=/usr/bin/python3 demo="$src/tests/train/text_demo.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
$py "$demo" make videos 1
"$dtrain" prepare --video videos --out clips --frames 8 --height 24 --width 24 --fps 8 \
    --val-fraction 0
$py "$demo" check-clips clips/train
"$dtrain" train --config "$src/configs/dit-text.ini" --data.train=clips/train --data.val= \
    --train.steps=3 --train.eval_every=0 --train.metrics= --train.export=m.safetensors \
    --checkpoint.every=0 --model.n_layer=2 --model.n_embd=32 > train.log
while read -r p; do
    "$dtrain" sample --checkpoint m.safetensors --out s.safetensors --count 1 --steps 2 \
        --prompt "$p" --guidance 4 > /dev/null
done < <($py "$demo" prompts)
# the model's caption-only expectation, read through the independent PyTorch DiT: a line a way
[ "$($py "$demo" prior m.safetensors | grep -c "the mean clip's centre moves")" -eq 4 ]
echo "text demo: the classifier reads the clips' captions; a text model samples every held-out prompt"

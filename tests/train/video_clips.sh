#!/bin/bash
# Clips from real video files and from a VAE's latents, end to end.
# - dtrain prepare --video over files FFmpeg's own encoder wrote (mp4/H.264 in a sub-folder,
#   webm/VP9 in portrait, mkv/FFV1, an animated GIF, and an mp4 kept for validation): every
#   clip's pixels are the source frame on screen at its time (8 fps from 24, 12 and 10),
#   scaled and cut about the centre (the white bars gone), with its caption, source and
#   start (video_clips.py check). Random bytes, an empty file and an mp4 cut short are
#   skipped with a count and the first reason; a file shorter than one clip is counted.
# - data.source=clips trains an unconditional DiT: dp2 ZeRO-2, Ulysses sp2 and tp2 give the
#   one process's losses and weights (1e-5), with shuffle; 2 steps + resume + 2 are 4 straight
#   steps bit for bit; validation reads data.val's folder.
# - data.source=latents over numpy's latents of the same clips (pixels / 127.5 - 1, laid out
#   [N, C, T, H, W]) trains to the same bits as the clips; 4-channel BF16 latents in two
#   shards train a 4-channel DiT alike on 1 and 2 ranks, and dtrain sample writes its clips as
#   latents (a GIF of them is refused).
# - Text: a model with text trains on the clips' captions (byte encoder) and on latents'
#   text embeddings (F16, 0..3 tokens a clip); tp2, sp2 and dp2 ZeRO-3 give the one process's
#   losses and weights (1e-5); sample --prompt runs on it, and is refused for embeddings.
# - Buckets: prepare --video --buckets puts each file's clips at its nearest bucket (the
#   portrait webm at 4x16x12, the files long enough for 12 frames at 12x16x16, the short
#   held-out file at 4x16x16), OUT/train/FxHxW; data.buckets trains on them, tp2 and dp2
#   ZeRO-2 equal to one process; a bucket with no clips is named on every rank.
# - A clip shape that is not the model's, a model with classes, a missing folder, text
#   settings the data cannot feed: one error on every rank.
#   video_clips.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
base=(--model.arch=dit --model.n_layer=2 --model.n_head=2 --model.n_embd=32 --model.frames=4
      --model.channels=3 --model.height=16 --model.width=16 --model.patch_t=1 --model.patch_h=4
      --model.patch_w=4 --model.n_classes=0 --model.attn=spatial_temporal --data.source=clips
      --data.train=clips/train --data.val= --data.shuffle=true --train.batch_size=4
      --train.steps=4 --train.seq_len=64 --train.log_every=1 --train.sample_tokens=0
      --optim.lr=3e-3 --optim.warmup_steps=1 --optim.eps=1e-6 --plugin.grad_clip=1.0
      --plugin.type=hybrid)
. "$src/tests/train/layout_lib.sh"
py=/usr/bin/python3
helper="$src/tests/train/video_clips.py"

mkdir videos && $py "$helper" make videos || { echo "making the videos failed"; exit 1; }
check "prepare --video" "$dtrain" prepare --video videos --out clips --frames 4 --height 16 \
    --width 16 --fps 8 --val-fraction 0.12
"$dtrain" prepare --video videos --out clips2 --frames 4 --height 16 --width 16 --fps 8 \
    --val-fraction 0.12 > prep.log 2>&1
check "15 training clips from 4 files, 2 for validation from 1" \
    grep -q "clips2/train: 15 clips of 4 frames of 16x16 at 8 fps from 4 files" prep.log
check "validation" grep -q "clips2/val: 2 clips .* from 1 files" prep.log
check "3 broken files skipped, the first named with its reason" \
    grep -q "3 files skipped; the first: videos/empty.webm: not a video FFmpeg reads" prep.log
check "a file shorter than a clip counted" grep -q "1 files are shorter than one clip" prep.log
check "the clips are their source frames" $py "$helper" check clips
# bad requests
mkdir nothing
check "a folder with no video" bash -c "! '$dtrain' prepare --video nothing --out x 2> e.txt && grep -q 'holds no file' e.txt"
check "--fps 0 refused" bash -c "! '$dtrain' prepare --video videos --out x --fps 0 2> e.txt && grep -q -- '--fps' e.txt"
check "--out needed" bash -c "! '$dtrain' prepare --video videos 2> e.txt && grep -q -- '--out' e.txt"

# training on the clips, in several layouts
run ref 1 || { echo "reference run on clips failed"; cat ref.log; exit 1; }
same dp2z2 2 --plugin.zero_stage=2
same sp2 2 --plugin.sp_size=2 --plugin.sp_mode=all_to_all
same tp2 2 --plugin.tp_size=2
ran half 1 --checkpoint.dir=ck --checkpoint.every=2 --checkpoint.keep=0 && rm -rf ck/step-4 &&
    ran resumed 1 --checkpoint.dir=ck --checkpoint.every=2 --checkpoint.resume=auto &&
    check "2 steps + resume + 2 = 4 steps (weights)" cmp resumed.safetensors ref.safetensors
ran val 1 --data.val=clips/val --train.eval_every=2 --train.eval_batches=1 &&
    check "validation loss from data.val" grep -q '"val_loss"' val.jsonl

# latents: the same clips as numpy's latents train to the same bits
$py "$helper" latents clips lat || { echo "writing latents failed"; exit 1; }
ran lat 1 --data.source=latents --data.train=lat && identical lat ref
$py "$helper" latents4 lat4 || { echo "writing 4-channel latents failed"; exit 1; }
four=(--data.source=latents --data.train=lat4 --model.channels=4 --model.height=8
      --model.width=8 --model.patch_h=2 --model.patch_w=2)
ran lat4 1 "${four[@]}" && mv lat4.jsonl ref4.jsonl && mv lat4.safetensors ref4.safetensors &&
    ran lat4dp 2 "${four[@]}" --plugin.zero_stage=1 &&
    check "4-channel latents dp2 equivalence" $py "$src/tests/train/compare_runs.py" \
        ref4.jsonl ref4.safetensors lat4dp.jsonl lat4dp.safetensors 1e-5
check "sample writes latents" "$dtrain" sample --checkpoint ref4.safetensors --out s.safetensors \
    --count 3 --steps 4
check "sampled latents [3, 4, 4, 8, 8], finite" $py - "$src/tests/models" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import st
x = st.read_safetensors("s.safetensors")[0]["latents"]
assert x.shape == (3, 4, 4, 8, 8) and np.isfinite(x).all() and x.std() > 0.1, (x.shape, x.std())
PY
check "a GIF of 4-channel clips refused" bash -c "! '$dtrain' sample --checkpoint ref4.safetensors --out s.gif 2> e.txt && grep -q 'which a GIF cannot show' e.txt"

# text: the clips' captions through the byte encoder, latents' text embeddings (F16, clips
# with 0..3 tokens) through the embedder; each layout equals its one process
ran txt 1 --model.text_len=24 && mv txt.jsonl txtref.jsonl && mv txt.safetensors txtref.safetensors &&
    for lay in "tp2 --plugin.tp_size=2" "sp2 --plugin.sp_size=2 --plugin.sp_mode=all_to_all" \
               "dp2 --plugin.zero_stage=3"; do
        set -- $lay
        ran "txt$1" 2 --model.text_len=24 "${@:2}" &&
            check "captions: $1 equivalence" $py "$src/tests/train/compare_runs.py" \
                txtref.jsonl txtref.safetensors "txt$1.jsonl" "txt$1.safetensors" 1e-5
    done
check "the captions reach the model: its text embedder moved" $py - "$src/tests/models" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import st
w = st.read_safetensors("txtref.safetensors")[0]
assert "y_embedder.byte_embedding.weight" in w and "blocks.0.cross_attn.q_linear.weight" in w
# the cross-attention's output projection starts at zero; training on captions moved it
assert np.abs(w["blocks.1.cross_attn.proj.weight"]).max() > 0
PY
check "sample --prompt from a model trained on captions" "$dtrain" sample \
    --checkpoint txtref.safetensors --out p.gif --prompt "a red square" --guidance 3 --steps 3
$py "$helper" latents4text lat4t || { echo "writing latents with text failed"; exit 1; }
ran lat4t 1 "${four[@]}" --data.train=lat4t --model.text_len=4 --model.text_dim=8 &&
    ran lat4ttp 2 "${four[@]}" --data.train=lat4t --model.text_len=4 --model.text_dim=8 \
        --plugin.tp_size=2 &&
    check "text embeddings: tp2 equivalence" $py "$src/tests/train/compare_runs.py" \
        lat4t.jsonl lat4t.safetensors lat4ttp.jsonl lat4ttp.safetensors 1e-5
check "a prompt for a model of text embeddings refused" bash -c "! '$dtrain' sample --checkpoint lat4t.safetensors --out s.safetensors --prompt hi 2> e.txt && grep -q 'precomputed text embeddings' e.txt"

# buckets of clip shape from files: each file's nearest bucket
"$dtrain" prepare --video videos --out bclips --buckets "4x16x16:4, 4x16x12:2, 12x16x16:2" \
    --fps 8 --val-fraction 0.12 > bprep.log 2>&1
check "prepare --buckets: the portrait file at 4x16x12" \
    grep -q "bclips/train/4x16x12: 3 clips of 4 frames of 16x12 at 8 fps from 1 files" bprep.log
check "prepare --buckets: the 2 s files at 12 frames" \
    grep -q "bclips/train/12x16x16: 3 clips of 12 frames of 16x16 at 8 fps from 3 files" bprep.log
check "prepare --buckets: the 1 s held-out file at 4 frames" \
    grep -q "bclips/val/4x16x16: 2 clips of 4 frames of 16x16 at 8 fps from 1 files" bprep.log
check "prepare --buckets with --frames refused" bash -c "! '$dtrain' prepare --video videos --out x --buckets 4x8x8:2 --frames 4 2> e.txt && grep -q 'leave out' e.txt"
bk=(--data.train=bclips/train "--data.buckets=4x16x12:2, 12x16x16:2" --train.batch_size=2)
ran bref 1 "${bk[@]}" && mv bref.jsonl ref_b.jsonl && mv bref.safetensors ref_b.safetensors &&
    grep -q "clip 12x16x16 x 2" bref.log && grep -q "clip 4x16x12 x 2" bref.log &&
    for l in "tp2 --plugin.tp_size=2" "dp2 --plugin.zero_stage=2"; do
        set -- $l
        ran "b$1" 2 "${bk[@]}" "$2" && check "buckets from files: $1 equivalence" \
            $py "$src/tests/train/compare_runs.py" ref_b.jsonl ref_b.safetensors "b$1.jsonl" \
            "b$1.safetensors" 1e-5
    done

# latents over buckets: the team's latent shards, a folder per latent shape
mkdir -p latb && cp -r lat4 latb/4x8x8 && $py - "$src/tests/models" <<'PY'
import os, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import st
os.makedirs("latb/2x8x12", exist_ok=True)
x = np.random.RandomState(3).randn(5, 4, 2, 8, 12).astype(np.float32)
st.write_safetensors("latb/2x8x12/part-0.safetensors", {"latents": x})
PY
lb=("${four[@]}" --data.train=latb "--data.buckets=4x8x8:2, 2x8x12:2" --train.batch_size=2)
ran latb 1 "${lb[@]}" && mv latb.jsonl ref_lb.jsonl && mv latb.safetensors ref_lb.safetensors &&
    grep -q "clip 2x8x12 x 2" latb.log && grep -q "clip 4x8x8 x 2" latb.log &&
    ran latbsp 2 "${lb[@]}" --plugin.sp_size=2 &&
    check "latents over buckets: sp2 equivalence" $py "$src/tests/train/compare_runs.py" \
        ref_lb.jsonl ref_lb.safetensors latbsp.jsonl latbsp.safetensors 1e-5

# bad input: one error on every rank
bad() { # NAME WANT ARGS...: fails on 2 ranks, each saying WANT
    local name=$1 want=$2; shift 2
    if run "$name" 2 "$@"; then echo "FAIL $name: ran"; failed=$((failed + 1)); return; fi
    check "$name: every rank says '$want'" test "$(grep -c -- "$want" "$name.log")" -ge 2
}
bad frames "holds clips of 4 frames x 3 channels x 16x16" --model.frames=8
bad classes "carry no class label" --model.n_classes=3
bad missing "data.train" --data.train=clips/absent
bad textdim "the model's byte encoder reads" --model.text_len=8 --model.text_dim=16
bad textwidth "text embeddings of 3 tokens x 8" "${four[@]}" --data.train=lat4t \
    --model.text_len=4 --model.text_dim=6
bad notext "without text embeddings" "${four[@]}" --model.text_len=4 --model.text_dim=8
bad nobucketclips "bucket 0, 4x16x16 (batch 2): data.train: bclips/train/4x16x16 holds no" \
    "${bk[@]}" "--data.buckets=4x16x16:2, 4x16x12:2"
finish

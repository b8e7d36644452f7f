#!/usr/bin/env bash
# dtrain prepare --video's speed on one core (not a test): PV_FILES mp4 files (H.264,
# yuv420p, 24 fps, PV_SECONDS s each, FFmpeg's testsrc2 pattern, which moves) at each source
# size of PV_SOURCES, cut into clips of 8 frames of 64x64, sampling every frame (24 fps: each
# decoded frame is written) and one in three (8 fps). Pinned to CPU 0 with taskset; prints
# prepare's own count of clip frames written and frames decoded a second, best of PV_ROUNDS.
#
#   bash bench/run_prepare_video.sh
#
# Knobs (environment): PV_DTRAIN=PATH (default build/dtrain), PV_WORK=DIR, PV_FILES=8,
# PV_SECONDS=10, PV_SOURCES="256x256 640x360 1280x720", PV_ROUNDS=3.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DTRAIN=${PV_DTRAIN:-$REPO/build/dtrain}
WORK=${PV_WORK:-$(mktemp -d /tmp/dtrain-prepare-video.XXXXXX)}
FILES=${PV_FILES:-8} SECONDS_EACH=${PV_SECONDS:-10} ROUNDS=${PV_ROUNDS:-3}
SOURCES=${PV_SOURCES:-"256x256 640x360 1280x720"}
mkdir -p "$WORK"
cd "$WORK"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); dtrain: $(git -C "$REPO" rev-parse --short HEAD)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') ($(grep -qm1 avx512_bf16 /proc/cpuinfo && echo AVX-512-BF16 || echo no AVX-512-BF16)), $(nproc --all) cores; prepare pinned to CPU 0"
echo "$FILES mp4 files of ${SECONDS_EACH} s at 24 fps per source size; clips of 8 frames of 64x64"
echo "| source | --fps | clip frames/s | decoded frames/s |"
echo "|---|---|---|---|"
for size in $SOURCES; do
    mkdir -p "src$size"
    for i in $(seq 1 "$FILES"); do
        f="src$size/v$i.mp4"
        [ -f "$f" ] || ffmpeg -v error -y -f lavfi -i "testsrc2=size=$size:rate=24:duration=$SECONDS_EACH" \
            -vf "hue=h=$((i * 40))" -c:v libx264 -pix_fmt yuv420p "$f"
    done
    for fps in 24 8; do
        best_w=0 best_d=0
        for r in $(seq 1 "$ROUNDS"); do
            rm -rf "out"
            line=$(taskset -c 0 "$DTRAIN" prepare --video "src$size" --out out --frames 8 --height 64 \
                --width 64 --fps "$fps" --val-fraction 0 2>&1 | grep 'decoded/s')
            w=$(echo "$line" | sed 's/.*: \([0-9]*\) clip frames\/s.*/\1/')
            d=$(echo "$line" | sed 's/.*, \([0-9]*\) decoded\/s.*/\1/')
            [ "$w" -gt "$best_w" ] && best_w=$w best_d=$d
        done
        echo "| $size | $fps | $best_w | $best_d |"
    done
done

#!/usr/bin/env bash
# Single-process step time and peak RSS of two dtrain revisions, side by side (not a test):
# GPT-2 V256 T256 fp32 at L6 C384 B8 and L12 C768 B4, 1 thread, 5 steps (median of the last
# 4), two rounds alternating the revisions, under /tmp/dtrain-bench.lock.
#   bash bench/ab_single.sh REV_A REV_B
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
A=${1:?usage: ab_single.sh REV_A REV_B} B=${2:?usage: ab_single.sh REV_A REV_B}
WORK=$(mktemp -d /tmp/dtrain-ab.XXXXXX)
for rev in "$A" "$B"; do
    mkdir -p "$WORK/$rev"
    git -C "$REPO" archive "$rev" | tar -x -C "$WORK/$rev"
    cmake -S "$WORK/$rev" -B "$WORK/$rev/build" -DCMAKE_BUILD_TYPE=Release > /dev/null
    cmake --build "$WORK/$rev/build" -j2 --target dtrain > /dev/null
done
# random tokens (the step time does not depend on them; prepare's input rules change between
# revisions)
mkdir -p "$WORK/data"
/usr/bin/python3 "$REPO/bench/make_tokens.py" --out "$WORK/data/train.bin" --vocab 256 \
    --count 400000 --seed 1
exec 9> /tmp/dtrain-bench.lock
flock 9
for round in 1 2; do
    for rev in "$A" "$B"; do
        for shape in "6 6 384 8" "12 12 768 4"; do
            set -- $shape
            m=$WORK/m.jsonl
            rm -f "$m"
            OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE /usr/bin/time -f %M -o "$WORK/rss" \
                "$WORK/$rev/build/dtrain" train --model.arch=gpt2 --model.n_layer=$1 \
                --model.n_head=$2 --model.n_embd=$3 --model.vocab_size=256 \
                --model.max_seq_len=256 --train.batch_size=$4 --train.micro_batch_size=0 \
                --train.seq_len=256 --train.steps=5 --train.log_every=1 --train.eval_every=0 \
                --checkpoint.every=0 --train.sample_tokens=0 --train.export="" \
                --data.train="$WORK/data/train.bin" --data.val="" --train.metrics="$m" \
                > "$WORK/log" 2>&1 || { tail -3 "$WORK/log"; exit 1; }
            ms=$(/usr/bin/python3 -c "import json, statistics as S, sys
r = [json.loads(l)['step_ms'] for l in open(sys.argv[1])][1:]
print(round(S.median(r), 1))" "$m")
            echo "round $round $rev L$1 C$3 B$4: $ms ms/step, peak RSS $(cat "$WORK/rss") KiB"
        done
    done
done
rm -rf "$WORK"

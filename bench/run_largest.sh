#!/usr/bin/env bash
# The largest GPT that trains on this machine with dtrain's memory toolkit off vs on (not a
# test). Two ranks (dp 2), GPT-2 shapes (head size 64, V 50257, T 256, one sequence per rank).
#   off: plugin.type=ddp, fp32, ac none, moments in memory          (16 bytes/parameter/rank)
#   on:  plugin.type=zero3, bf16, ac full, offload=disk               (ZeRO-3 shards, recompute,
#        AdamW moments streamed from a file)
# For each layout, `dtrain plan --explain` predicts the per-rank peak of every candidate
# shape; the largest predicted to fit in LARGEST_CAP_GIB per rank is trained for 2 steps, with
# each rank's peak RSS measured (/usr/bin/time); if it fails, the next smaller one is tried.
# Prints a markdown table with the plan's prediction beside the measurement.
#
#   bash bench/run_largest.sh
#
# Knobs (environment):
#   LARGEST_DTRAIN=PATH      the dtrain binary (default: build/dtrain of this checkout)
#   LARGEST_WORK=DIR         scratch folder (default: a new /tmp/dtrain-largest.XXXXXX); the
#                            offload files go here (they are unlinked while open)
#   LARGEST_CAP_GIB=10       accountant budget per rank; 2 ranks x 10 GiB + ~1 GiB of
#                            libraries and page cache stays inside 24 GiB
#   LARGEST_LAYOUTS="off on"
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
DTRAIN=${LARGEST_DTRAIN:-$REPO/build/dtrain}
WORK=${LARGEST_WORK:-$(mktemp -d /tmp/dtrain-largest.XXXXXX)}
CAP=${LARGEST_CAP_GIB:-10}
LAYOUTS=${LARGEST_LAYOUTS:-"off on"}
mkdir -p "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
log() { echo "[largest $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)] $*" >&2; }

[ -f "$WORK/tok.bin" ] ||
    $PY "$REPO/bench/make_tokens.py" --out "$WORK/tok.bin" --vocab 50257 --count 100000 --seed 1
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "dtrain: $(git -C "$REPO" rev-parse --short HEAD)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc --all) cores," \
         "$(free -g | awk '/Mem:/ {print $2}') GiB"
    echo "cap: $CAP GiB of accountant memory per rank, 2 ranks"
} | tee "$WORK/env.txt" >&2

layout_args() {
    case $1 in
    off) echo "--plugin.type=ddp --plugin.precision=fp32 --plugin.ac=none --plugin.offload=none" ;;
    on)  echo "--plugin.type=zero3 --plugin.precision=bf16 --plugin.ac=full --plugin.offload=disk \
--plugin.offload_dir=$WORK/offload" ;;
    esac
}
shape_args() { # L C
    echo "--model.arch=gpt2 --model.n_layer=$1 --model.n_embd=$2 --model.n_head=$(($2 / 64)) \
--model.vocab_size=50257 --model.max_seq_len=256 --train.seq_len=256 --train.batch_size=2 \
--train.micro_batch_size=1 --train.steps=2 --train.log_every=1 --train.eval_every=0 \
--checkpoint.every=0 --train.sample_tokens=0 --train.export= --data.train=$WORK/tok.bin --data.val="
}
# candidate shapes, by parameter count (12 L C^2 + 13 L C + (V + T) C + 2 C)
candidates() {
    for C in 1024 1280 1536 1792 2048 2304 2560 3072 3584 4096; do
        for L in 8 12 16 20 24 28 32 36 40 48 56 64; do
            echo "$L $C $(( 12 * L * C * C + 13 * L * C + (50257 + 256) * C + 2 * C ))"
        done
    done | sort -k3 -n
}
predict() { # layout L C -> predicted per-rank total bytes (the larger rank)
    local out
    out=$("$DTRAIN" plan --config "$REPO/configs/default.ini" --world 2 --explain \
          $(shape_args "$2" "$3") $(layout_args "$1") 2>/dev/null) || { echo 0; return; }
    $PY -c 'import json,sys; print(json.loads(sys.stdin.read())["predicted"]["total"])' <<<"$out"
}

RES=$WORK/results.txt; : >"$RES"
for layout in $LAYOUTS; do
    cap_bytes=$((CAP * 1073741824))
    fits=()
    while read -r L C P; do
        t=$(predict "$layout" "$L" "$C")
        [ "$t" -gt 0 ] && [ "$t" -le "$cap_bytes" ] && fits+=("$L $C $P $t")
    done < <(candidates)
    log "$layout: ${#fits[@]} shapes predicted to fit; trying the largest"
    for ((i = ${#fits[@]} - 1; i >= 0 && i >= ${#fits[@]} - 3; i--)); do
        read -r L C P T <<<"${fits[$i]}"
        tag=$layout-L$L-C$C
        log "$tag: $(awk -v p="$P" 'BEGIN {printf "%.3f", p / 1e9}') B parameters, predicted \
$(awk -v t="$T" 'BEGIN {printf "%.2f", t / 1073741824}') GiB per rank"
        mkdir -p "$WORK/offload"
        # each rank's peak RSS (KiB) into $tag.rss.RANK
        if mpirun --oversubscribe -np 2 bash -c \
               '/usr/bin/time -f %M -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$@"' "$WORK/$tag" \
               "$DTRAIN" train --config "$REPO/configs/default.ini" $(shape_args "$L" "$C") \
               $(layout_args "$layout") --train.metrics="$WORK/$tag.jsonl" \
               --train.mem_report="$WORK/$tag.mem.json" >"$WORK/$tag.log" 2>&1; then
            echo "$layout $L $C $P $tag" >>"$RES"
            break
        fi
        log "$tag failed: $(tail -1 "$WORK/$tag.log")"
    done
done

echo "| toolkit | layout | largest that trained (2 steps) | parameters | per rank: measured peak (predicted) | params | grads | optim | activations | comm | temp | peak RSS per rank | ms/step |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
while read -r layout L C P tag; do
    $PY - "$layout" "$L" "$C" "$P" "$WORK/$tag" "$(layout_args "$layout" | sed "s|$WORK|WORK|")" <<'EOF'
import glob, json, statistics, sys
layout, L, C, P, base, args = sys.argv[1:]
rep = json.load(open(base + ".mem.json"))
peak, pred = rep["peak"], rep["predicted"]
g = lambda b: f"{b / 2**30:.2f}"
rss = [int(open(f).read().split()[-1]) / 2**20 for f in sorted(glob.glob(base + ".rss.*"))]  # KiB
ms = [json.loads(l)["step_ms"] for l in open(base + ".jsonl")]
cats = " | ".join(f"{g(peak[c])} ({g(pred[c])})" for c in
                  ("params", "grads", "optim", "activations", "comm", "temp"))
print(f"| {layout} | `{args}` | L{L} C{C} H{int(C) // 64} | {int(P) / 1e9:.2f} B | "
      f"{g(peak['total'])} GiB ({g(pred['total'])}) | {cats} | "
      f"{' / '.join(f'{r:.2f}' for r in rss)} GiB | {statistics.median(ms):.0f} |")
EOF
done <"$RES"

#!/usr/bin/env bash
# Step-time cost of activation checkpointing and int8 activation storage (not a test): one
# process, the same model, batch and thread count, ac = none | selective | full and
# act_compress = int8, in fp32 and bf16. The variants run interleaved (round robin, ROUNDS
# times), so drift of a shared machine hits them alike; each run's time is the median step_ms
# of steps 3..STEPS, a variant's figure the median over its rounds. Also prints each variant's
# activation peak from the memory report, and the time ratio to ac = none of the same
# precision.
#
#   bash bench/run_ac.sh
#
# Knobs (environment):
#   AC_DTRAIN=PATH   the dtrain binary (default: build/dtrain of this checkout)
#   AC_WORK=DIR      scratch folder (default: a new /tmp/dtrain-ac.XXXXXX)
#   AC_SHAPE="L H C V T B"   GPT-2 shape and batch (default "6 6 384 256 256 8", the small shape
#                    of bench/run_bench.sh)
#   AC_THREADS=2  AC_ROUNDS=3  AC_STEPS=6  AC_PRECS="fp32 bf16"
# Output: a markdown table on stdout; metrics and logs under $WORK.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
DTRAIN=${AC_DTRAIN:-$REPO/build/dtrain}
WORK=${AC_WORK:-$(mktemp -d /tmp/dtrain-ac.XXXXXX)}
mkdir -p "$WORK"
read -r L H C V T B <<<"${AC_SHAPE:-6 6 384 256 256 8}"
THREADS=${AC_THREADS:-2} ROUNDS=${AC_ROUNDS:-3} STEPS=${AC_STEPS:-6} PRECS=${AC_PRECS:-"fp32 bf16"}
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE
log() { echo "[ac $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)] $*" >&2; }

[ -f "$WORK/tok.bin" ] ||
    $PY "$REPO/bench/make_tokens.py" --out "$WORK/tok.bin" --vocab "$V" --count 200000 --seed 1
CPU="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc --all) cores, \
avx512_bf16=$(grep -qw avx512_bf16 /proc/cpuinfo && echo yes || echo no)"
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "dtrain: $(git -C "$REPO" rev-parse --short HEAD)"
    echo "cpu: $CPU"
    echo "shape: GPT-2 L$L H$H C$C V$V, T $T, batch $B, 1 process x $THREADS threads"
} | tee "$WORK/env.txt" >&2

common=(--model.arch=gpt2 --model.n_layer="$L" --model.n_head="$H" --model.n_embd="$C"
        --model.vocab_size="$V" --model.max_seq_len="$T" --train.seq_len="$T"
        --train.batch_size="$B" --train.steps="$STEPS" --train.log_every=1 --train.eval_every=0
        --checkpoint.every=0 --train.sample_tokens=0 --train.export= --data.train="$WORK/tok.bin"
        --data.val=)
VARIANTS=("none|--plugin.ac=none" "selective|--plugin.ac=selective" "full|--plugin.ac=full"
          "int8|--plugin.act_compress=int8" "selective+int8|--plugin.ac=selective|--plugin.act_compress=int8")

median_step() { # metrics.jsonl -> median step_ms of steps 3..
    $PY - "$1" <<'EOF'
import json, statistics, sys
ms = [json.loads(l)["step_ms"] for l in open(sys.argv[1]) if json.loads(l)["step"] >= 3]
print(f"{statistics.median(ms):.1f}")
EOF
}
acts_of() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak"]["activations"])' "$1"; }

for round in $(seq 1 "$ROUNDS"); do
    for prec in $PRECS; do
        for v in "${VARIANTS[@]}"; do
            IFS='|' read -r -a parts <<<"$v"
            tag=${parts[0]}-$prec-r$round
            "$DTRAIN" train "${common[@]}" --plugin.precision="$prec" "${parts[@]:1}" \
                --train.metrics="$WORK/$tag.jsonl" --train.mem_report="$WORK/$tag.mem.json" \
                >"$WORK/$tag.log" 2>&1 || { log "FAILED $tag"; tail -3 "$WORK/$tag.log" >&2; exit 1; }
            log "$tag $(median_step "$WORK/$tag.jsonl") ms"
        done
    done
done

echo "| precision | variant | ms/step (median of $ROUNDS rounds) | vs ac=none | activations peak | vs ac=none |"
echo "|---|---|---:|---:|---:|---:|"
for prec in $PRECS; do
    base_ms="" base_act=""
    for v in "${VARIANTS[@]}"; do
        name=${v%%|*}
        ms=$(for r in $(seq 1 "$ROUNDS"); do median_step "$WORK/$name-$prec-r$r.jsonl"; done |
             sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
        act=$(acts_of "$WORK/$name-$prec-r1.mem.json")
        [ -n "$base_ms" ] || { base_ms=$ms; base_act=$act; }
        awk -v p="$prec" -v n="$name" -v ms="$ms" -v bm="$base_ms" -v a="$act" -v ba="$base_act" \
            'BEGIN {printf "| %s | %s | %s | %.3fx | %.2f MiB | %.3fx |\n", p, n, ms, ms / bm,
                    a / 1048576, a / ba}'
    done
done

#!/usr/bin/env bash
# plugin.pp_layers = auto and train.rebalance_every against the even split (not a test): a
# 12-layer GPT-2 124M with its 50257-word head on pp 4 (4 ranks, 1 thread each), trained a few
# steps each way, alternating, so all see the same machine: the even split, the split auto
# picks from the time model, and the even split with rebalance_every = 2 (its first check, at
# step 2, moves the boundaries by the measured times). Reports the counts auto picked and
# rebalancing reached, the median step_ms of steps 3..STEPS of each run (after the move), and
# the ratios to the even split. With more ranks than cores (pp 4 on 2 cores) a
# light stage's idle time goes to the others' ranks, which hides part of an imbalance; PP=2
# gives each stage a core of its own.
#
#   bash bench/run_pp_auto.sh
#
# Knobs (environment): PP_DTRAIN=PATH (default build/dtrain), PP_WORK=DIR, PP_ROUNDS=2,
# PP_STEPS=6, PP_SEQ=256, PP_BATCH=8 (micro-batches of 1), PP=4 (stages, one rank each).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-/usr/bin/python3}
DTRAIN=${PP_DTRAIN:-$REPO/build/dtrain}
WORK=${PP_WORK:-$(mktemp -d /tmp/dtrain-ppauto.XXXXXX)}
ROUNDS=${PP_ROUNDS:-2} STEPS=${PP_STEPS:-6} SEQ=${PP_SEQ:-256} BATCH=${PP_BATCH:-8} PP=${PP:-4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
mkdir -p "$WORK"
cd "$WORK"
[ -f tok.bin ] || $PY "$REPO/bench/make_tokens.py" --out tok.bin --vocab 50257 --count 400000 --seed 1
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); dtrain: $(git -C "$REPO" rev-parse --short HEAD)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc --all) cores"
echo "GPT-2 124M (12 layers, vocabulary 50257), T $SEQ, batch $BATCH in micro-batches of 1, pp $PP 1F1B, $PP ranks x 1 thread"
run() { # NAME LAYERS [ARGS...]
    local name=$1 layers=$2; shift 2
    mpirun --oversubscribe -np "$PP" "$DTRAIN" train --config "$REPO/configs/gpt2-124m.ini" \
        --data.train=tok.bin --data.val= --train.seq_len="$SEQ" --train.batch_size="$BATCH" \
        --train.micro_batch_size=1 --train.steps="$STEPS" --train.eval_every=0 \
        --train.export= --checkpoint.every=0 --plugin.pp_size="$PP" --plugin.pp_layers="$layers" \
        --train.metrics="$name.jsonl" "$@" > "$name.log" 2>&1
}
median() {
    $PY -c 'import json,statistics,sys
rows=[json.loads(l) for l in open(sys.argv[1]) if "step_ms" in l]
print("%.1f" % statistics.median(r["step_ms"] for r in rows[2:]))' "$1"
}
echo "| round | even split step ms | auto step ms | auto / even | rebalanced step ms | rebalanced / even | split reached |"
echo "|---|---|---|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
    run "even$r" ""
    run "auto$r" auto
    run "rebal$r" "" --train.rebalance_every=2
    e=$(median "even$r.jsonl") a=$(median "auto$r.jsonl") b=$(median "rebal$r.jsonl")
    to=$(grep -ho 'layers per chunk [0-9,]* -> [0-9,]*' "rebal$r.log" | head -1 | sed 's/.*-> //; s/,$//')
    echo "| $r | $e | $a | $($PY -c "print('%.3f' % ($a / $e))") | $b | $($PY -c "print('%.3f' % ($b / $e))") | ${to:-none} |"
done
grep -h "pp_layers=auto:" auto1.log | sed 's/^/auto: /'
grep -h "pipeline chunks took" rebal1.log | sed 's/^/rebalance: /'

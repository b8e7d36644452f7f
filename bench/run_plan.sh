#!/usr/bin/env bash
# The planner's step time against measurement (not a test). Runs a set of layouts of one small
# GPT-2 on this machine (2 ranks, 1 thread each) and, for each, asks `dtrain plan --explain`
# for its predicted step time on `--device this`, measured right after the run by two copies
# of the probe side by side, one thread each (src/cli/plan_probe.c, plan_crew.c: the matmul
# peaks and the rate of every product the layout runs, the attention kernel, norm and
# activation rates at the model's shapes, memory rates). Reports predicted vs measured (median step_ms of steps 3-6 of
# the metrics JSONL), their ratio, and whether the planner ranks the layouts as measurement
# does (Spearman's rank correlation, and the share of layout pairs ordered alike).
#
#   bash bench/run_plan.sh
#
# Knobs (environment):
#   PLAN_DTRAIN=PATH   the dtrain binary (default: build/dtrain of this checkout)
#   PLAN_WORK=DIR      scratch folder (default: a new /tmp/dtrain-plan.XXXXXX)
#   PLAN_SHAPE="L H C V T B"   model and batch (default "4 4 256 256 128 8")
#   PLAN_PROBE=0       1: also measure the collectives on the 2 ranks (`dtrain probe`) and
#                      predict with those figures too (a second predicted column)
#   PLAN_MODEL=gpt2    dit: the video DiT of configs/dit-bounce.ini instead (16 clips of 128
#                      patch tokens, spatial_temporal), over its own layouts: dp with ZeRO,
#                      Ulysses with spatial_temporal and with full attention, tp, Megatron-SP,
#                      pp under 1F1B and ZB-H1
# Output: a markdown table on stdout; metrics, logs and predictions under $WORK.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
DTRAIN=${PLAN_DTRAIN:-$REPO/build/dtrain}
WORK=${PLAN_WORK:-$(mktemp -d /tmp/dtrain-plan.XXXXXX)}
mkdir -p "$WORK"
read -r L H C V T B <<<"${PLAN_SHAPE:-4 4 256 256 128 8}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
log() { echo "[plan $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)] $*" >&2; }

[ -f "$WORK/tok256.bin" ] ||
    $PY "$REPO/bench/make_tokens.py" --out "$WORK/tok256.bin" --vocab 256 --count 200000 --seed 1
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "dtrain: $(git -C "$REPO" rev-parse --short HEAD)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
    [ "${PLAN_MODEL:-gpt2}" = dit ] ||
        echo "shape: GPT-2 L$L H$H C$C V$V, T $T, global batch $B, 2 ranks x 1 thread"
} | tee "$WORK/env.txt" >&2

common="--model.arch=gpt2 --model.n_layer=$L --model.n_head=$H --model.n_embd=$C \
--model.vocab_size=$V --model.max_seq_len=$T --train.seq_len=$T --train.batch_size=$B \
--train.steps=6 --train.log_every=1 --train.eval_every=0 --checkpoint.every=0 \
--train.sample_tokens=0 --train.export= --data.train=$WORK/tok256.bin --data.val= \
--train.micro_batch_size=0 --plugin.precision=fp32"
# name | dtrain arguments (2 ranks)
RUNS=(
    "dp2 ZeRO 0|--plugin.type=ddp"
    "dp2 ZeRO 1|--plugin.type=zero1"
    "dp2 ZeRO 2|--plugin.type=zero2"
    "dp2 ZeRO 3|--plugin.type=zero3"
    "dp2 ZeRO 0, 4 micro-batches|--plugin.type=ddp --plugin.microbatches=4"
    "dp2 ZeRO 0, bf16|--plugin.type=ddp --plugin.precision=bf16"
    "tp2|--plugin.type=hybrid --plugin.tp_size=2"
    "tp2 split_gather|--plugin.type=hybrid --plugin.tp_size=2 --plugin.sp_mode=split_gather"
    "Ulysses sp2|--plugin.type=hybrid --plugin.sp_size=2"
    "pp2 GPipe m4|--plugin.type=hybrid --plugin.pp_size=2 --plugin.pp_schedule=gpipe --plugin.microbatches=4"
    "pp2 1F1B m4|--plugin.type=hybrid --plugin.pp_size=2 --plugin.pp_schedule=1f1b --plugin.microbatches=4"
    "pp2 ZB-H1 m4|--plugin.type=hybrid --plugin.pp_size=2 --plugin.pp_schedule=zbh1 --plugin.microbatches=4"
    "pp2 interleaved v2 m4|--plugin.type=hybrid --plugin.pp_size=2 --plugin.pp_schedule=interleaved --plugin.pp_chunks=2 --plugin.microbatches=4"
)
if [ "${PLAN_MODEL:-gpt2}" = dit ]; then
    common="--config $REPO/configs/dit-bounce.ini --train.steps=6 --train.log_every=1 \
--train.eval_every=0 --checkpoint.every=0 --train.export= --train.micro_batch_size=0 \
--plugin.precision=fp32"
    echo "shape: the video DiT of configs/dit-bounce.ini, 2 ranks x 1 thread" | tee -a "$WORK/env.txt" >&2
    RUNS=(
        "dp2 ZeRO 0|--plugin.type=ddp"
        "dp2 ZeRO 2|--plugin.type=zero2"
        "Ulysses sp2 spatial_temporal|--plugin.type=hybrid --plugin.sp_size=2"
        "Ulysses sp2 full attention|--plugin.type=hybrid --plugin.sp_size=2 --model.attn=full"
        "tp2|--plugin.type=hybrid --plugin.tp_size=2"
        "tp2 split_gather|--plugin.type=hybrid --plugin.tp_size=2 --plugin.sp_mode=split_gather"
        "pp2 1F1B m4|--plugin.type=hybrid --plugin.pp_size=2 --plugin.pp_schedule=1f1b --plugin.microbatches=4"
        "pp2 ZB-H1 m4|--plugin.type=hybrid --plugin.pp_size=2 --plugin.pp_schedule=zbh1 --plugin.microbatches=4"
    )
fi
# shellcheck disable=SC2086
DEVICE=$(OMP_NUM_THREADS=1 "$DTRAIN" plan --world 2 --device this --show-device $common)
echo "device this: $DEVICE" | tee -a "$WORK/env.txt" >&2
PROBE=
if [ "${PLAN_PROBE:-0}" = 1 ]; then
    PROBE=$(mpirun --oversubscribe -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=PASSIVE -np 2 "$DTRAIN" probe)
    echo "probe: $PROBE" | tee -a "$WORK/env.txt" >&2
fi
res=$WORK/runs.jsonl
: >"$res"
i=0
for spec in "${RUNS[@]}"; do
    IFS='|' read -r name args <<<"$spec"
    tag=run$i; i=$((i + 1))
    log "$name"
    # shellcheck disable=SC2086  # word splitting of the argument lists is intended
    mpirun --oversubscribe -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=PASSIVE -np 2 "$DTRAIN" train \
        $common $args --train.metrics="$WORK/$tag.jsonl" >"$WORK/$tag.log" 2>&1 ||
        { tail "$WORK/$tag.log" >&2; exit 1; }
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 "$DTRAIN" plan --world 2 --explain --device this $common $args \
        >"$WORK/$tag.plan.json"
    probed=
    if [ -n "$PROBE" ]; then
        # shellcheck disable=SC2086
        OMP_NUM_THREADS=1 "$DTRAIN" plan --world 2 --explain --device this $PROBE $common $args \
            >"$WORK/$tag.probe.json"
        probed=", \"probed\": \"$WORK/$tag.probe.json\""
    fi
    echo "{\"name\": \"$name\", \"metrics\": \"$WORK/$tag.jsonl\", \"plan\": \"$WORK/$tag.plan.json\"$probed}" >>"$res"
done
$PY - "$res" <<'PYEOF'
import json, statistics as S, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    steps = [json.loads(l) for l in open(r["metrics"])]
    r["meas"] = S.median(s["step_ms"] for s in steps[2:6])
    r["pred"] = json.load(open(r["plan"]))["predicted"]["step_ms"]
    if "probed" in r:
        r["probe"] = json.load(open(r["probed"]))["predicted"]["step_ms"]
def ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    out = [0] * len(v)
    for k, i in enumerate(order):
        out[i] = k + 1
    return out
pr, mr = ranks([r["pred"] for r in rows]), ranks([r["meas"] for r in rows])
n = len(rows)
rho = 1 - 6 * sum((a - b) ** 2 for a, b in zip(pr, mr)) / (n * (n * n - 1))
pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
alike = sum((rows[i]["pred"] < rows[j]["pred"]) == (rows[i]["meas"] < rows[j]["meas"])
            for i, j in pairs)
print("| layout | predicted ms | measured ms (median steps 3-6) | measured / predicted | rank predicted | rank measured |")
print("|---|---:|---:|---:|---:|---:|")
for r, a, b in zip(rows, pr, mr):
    print(f"| {r['name']} | {r['pred']:.1f} | {r['meas']:.1f} | {r['meas'] / r['pred']:.2f} | {a} | {b} |")
print(f"\nSpearman rank correlation {rho:.2f}; {alike} of {len(pairs)} layout pairs ordered alike")
if all("probe" in r for r in rows):
    err = [r["probe"] / r["meas"] - 1 for r in rows]
    base = [r["pred"] / r["meas"] - 1 for r in rows]
    print("\nWith the collectives `dtrain probe` measured (predicted / measured - 1):")
    print("| layout | device this | this + probe |")
    print("|---|---:|---:|")
    for r, e, b in zip(rows, err, base):
        print(f"| {r['name']} | {100 * b:+.1f}% | {100 * e:+.1f}% |")
    m = lambda v: sum(abs(x) for x in v) / len(v)
    print(f"| mean absolute | {100 * m(base):.1f}% | {100 * m(err):.1f}% |")
    print(f"| mean signed | {100 * sum(base) / n:+.1f}% | {100 * sum(err) / n:+.1f}% |")
PYEOF
log "raw data in $WORK"

#!/usr/bin/env bash
# Tensor and sequence parallelism benchmark (issue 4, item 8). Not a test.
#   1. bytes: communication bytes per step per rank (metrics comm_bytes_tp / _sp / _grad, rank
#      0) of tp 2/4, split_gather at tp 2/4, Ulysses sp 2/4, tp2 x sp2, tp2 x dp2 with ZeRO 0-3,
#      a run with micro-batches, bf16 and Llama, against the planner's communication ledger
#      (`dtrain plan --explain`, src/plan/comm.c): they must be equal, every step. The same
#      runs' activation peak (--train.mem_report) on every rank against the planner's
#      prediction beside it in the report (src/plan/memory.c).
#      Shape: GPT-2 L6 H12 C384 V256, T 256, global batch 8 (H12 so tp 4 and sp 4 divide).
#   2. time: the small shape of bench/run_scaling.sh (GPT-2 L6 H6 C384 V256, T 256), global
#      batch 8, 1 thread per rank: 1 x 1 vs 2 ranks as dp2 (ddp), tp2, tp2 split_gather, sp2,
#      side by side in rounds (TP_ROUNDS), median step_ms of the timed steps.
#
#   bash bench/run_tp.sh
#
# Knobs (environment):
#   TP_REV=HEAD        build dtrain from this git revision (git archive snapshot); TP_REV=tree
#                      builds the working tree; TP_DTRAIN=PATH uses a prebuilt binary
#   TP_WORK=DIR        scratch folder (default: a new /tmp/dtrain-tp.XXXXXX)
#   TP_PARTS="bytes time"   TP_ROUNDS=2   TP_WARM=2 TP_STEPS=5 (timed runs)   TP_BYTES_STEPS=2
#   TP_MAX_LOAD=0.8    before each timed round, wait (at most TP_LOAD_WAIT=600 s) for the
#                      1-minute load average to drop below this. Every group of runs holds
#                      flock /tmp/dtrain-bench.lock (the lock run_bench.sh and run_scaling.sh take).
# Output: markdown tables on stdout; raw data (metrics, memory reports, logs) under $WORK.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
WORK=${TP_WORK:-$(mktemp -d /tmp/dtrain-tp.XXXXXX)}
mkdir -p "$WORK"
REV=${TP_REV:-HEAD}
PARTS=${TP_PARTS:-"bytes time"}
ROUNDS=${TP_ROUNDS:-2} WARM=${TP_WARM:-2} STEPS=${TP_STEPS:-5} BSTEPS=${TP_BYTES_STEPS:-2}
MAX_LOAD=${TP_MAX_LOAD:-0.8} LOAD_WAIT=${TP_LOAD_WAIT:-600}
LOCK=/tmp/dtrain-bench.lock
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=PASSIVE)
log() { echo "[tp $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)] $*" >&2; }

. "$REPO/bench/lib.sh"
# ---- build ----------------------------------------------------------------------------------
if [ -n "${TP_DTRAIN:-}" ]; then
    DTRAIN=$TP_DTRAIN; COMMIT="$(git -C "$REPO" rev-parse --short HEAD) (prebuilt $TP_DTRAIN)"
else
    bench_build "$REV" dtrain
    DTRAIN=$BUILD/dtrain
fi
[ -f "$WORK/tok256.bin" ] ||
    $PY "$REPO/bench/make_tokens.py" --out "$WORK/tok256.bin" --vocab 256 --count 200000 --seed 1
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "dtrain: $COMMIT"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
    echo "mpi: $(mpirun --version 2>&1 | head -1)"
} | tee "$WORK/env.txt" >&2

exec 9>"$LOCK"
wait_quiet() {
    local w=0
    while awk -v m="$MAX_LOAD" '{exit !($1 >= m)}' /proc/loadavg && [ "$w" -lt "$LOAD_WAIT" ]; do
        [ $((w % 120)) = 0 ] && log "waiting for load < $MAX_LOAD"
        sleep 30; w=$((w + 30))
    done
    log "quiet enough (waited ${w}s)"
}

# common dtrain arguments: arch L H C V T global_batch steps
dargs() {
    echo --model.arch=$1 --model.n_layer=$2 --model.n_head=$3 --model.n_embd=$4 \
        --model.vocab_size=$5 --model.max_seq_len=$6 --train.seq_len=$6 --train.batch_size=$7 \
        --train.steps=$8 --train.log_every=1 --train.eval_every=0 --checkpoint.every=0 \
        --train.sample_tokens=0 --train.export= --data.train=$WORK/tok256.bin --data.val=
}

# ---- 1. bytes and activations vs the model --------------------------------------------------
# name | ranks | dtrain plugin arguments
BYTES_RUNS=(
    "none|1|--plugin.type=none"
    "tp2|2|--plugin.type=hybrid --plugin.tp_size=2"
    "tp4|4|--plugin.type=hybrid --plugin.tp_size=4"
    "tp2 split_gather|2|--plugin.type=hybrid --plugin.tp_size=2 --plugin.sp_mode=split_gather"
    "tp4 split_gather|4|--plugin.type=hybrid --plugin.tp_size=4 --plugin.sp_mode=split_gather"
    "sp2|2|--plugin.type=hybrid --plugin.sp_size=2"
    "sp4|4|--plugin.type=hybrid --plugin.sp_size=4"
    "tp2 x sp2|4|--plugin.type=hybrid --plugin.tp_size=2 --plugin.sp_size=2"
    "tp2 x dp2 zero0|4|--plugin.type=hybrid --plugin.tp_size=2"
    "tp2 x dp2 zero1|4|--plugin.type=hybrid --plugin.tp_size=2 --plugin.zero_stage=1"
    "tp2 x dp2 zero2|4|--plugin.type=hybrid --plugin.tp_size=2 --plugin.zero_stage=2"
    "tp2 x dp2 zero3|4|--plugin.type=hybrid --plugin.tp_size=2 --plugin.zero_stage=3"
    "sp2 x dp2 zero3, 2 micro-batches|4|--plugin.type=hybrid --plugin.sp_size=2 --plugin.zero_stage=3 --train.micro_batch_size=2"
    "tp2 split_gather x dp2 zero2, 2 micro-batches|4|--plugin.type=hybrid --plugin.tp_size=2 --plugin.sp_mode=split_gather --plugin.zero_stage=2 --train.micro_batch_size=2"
    "tp2 split_gather, bf16|2|--plugin.type=hybrid --plugin.tp_size=2 --plugin.sp_mode=split_gather --plugin.precision=bf16"
    "llama kv4, tp2 x sp2|4|--plugin.type=hybrid --plugin.tp_size=2 --plugin.sp_size=2 --model.arch=llama --model.n_kv_head=4"
    "llama kv4, tp2 split_gather|2|--plugin.type=hybrid --plugin.tp_size=2 --plugin.sp_mode=split_gather --model.arch=llama --model.n_kv_head=4"
)
BL=6 BH=12 BC=384 BV=256 BT=256 BB=8
part_bytes() {
    local res=$WORK/bytes.jsonl i=0 spec name np dargs_ tag common
    : >"$res"
    log "waiting for $LOCK"; flock 9
    for spec in "${BYTES_RUNS[@]}"; do
        IFS='|' read -r name np dargs_ <<<"$spec"
        tag=bytes$i; i=$((i + 1))
        log "$name ($np ranks)"
        common="$(dargs gpt2 $BL $BH $BC $BV $BT $BB $BSTEPS) --train.micro_batch_size=0 --plugin.precision=fp32"
        # shellcheck disable=SC2086  # word splitting of the argument lists is intended
        "${MPIRUN[@]}" -np "$np" "$DTRAIN" train $common $dargs_ \
            --train.metrics="$WORK/$tag.jsonl" --train.mem_report="$WORK/$tag.mem.json" \
            >"$WORK/$tag.log" 2>&1 || { tail "$WORK/$tag.log" >&2; exit 1; }
        # shellcheck disable=SC2086
        "$DTRAIN" plan --world "$np" --explain $common $dargs_ >"$WORK/$tag.plan.json"
        echo "{\"name\": \"$name\", \"ranks\": $np, \"plan\": \"$WORK/$tag.plan.json\", \"metrics\": \"$WORK/$tag.jsonl\", \"mem\": \"$WORK/$tag.mem.json\"}" >>"$res"
    done
    flock -u 9
    $PY - "$res" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
KEYS = ("comm_bytes_tp", "comm_bytes_sp", "comm_bytes_grad")
f = lambda v: f"{v:,}" if isinstance(v, int) else ", ".join(f"{x:,}" for x in v)
for r in rows:
    p = json.load(open(r["plan"]))
    steps = [json.loads(l) for l in open(r["metrics"])]
    meas = {k: sorted({s[k] for s in steps}) for k in KEYS}
    r["p"] = {k: p[k] for k in KEYS}
    r["m"] = {k: v[0] if len(v) == 1 else v for k, v in meas.items()}
    rep = json.load(open(r["mem"]))
    acts = sorted({x["activations"] for x in rep["per_rank"]})
    pred = sorted({x["predicted"]["activations"] for x in rep["per_rank"]})
    r["acts"] = (pred[0] if len(pred) == 1 else pred, acts[0] if len(acts) == 1 else acts)
print("Bytes per step, rank 0 (every step of the run), against `dtrain plan --explain`:\n")
print("| layout | ranks | tp predicted | tp measured | sp predicted | sp measured | grad predicted | grad measured | equal |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
for r in rows:
    p, m = r["p"], r["m"]
    eq = all(p[k] == m[k] for k in KEYS)
    print(f"| {r['name']} | {r['ranks']} | " + " | ".join(f"{f(p[k])} | {f(m[k])}" for k in KEYS)
          + f" | {'yes' if eq else '**NO**'} |")
print("\nActivations (the `activations` peak of --train.mem_report and the prediction beside it, "
      "every rank):\n")
print("| layout | predicted | measured | equal | vs none |")
print("|---|---:|---:|---|---:|")
base = rows[0]["acts"][1]
for r in rows:
    p, m = r["acts"]
    ratio = f"{m / base:.3f}" if isinstance(m, int) and isinstance(base, int) else "-"
    print(f"| {r['name']} | {f(p)} | {f(m)} | {'yes' if p == m else '**NO**'} | {ratio} |")
EOF
}

# ---- 2. step time at the small shape ------------------------------------------------------
TL=6 TH=6 TC=384 TV=256 TT=256 TB=8
TIME_RUNS=(
    "1x1|1|--plugin.type=none"
    "dp2 (ddp)|2|--plugin.type=ddp"
    "tp2|2|--plugin.type=hybrid --plugin.tp_size=2"
    "tp2 split_gather|2|--plugin.type=hybrid --plugin.tp_size=2 --plugin.sp_mode=split_gather"
    "sp2|2|--plugin.type=hybrid --plugin.sp_size=2"
)
part_time() {
    local res=$WORK/time.jsonl spec name np dargs_ tag round i
    : >"$res"
    for round in $(seq 1 "$ROUNDS"); do
        log "waiting for $LOCK"; flock 9; wait_quiet
        i=0
        for spec in "${TIME_RUNS[@]}"; do
            IFS='|' read -r name np dargs_ <<<"$spec"
            tag=time$round.$i; i=$((i + 1))
            local common load0
            load0=$(cut -d' ' -f1 /proc/loadavg)
            common="$(dargs gpt2 $TL $TH $TC $TV $TT $TB $((WARM + STEPS))) --train.micro_batch_size=0 --plugin.precision=fp32"
            # shellcheck disable=SC2086
            if [ "$np" = 1 ]; then
                OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE taskset -c 0 "$DTRAIN" train $common $dargs_ \
                    --train.metrics="$WORK/$tag.jsonl" >"$WORK/$tag.log" 2>&1 || { tail "$WORK/$tag.log" >&2; exit 1; }
            else
                "${MPIRUN[@]}" --bind-to core -np "$np" "$DTRAIN" train $common $dargs_ \
                    --train.metrics="$WORK/$tag.jsonl" >"$WORK/$tag.log" 2>&1 || { tail "$WORK/$tag.log" >&2; exit 1; }
            fi
            log "$name round $round: $($PY -c 'import json,sys,statistics as S; r=[json.loads(l) for l in open(sys.argv[1])][int(sys.argv[2]):]; print(S.median(x["step_ms"] for x in r), "ms")' "$WORK/$tag.jsonl" "$WARM")"
            echo "{\"name\": \"$name\", \"round\": $round, \"metrics\": \"$WORK/$tag.jsonl\", \"load\": [$load0, $(cut -d' ' -f1 /proc/loadavg)]}" >>"$res"
        done
        flock -u 9
    done
    $PY - "$res" "$WARM" "$((TB * TT))" <<'EOF'
import json, statistics as S, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
warm, tokens = int(sys.argv[2]), int(sys.argv[3])
def summary(path):
    rows = [json.loads(l) for l in open(path)][warm:]
    return {"ms": S.median(r["step_ms"] for r in rows),
            "exposed": S.median(r["comm_exposed_ms"] for r in rows),
            "bytes": rows[-1]["comm_bytes"]}
rounds = sorted({r["round"] for r in runs})
by = {(r["name"], r["round"]): summary(r["metrics"]) for r in runs}
names = list(dict.fromkeys(r["name"] for r in runs))
print("Step time, global batch 8 x 256 tokens, 1 thread per rank (median step_ms per round;")
print("load: 1-minute load average before / after each run, ours included):\n")
print("| layout | " + " | ".join(f"ms/step round {k}" for k in rounds) +
      " | tokens/s | vs dp2 (time) | speed-up vs 1x1 | exposed comm ms | comm bytes/step/rank | load |")
print("|---|" + "---:|" * len(rounds) + "---:|---:|---:|---:|---:|---|")
loads = {(r["name"], r["round"]): r.get("load", []) for r in runs}
for n in names:
    ms = [by[(n, k)]["ms"] for k in rounds]
    dp = [by[("dp2 (ddp)", k)]["ms"] for k in rounds]
    one = [by[("1x1", k)]["ms"] for k in rounds]
    vs_dp = " / ".join(f"{a / b:.2f}x" for a, b in zip(ms, dp))
    vs_one = " / ".join(f"{b / a:.2f}x" for a, b in zip(ms, one))
    last = by[(n, rounds[-1])]
    print(f"| {n} | " + " | ".join(f"{m:.0f}" for m in ms) +
          f" | {tokens / (S.median(ms) / 1e3):.0f} | {vs_dp} | {vs_one} | {last['exposed']:.1f} | "
          f"{last['bytes'] / 2**20:.1f} MiB | " +
          "; ".join("/".join(f"{x:.1f}" for x in loads[(n, k)]) for k in rounds) + " |")
EOF
}

[[ " $PARTS " == *" bytes "* ]] && part_bytes
[[ " $PARTS " == *" time "* ]] && part_time
log "raw data in $WORK"

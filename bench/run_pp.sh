#!/usr/bin/env bash
# Pipeline-parallel benchmark (issue 5, item 7). Not a test. On one small GPT-2 (L8 H6 C384
# V256, T=256, micro-batch 1 sequence, global batch = m sequences, fp32, 1 thread per rank):
#   1. bubble share measured from --train.trace (bench/pp_trace.py: time outside F/B spans /
#      (ranks x schedule time), first step excluded) vs theory, for gpipe and 1f1b at pp 2 and
#      4 with m in {p, 2p, 4p} (and ZB-H1 likewise), and interleaved 1F1B at pp 2 with 2 chunks,
#      m 4 and 8;
#   2. peak activation memory per rank from --train.mem_report against the slots the executor
#      allocates for the schedule;
#   3. step time (median step_ms) of every schedule at global batch 8, side by side with one
#      process x 1 thread on the same batch (micro-batch 1).
# pp 2: mpirun --bind-to core (one rank per core). pp 4: 4 ranks on the 2 cores
# (--oversubscribe --bind-to none), so at most 2 ranks compute at once: its timings show the
# machine, not the schedule.
#
#   bash bench/run_pp.sh
#
# Knobs (environment):
#   PP_REV=HEAD        build dtrain from this git revision (git archive snapshot); PP_REV=tree
#                      builds the working tree
#   PP_DTRAIN=PATH     use this dtrain binary instead (PP_DTRAIN_LABEL: its name in the output)
#   PP_WORK=DIR        scratch folder (default: a new /tmp/dtrain-pp.XXXXXX)
#   PP_STEPS=6         steps per run; the first is warm-up, the rest are timed
#   PP_MAX_LOAD=1.5    before the timed group: wait (poll 30 s, at most PP_LOAD_WAIT=300 s) for
#                      the 1-minute load average to drop below this; the group holds
#                      flock /tmp/dtrain-bench.lock
# Output: markdown tables on stdout; raw data (traces, metrics, memory reports, logs) in $WORK.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
WORK=${PP_WORK:-$(mktemp -d /tmp/dtrain-pp.XXXXXX)}
mkdir -p "$WORK"
REV=${PP_REV:-HEAD}
STEPS=${PP_STEPS:-6}
MAX_LOAD=${PP_MAX_LOAD:-1.5}
LOAD_WAIT=${PP_LOAD_WAIT:-300}
LOCK=/tmp/dtrain-bench.lock
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI_ENV=(-x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=PASSIVE)
log() { echo "[pp $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)] $*" >&2; }

. "$REPO/bench/lib.sh"
# ---- build ----------------------------------------------------------------------------------
if [ -n "${PP_DTRAIN:-}" ]; then
    DTRAIN=$PP_DTRAIN; COMMIT=${PP_DTRAIN_LABEL:-"prebuilt $PP_DTRAIN"}
else
    bench_build "$REV" dtrain
    DTRAIN=$BUILD/dtrain
fi
[ -f "$WORK/tok256.bin" ] || $PY "$REPO/bench/make_tokens.py" --out "$WORK/tok256.bin" --vocab 256 --count 200000 --seed 1
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "dtrain: $COMMIT"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; $(free -g | awk '/^Mem/{print $2}') GiB"
    echo "mpi: $(mpirun --version 2>&1 | head -1)"
} | tee "$WORK/env.txt" >&2

# ---- runs -----------------------------------------------------------------------------------
L=8 H=6 C=384 V=256 T=256
model_args() { # global_batch metrics
    echo --model.arch=gpt2 --model.n_layer=$L --model.n_head=$H --model.n_embd=$C \
        --model.vocab_size=$V --model.max_seq_len=$T --train.batch_size=$1 \
        --train.seq_len=$T --train.steps=$STEPS --train.log_every=1 --train.eval_every=0 \
        --checkpoint.every=0 --train.sample_tokens=0 --train.export= --data.train=$WORK/tok256.bin \
        --data.val= --plugin.precision=fp32 --train.metrics=$2
}
msum() { # metrics -> {"ms": median of the timed steps, "steps_ms": [...]}
    $PY -c 'import json,statistics as S,sys
r=[json.loads(l)["step_ms"] for l in open(sys.argv[1])][1:]
print(json.dumps({"ms": S.median(r), "steps_ms": r}))' "$1"
}
chunks() { [ "$1" -gt 1 ] && echo "--chunks $1" || true; } # only interleaved takes --chunks
stats_bubble() { # kind p m v -> the unit-time bubble printed by dtrain schedule --stats
    "$DTRAIN" schedule --pp "$2" --microbatches "$3" --kind "$1" $(chunks "$4") --stats |
        sed -n 's/.*: bubble \([0-9.]*\).*/\1/p'
}
# a run during which another binary's dtrain ran is marked contended (in the log and tables)
watch_start() {
    rm -f "$WORK/foreign"
    ( while :; do [ "$(foreign)" -gt 0 ] && touch "$WORK/foreign"; sleep 1; done ) &
    WATCH=$!
}
watch_stop() { # tag -> true/false
    kill $WATCH 2>/dev/null; wait $WATCH 2>/dev/null || true
    if [ -e "$WORK/foreign" ]; then log "WARNING: another dtrain ran during $1: contended"; echo true
    else echo false; fi
}
RES=$WORK/pp.jsonl
: >"$RES"
pp_run() { # kind p m v
    local kind=$1 p=$2 m=$3 v=$4 tag=$1-p$2-m$3-v$4 bind=core
    [ "$p" -gt 2 ] && bind=none
    "$DTRAIN" schedule --pp $p --microbatches $m --kind $kind $(chunks $v) >"$WORK/$tag.sched"
    local sb slots
    sb=$(stats_bubble $kind $p $m $v); slots=$($PY "$REPO/bench/pp_trace.py" slots "$WORK/$tag.sched")
    watch_start
    if ! timeout 600 mpirun --oversubscribe --bind-to $bind -np $p "${MPI_ENV[@]}" "$DTRAIN" train \
        $(model_args $m "$WORK/$tag.metrics") --plugin.pp_size=$p --plugin.microbatches=$m \
        --plugin.pp_schedule=$kind --plugin.pp_chunks=$v \
        --train.micro_batch_size=0 --train.trace="$WORK/$tag.trace.json" \
        --train.mem_report="$WORK/$tag.mem.json" >"$WORK/$tag.log" 2>&1; then
        log "$tag FAILED: $(grep -m1 -i error "$WORK/$tag.log" || tail -1 "$WORK/$tag.log")"
        echo "{\"kind\":\"$kind\",\"pp\":$p,\"m\":$m,\"v\":$v,\"batch\":$m,\"stats_bubble\":$sb,\"slots\":$slots,\"note\":\"run failed, see $tag.log\"}" >>"$RES"
        return 0
    fi
    local s b mem c
    c=$(watch_stop $tag)
    s=$(msum "$WORK/$tag.metrics")
    b=$($PY "$REPO/bench/pp_trace.py" bubble "$WORK/$tag.trace.json" --skip 1)
    mem=$($PY -c 'import json,sys; print(json.dumps([r["activations"] for r in json.load(open(sys.argv[1]))["per_rank"]]))' "$WORK/$tag.mem.json")
    log "$tag $s bubble $($PY -c 'import json,sys; print("%.3f" % json.loads(sys.argv[1])["sched_share"])' "$b") (theory $sb)"
    echo "{\"kind\":\"$kind\",\"pp\":$p,\"m\":$m,\"v\":$v,\"batch\":$m,\"stats_bubble\":$sb,\"slots\":$slots,\"mem\":$mem,\"bubble\":$b,\"contended\":$c,$(echo "$s" | sed 's/^{//')" >>"$RES"
}
ref_run() { # batch: 1 process x 1 thread, micro-batch 1 (the same per-micro-batch shapes)
    local tag=ref-b$1 c
    watch_start
    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE taskset -c 0 "$DTRAIN" train \
        $(model_args $1 "$WORK/$tag.metrics") --train.micro_batch_size=1 >"$WORK/$tag.log" 2>&1 ||
        { tail "$WORK/$tag.log" >&2; exit 1; }
    c=$(watch_stop $tag)
    local s; s=$(msum "$WORK/$tag.metrics"); log "$tag $s"
    echo "{\"kind\":\"none\",\"pp\":1,\"m\":$1,\"v\":1,\"batch\":$1,\"contended\":$c,$(echo "$s" | sed 's/^{//')" >>"$RES"
}
foreign() { # dtrain processes of another binary (another engineer's run, which takes no lock)
    local p n=0
    for p in $(pgrep -x dtrain || true); do
        [ "$(readlink -f /proc/$p/exe 2>/dev/null)" = "$(readlink -f "$DTRAIN")" ] || n=$((n + 1))
    done
    echo $n
}
wait_quiet() {
    local w=0
    while { awk -v m="$MAX_LOAD" '{exit !($1 >= m)}' /proc/loadavg || [ "$(foreign)" -gt 0 ]; } &&
        [ "$w" -lt "$LOAD_WAIT" ]; do
        [ $((w % 120)) = 0 ] && log "waiting for load < $MAX_LOAD and no other dtrain"
        sleep 30; w=$((w + 30))
    done
    log "starting (waited ${w}s for load)"
}

exec 9>"$LOCK"
log "waiting for $LOCK"
flock 9
wait_quiet
# the timing group first, back to back: global batch 8 for every schedule and the reference
ref_run 8
for kind in gpipe 1f1b zbh1; do pp_run $kind 2 8 1; pp_run $kind 4 8 1; done
pp_run interleaved 2 8 2
# the rest of the bubble sweep
for p in 2 4; do
    for m in $p $((2 * p)) $((4 * p)); do
        [ $m = 8 ] && continue
        for kind in gpipe 1f1b zbh1; do pp_run $kind $p $m 1; done
    done
done
pp_run interleaved 2 4 2
flock -u 9

echo
echo "## Pipeline parallelism ($(sed -n 's/^date: //p' "$WORK/env.txt"), dtrain $COMMIT)"
echo
sed 's/^/    /' "$WORK/env.txt"
echo
$PY "$REPO/bench/pp_trace.py" tables "$RES"
echo
echo "Raw data: $WORK"

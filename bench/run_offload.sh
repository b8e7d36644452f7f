#!/usr/bin/env bash
# Optimizer offload benchmark. Not a test. The step-time cost of plugin.offload=disk against
# offload=none in the same run, side by side, at the small shape of bench/run_bench.sh (GPT-2
# L6 H6 C384 V256, ~11M parameters, batch 8 x T 256 per rank, fp32), under ZeRO 0 on one rank
# and ZeRO 2 on two ranks (mpirun -np 2, one thread each); plus the optim bytes the accountant
# counts per rank for both, and the size of each rank's file. The two settings alternate,
# OFFL_REPS times each; each cell is the median over every timed step: the step time (metrics)
# and the optimizer span of rank 0 (train.trace), where the offload's I/O happens.
#
#   bash bench/run_offload.sh
#
# Knobs (environment):
#   OFFL_REV=HEAD        build dtrain from this git revision (git archive snapshot); OFFL_REV=tree
#                        builds the working tree as it is
#   OFFL_WORK=DIR        scratch folder (default: a new /tmp/dtrain-offload.XXXXXX)
#   OFFL_DIR=DIR         plugin.offload_dir (default $OFFL_WORK/offload): put it on the disk to
#                        measure
#   OFFL_WINDOW_MB=16    plugin.offload_window_mb (1 Mi floats per chunk: the state streams in
#                        11 chunks under ZeRO 0, 6 under ZeRO 2)
#   OFFL_STEPS=7 (the first 2 are warm-up)   OFFL_REPS=2   OFFL_THREADS=1 (per rank)
#   OFFL_MAX_LOAD=0.8    wait (poll 30 s, at most 600 s) for the 1-minute load to drop below it
# The file goes through the page cache: with memory to spare the kernel keeps its pages, and
# the cost measured is the window's copies and the I/O thread, not the disk's bandwidth.
# Output: a markdown table on stdout; metrics, logs and mem reports under $OFFL_WORK.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
WORK=${OFFL_WORK:-$(mktemp -d /tmp/dtrain-offload.XXXXXX)}
mkdir -p "$WORK"
OFFDIR=${OFFL_DIR:-$WORK/offload}
WINDOW=${OFFL_WINDOW_MB:-16}
STEPS=${OFFL_STEPS:-7}
REPS=${OFFL_REPS:-2}
THREADS=${OFFL_THREADS:-1}
MAX_LOAD=${OFFL_MAX_LOAD:-0.8}
WARM=2
log() { echo "[offload $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)] $*" >&2; }

. "$REPO/bench/lib.sh"
bench_build "${OFFL_REV:-HEAD}" dtrain
DTRAIN=$BUILD/dtrain
$PY "$REPO/bench/make_tokens.py" --out "$WORK/tok256.bin" --vocab 256 --count 100000

wait_quiet() {
    local waited=0
    while awk -v m="$MAX_LOAD" '{exit !($1 >= m)}' /proc/loadavg && [ $waited -lt 600 ]; do
        log "load above $MAX_LOAD; waiting"; sleep 30; waited=$((waited + 30))
    done
}

export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
shape=(--model.arch=gpt2 --model.n_layer=6 --model.n_head=6 --model.n_embd=384
       --model.vocab_size=256 --model.max_seq_len=256 --train.seq_len=256
       --data.train="$WORK/tok256.bin" --data.val="" --train.steps=$STEPS --train.log_every=1
       --train.eval_every=0 --train.sample_tokens=0 --train.export="" --checkpoint.every=0
       --optim.warmup_steps=1)

# NAME NP ARGS...
one_run() {
    local name=$1 np=$2; shift 2
    local cmd=("$DTRAIN" train "${shape[@]}" --train.batch_size=$((8 * np))
               --train.metrics="$WORK/$name.jsonl" --train.mem_report="$WORK/$name.mem.json"
               --train.trace="$WORK/$name.trace.json" "$@")
    if [ "$np" -gt 1 ]; then
        cmd=(mpirun --oversubscribe --bind-to none -np "$np" "${cmd[@]}")
    fi
    "${cmd[@]}" >"$WORK/$name.log" 2>&1 || { tail -5 "$WORK/$name.log" >&2; exit 1; }
}

layouts=("zero0|1|--plugin.type=none" "zero2|2|--plugin.type=zero2")
for spec in "${layouts[@]}"; do
    IFS='|' read -r lay np args <<<"$spec"
    wait_quiet
    for rep in $(seq 1 "$REPS"); do
        for off in none disk; do
            log "$lay offload=$off (rep $rep)"
            one_run "${lay}_${off}_$rep" "$np" $args --plugin.offload=$off \
                --plugin.offload_dir="$OFFDIR" --plugin.offload_window_mb="$WINDOW"
        done
    done
done
[ -z "$(ls -A "$OFFDIR" 2>/dev/null)" ] || log "WARNING: files left in $OFFDIR"

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
echo "dtrain $COMMIT, $cpu, $(nproc --all) cores, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "small shape (L6 H6 C384 V256, fp32), batch 8 x 256 per rank, $THREADS thread(s) per rank," \
     "offload_window_mb=$WINDOW, offload_dir=$OFFDIR ($(df -P "$OFFDIR" | awk 'NR==2 {print $1}'))"
$PY - "$WORK" "$REPS" "$WARM" "$WINDOW" <<'PY'
import json, math, os, statistics, sys
work, reps, warm, window = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
print()
print("| layout | offload | step ms | vs none | optimizer ms | vs none | optim MiB per rank "
      "(accountant) | file MiB per rank |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")

def optimizer_ms(path):
    """rank 0's optimizer spans (the update; under ZeRO 2 also the weights' all-gather)"""
    ev = json.load(open(path))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    return [e["dur"] / 1000 for e in ev if e.get("name") == "optimizer" and e.get("tid") == 0
            and e["args"]["step"] >= warm]

for lay, np in (("zero0", 1), ("zero2", 2)):
    step, opt = {}, {}
    for off in ("none", "disk"):
        ms, om = [], []
        for r in range(1, reps + 1):
            with open(os.path.join(work, f"{lay}_{off}_{r}.jsonl")) as f:
                ms += [json.loads(l)["step_ms"] for l in f if l.strip()][warm:]
            om += optimizer_ms(os.path.join(work, f"{lay}_{off}_{r}.trace.json"))
        step[off], opt[off] = statistics.median(ms), statistics.median(om)
        optim = max(m["optim"] for m in
                    json.load(open(os.path.join(work, f"{lay}_{off}_1.mem.json")))["per_rank"])
        none_mem = json.load(open(os.path.join(work, f"{lay}_none_1.mem.json")))["per_rank"]
        count = max(m["optim"] for m in none_mem) // 8
        chunk = max(16, min(math.floor(window * 1048576 / 256) * 16,
                             ((count + 1) // 2 + 15) // 16 * 16))
        file_mib = (count + chunk - 1) // chunk * chunk * 8 / 1048576 if off == "disk" else 0
        print(f"| {lay}, {np} rank{'s' if np > 1 else ''} | {off} | {step[off]:.1f} | "
              f"{step[off] / step['none']:.3f}x | {opt[off]:.1f} | {opt[off] / opt['none']:.2f}x | "
              f"{optim / 1048576:.2f} | {file_mib:.1f} |")
print()
print(f"medians over {reps} runs x the timed steps (after {warm} warm-up steps) of each setting")
PY

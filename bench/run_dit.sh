#!/usr/bin/env bash
# The video DiT benchmark (issue 10; not a test). Three tables:
#   (a) patch tokens per second of `dtrain train` with [model] arch = dit on bouncing-shape
#       clips at 1 and 2 ranks (data parallel; the machine's cores split between the ranks),
#       median step_ms and tokens_per_s of steps 3..DIT_STEPS from train.metrics, beside
#   (c) the same DiT step in PyTorch (bench/torch_dit_step.py: the model that
#       tests/models/torch_dit.py holds equal to dtrain's), one process on all the cores, given
#       its best as bench/run_bench.sh gives it (OpenBLAS checked inside the process, glibc
#       malloc tuned, OMP_WAIT_POLICY=PASSIVE, ATen's faster kernel level, both matmul routes
#       timed and the faster kept); every row prints its MFU against the oneDNN matmul peak
#       bench_gemm measures in the same run at the same thread count, the CPU model and its
#       ISA flags;
#   (b) peak activation memory per rank for a long clip (DIT_LONG_FRAMES frames, one clip) at
#       sequence parallel sp = 1, 2, 4 and activation checkpointing none / full, from the
#       memory accountant (train.mem_report: per rank, category "activations"), beside the
#       planner's prediction for that rank (the report's "predicted", or "-" where the
#       planner has none).
#
#   bash bench/run_dit.sh                 # the full benchmark: run it on an idle machine
#   DIT_STEPS=4 DIT_LONG_FRAMES=8 DIT_SP="1 2" DIT_MAX_LOAD=100 bash bench/run_dit.sh  # a check
#
# Knobs (environment):
#   DIT_REV=HEAD       build dtrain from this git revision (tree: the working tree as it is)
#   DIT_WORK=DIR       scratch folder (default: a new /tmp/dtrain-dit.XXXXXX)
#   DIT_MAX_LOAD=0.8   wait (at most DIT_LOAD_WAIT=900 s) for the 1-minute load average to
#                      fall below this before measuring
#   DIT_MODEL="4 4 256"            n_layer n_head n_embd
#   DIT_CLIP="16 3 32 32 1 2 2"    frames channels height width patch_t patch_h patch_w
#   DIT_ATTN=spatial_temporal      full | spatial_temporal
#   DIT_TEXT=0         text tokens a clip cross-attends to (model.text_len: the caption's
#                      bytes; the peer gets random bytes of that length)
#   DIT_PREC=fp32      fp32 | bf16 (the peer: autocast to bf16, native matmuls; MFU against
#                      the bf16 matmul peak)
#   DIT_BATCH=4        global clips per step (a), split over the ranks
#   DIT_RANKS="1 2"    (a): ranks; each gets DIT_CORES / ranks threads
#   DIT_CORES=$(nproc) cores the runs use
#   DIT_STEPS=6        (a): steps per run; the figure is the median of steps 3..DIT_STEPS
#   DIT_LONG_FRAMES=64 DIT_SP="1 2 4" DIT_AC="none full"   (b)
#   DIT_TORCH=1        0: no PyTorch rows
# Output: markdown tables on stdout; metrics, memory reports and logs under $WORK.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
WORK=${DIT_WORK:-$(mktemp -d /tmp/dtrain-dit.XXXXXX)}
mkdir -p "$WORK"
REV=${DIT_REV:-HEAD}
read -r L H C <<<"${DIT_MODEL:-4 4 256}"
read -r FR CH HT WD PT PH PW <<<"${DIT_CLIP:-16 3 32 32 1 2 2}"
ATTN=${DIT_ATTN:-spatial_temporal}
TEXT=${DIT_TEXT:-0}
PREC=${DIT_PREC:-fp32}
BATCH=${DIT_BATCH:-4}
RANKS=${DIT_RANKS:-"1 2"}
CORES=${DIT_CORES:-$(nproc)}
STEPS=${DIT_STEPS:-6}
LONG=${DIT_LONG_FRAMES:-64}
SPS=${DIT_SP:-"1 2 4"}
ACS=${DIT_AC:-"none full"}
TORCH=${DIT_TORCH:-1}
[ "$STEPS" -ge 3 ] || { echo "run_dit.sh: DIT_STEPS=$STEPS, want >= 3 (steps 3.. are timed)" >&2; exit 2; }
log() { echo "[dit $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)] $*" >&2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=PASSIVE

. "$REPO/bench/lib.sh"
if [ "$TORCH" = 1 ]; then peer_prepare; fi
bench_build "$REV" dtrain bench_gemm
DTRAIN=$BUILD/dtrain GEMM=$BUILD/bench_gemm

CPU_MODEL=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
CPU_ISA=$(for f in avx2 fma avx512f avx512bw avx512vl avx512_bf16 amx_tile; do
    if grep -qw $f /proc/cpuinfo; then printf '%s ' $f; fi; done | sed 's/ $//')
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "dtrain: $COMMIT"
    echo "cpu: $CPU_MODEL, $(nproc) cores ($CORES used), isa: $CPU_ISA"
    echo "mpi: $(mpirun --version 2>&1 | head -1)"
    echo "model: DiT L$L H$H C$C, attn $ATTN, clip ${FR}x${CH}x${HT}x${WD}, patch ${PT}x${PH}x${PW}, text $TEXT, $PREC"
    if [ "$TORCH" = 1 ]; then
        echo "peer: torch $(jget "$PROBE0" torch) on" \
            "$(jget "$PROBE0" blas | tr -d "[]'" | cut -d, -f1), ATEN_CPU_CAPABILITY=${ATEN_CAP:-default}," \
            "malloc tuned (mallopt), OMP_WAIT_POLICY=PASSIVE"
    fi
} | tee "$WORK/env.txt" >&2

# dtrain's arguments for a DiT run: clip frames, global batch, steps, extra keys...
dit_args() {
    local frames=$1 batch=$2 steps=$3
    shift 3
    echo --model.arch=dit --model.n_layer="$L" --model.n_head="$H" --model.n_embd="$C" \
        --model.frames="$frames" --model.channels="$CH" --model.height="$HT" \
        --model.width="$WD" --model.patch_t="$PT" --model.patch_h="$PH" --model.patch_w="$PW" \
        --model.attn="$ATTN" --model.n_classes=0 --model.text_len="$TEXT" \
        --model.max_seq_len=$(( (frames / PT) * (HT / PH) * (WD / PW) )) \
        --data.source=bounce --data.train= \
        --data.val= --train.batch_size="$batch" --train.micro_batch_size=0 \
        --train.steps="$steps" --train.log_every=1 --train.eval_every=0 --checkpoint.every=0 \
        --train.sample_tokens=0 --train.export= --plugin.precision="$PREC" "$@"
}
# run dtrain on RANKS ranks x THREADS threads: tag ranks threads args...
run_dtrain() {
    local tag=$1 np=$2 t=$3
    shift 3
    if [ "$np" = 1 ]; then
        OMP_NUM_THREADS=$t "$DTRAIN" train "$@" >"$WORK/$tag.log" 2>&1
    else
        mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS="$t" -x OMP_WAIT_POLICY \
            -np "$np" "$DTRAIN" train "$@" >"$WORK/$tag.log" 2>&1
    fi || { log "FAILED $tag:"; tail -5 "$WORK/$tag.log" >&2; exit 1; }
}
# the oneDNN matmul peak of the run's precision at THREADS threads (bench_gemm), GFLOP/s
peak_at() {
    OMP_NUM_THREADS=$1 "$GEMM" 5 2>/dev/null | sed -n "s/.*peak_${PREC}_gflops=\([0-9.]*\).*/\1/p"
}
# model FLOPs of one trained clip, dtrain's count (tests/models/torch_dit.py DiTConfig)
flops_per_clip() { # frames
    $PY - "$1" <<EOF
import sys
sys.path.insert(0, "$REPO/tests/models")
import torch_dit as D
print(D.DiTConfig(attn="$ATTN", frames=int(sys.argv[1]), channels=$CH, height=$HT, width=$WD,
      patch_t=$PT, patch_h=$PH, patch_w=$PW, n_layer=$L, n_head=$H, n_embd=$C,
      n_classes=0, text_len=$TEXT).flops_per_clip())
EOF
}
TOKENS=$(( (FR / PT) * (HT / PH) * (WD / PW) ))
FPC=$(flops_per_clip "$FR")

wait_quiet "${DIT_MAX_LOAD:-0.8}" "${DIT_LOAD_WAIT:-900}"
START_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- (a) + (c): throughput --------------------------------------------------------------------
RES=$WORK/throughput.jsonl; : >"$RES"
declare -A PEAK
for np in $RANKS; do
    t=$((CORES / np)); [ "$t" -ge 1 ] || t=1
    [ -n "${PEAK[$t]:-}" ] || PEAK[$t]=$(peak_at "$t")
    tag=tput-np$np
    rm -f "$WORK/$tag.metrics"
    # shellcheck disable=SC2046
    run_dtrain "$tag" "$np" "$t" $(dit_args "$FR" "$BATCH" "$STEPS" --train.metrics="$WORK/$tag.metrics")
    $PY - "$WORK/$tag.metrics" >>"$RES" <<EOF
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "step_ms" in r and r["step"] >= 3]
if not rows:
    sys.exit("run_dit.sh: $tag: no metrics for steps >= 3")
ms = statistics.median(r["step_ms"] for r in rows)
tps = statistics.median(r["tokens_per_s"] for r in rows)
flops = $FPC * $BATCH / (ms / 1e3)
peak = $np * ${PEAK[$t]}
print(json.dumps({"impl": "dtrain", "ranks": $np, "threads": $t, "step_ms": ms,
    "tokens_per_s": tps, "gflops": flops / 1e9, "peak_gflops": peak, "mfu": flops / (peak * 1e9),
    "cpu": "$CPU_MODEL", "isa": "$CPU_ISA"}))
EOF
    log "$tag $(tail -1 "$RES")"
done
if [ "$TORCH" = 1 ]; then
    t=$CORES
    [ -n "${PEAK[$t]:-}" ] || PEAK[$t]=$(peak_at "$t")
    best=""
    mms="native onednn"
    [ "$PREC" = fp32 ] || mms=native # autocast does not see the oneDNN route
    for mm in $mms; do
        # shellcheck disable=SC2046
        j=$(env $(peer_env "$t") $PY "$REPO/bench/torch_dit_step.py" --frames "$FR" \
            --channels "$CH" --height "$HT" --width "$WD" --patch-t "$PT" --patch-h "$PH" \
            --patch-w "$PW" --n-layer "$L" --n-head "$H" --n-embd "$C" --attn "$ATTN" \
            --batch "$BATCH" --threads "$t" --warmup 2 --steps $((STEPS - 2)) --matmul $mm \
            --text-len "$TEXT" --dtype "$PREC" \
            --peak-gflops "${PEAK[$t]}" 2>"$WORK/torch-$mm.err" | tee "$WORK/torch-$mm.json")
        log "pytorch --matmul $mm $(jget "$j" ms_per_step) ms/step"
        if [ -z "$best" ] || awk -v a="$(jget "$j" ms_per_step)" -v b="$(jget "$best" ms_per_step)" \
                'BEGIN{exit !(a < b)}'; then
            best=$j
        fi
    done
    $PY - "$best" >>"$RES" <<'EOF'
import json, sys
j = json.loads(sys.argv[1])
print(json.dumps({"impl": "pytorch (%s)" % j["matmul"], "ranks": 1, "threads": j["threads"],
    "step_ms": j["ms_per_step"], "tokens_per_s": j["tokens_per_s"], "gflops": j["gflops"],
    "peak_gflops": j["peak_gflops"], "mfu": j["mfu"], "cpu": j["cpu"], "isa": j["isa"]}))
EOF
fi

# ---- (b): activation memory of a long clip ------------------------------------------------------
MEM=$WORK/memory.jsonl; : >"$MEM"
for sp in $SPS; do
    for ac in $ACS; do
        t=$((CORES / sp)); [ "$t" -ge 1 ] || t=1
        tag=mem-sp$sp-$ac
        # shellcheck disable=SC2046
        run_dtrain "$tag" "$sp" "$t" $(dit_args "$LONG" 1 2 --plugin.sp_size="$sp" \
            --plugin.ac="$ac" --train.mem_report="$WORK/$tag.mem.json")
        $PY - "$WORK/$tag.mem.json" >>"$MEM" <<EOF
import json, sys
rep = json.load(open(sys.argv[1]))
ranks = rep.get("per_rank") or [dict(rep["peak"], predicted=rep.get("predicted"))]
worst = max(ranks, key=lambda r: r["activations"])
pred = (worst.get("predicted") or {}).get("activations")
print(json.dumps({"sp": $sp, "ac": "$ac", "activations": worst["activations"],
    "predicted": pred, "total": worst["total"], "ranks": len(ranks)}))
EOF
        log "$tag $(tail -1 "$MEM")"
    done
done
END_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- tables ---------------------------------------------------------------------------------------
echo
echo "## Video DiT: dtrain vs PyTorch ($(sed -n 's/^date: //p' "$WORK/env.txt"), dtrain $COMMIT)"
echo
sed 's/^/    /' "$WORK/env.txt"
echo "    load average at start: $START_LOAD; at end: $END_LOAD"
echo
$PY - "$RES" "$TOKENS" "$BATCH" "$FR" "$PREC" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tokens, batch, frames = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
print(f"Throughput: {batch} clips of {frames} frames ({tokens} patch tokens each) per step, "
      f"{sys.argv[5]}; median of steps 3.. (dtrain: train.metrics)")
print()
print("| impl | ranks x threads | ms/step | patch tokens/s | GFLOP/s | peak GFLOP/s | MFU | CPU | ISA |")
print("|---|---|---:|---:|---:|---:|---:|---|---|")
for r in rows:
    print(f"| {r['impl']} | {r['ranks']} x {r['threads']} | {r['step_ms']:.1f} | "
          f"{r['tokens_per_s']:.0f} | {r['gflops']:.1f} | {r['peak_gflops']:.0f} | "
          f"{100 * r['mfu']:.1f}% | {r['cpu']} | {r['isa']} |")
EOF
echo
$PY - "$MEM" "$LONG" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
mib = lambda b: "-" if b is None else f"{b / 1048576:.2f}"
print(f"Activation memory per rank, one clip of {sys.argv[2]} frames (train.mem_report; the "
      "largest rank)")
print()
print("| sp | ac | activations peak MiB | predicted MiB | predicted / measured | total peak MiB |")
print("|---:|---|---:|---:|---:|---:|")
for r in rows:
    ratio = "-" if r["predicted"] is None else f"{r['predicted'] / r['activations']:.4f}"
    print(f"| {r['sp']} | {r['ac']} | {mib(r['activations'])} | {mib(r['predicted'])} | "
          f"{ratio} | {mib(r['total'])} |")
EOF
echo
echo "MFU: model FLOPs (dtrain's count: 6 x the matmul MACs per clip plus attention's two"
echo "products) per second over the oneDNN $PREC matmul peak (bench_gemm, this run) at the row's"
echo "threads per rank times its ranks. Raw data: $WORK"

#!/usr/bin/env bash
# Single-process benchmark (issue 2, item 13): dtrain vs PyTorch (Debian python3-torch), side by
# side, at the GPT-2 124M shape and a small shape, 1 and 2 threads, fp32 and bf16; MFU against
# the oneDNN matmul peak (bench_gemm) measured in the same run at the same thread count; then a
# perf per-kernel breakdown of one dtrain step (124M shape, 1 thread). Not a test.
#
#   bash bench/run_bench.sh                       # the full table: about 10-15 min on 2 cores
#   BENCH_SHAPES=small BENCH_THREADS=1 BENCH_PERF=0 bash bench/run_bench.sh   # a quick check
#
# The peer is given its best on the CPU at hand (issue 12 item 5), and the run refuses to
# compare otherwise:
#   - OpenBLAS under torch.matmul (Debian's python3-torch links the generic libblas.so.3; the
#     reference BLAS there is ~20x slower): libopenblas0-pthread is installed if missing, and
#     bench/torch_probe.py checks the library torch actually loaded; not OpenBLAS -> exit 2.
#     OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are unset for the peer only (OpenBLAS picks its own
#     kernels; dtrain's oneDNN does not read them).
#   - glibc malloc tuned inside torch_step.py (mallopt M_MMAP_MAX 0, M_TRIM_THRESHOLD 1 GiB):
#     no per-step page faults for its tensors. OMP_WAIT_POLICY=PASSIVE, threads set.
#   - ATen's kernel level: where the CPU has AVX-512 (F/BW/VL/DQ) torch 1.13 still defaults to
#     AVX2; the probe times its pointwise kernels at both and the faster is used.
#   - matmul route: torch.matmul (OpenBLAS) or torch's bundled oneDNN, probed at the run's
#     shapes and thread count (bench/torch_probe.py); the faster runs the fp32 steps
#     (BENCH_TORCH_ROUTES=both times full steps of both instead). bf16 runs autocast steps
#     when its bf16 matmul is a real kernel (AVX-512-BF16), else one step (or an estimate).
#   The table prints the peer's MFU against the same oneDNN peak as dtrain's, and its probed
#   matmul GFLOP/s, so an untuned peer shows as a low number; every row records the CPU model
#   and its ISA flags.
#
# Knobs (environment):
#   BENCH_REV=HEAD        build dtrain from this git revision (a `git archive` snapshot, so that
#                         uncommitted edits in the working tree do not leak in); BENCH_REV=tree
#                         builds the working tree as it is
#   BENCH_WORK=DIR        scratch folder (default: a new /tmp/dtrain-bench.XXXXXX)
#   BENCH_MAX_LOAD=0.8    wait (poll 30 s, at most BENCH_LOAD_WAIT=900 s) until the 1-minute load
#                         average is below this before measuring
#   BENCH_TORCH_BF16_124M=auto  1: always time PyTorch's bf16 autocast step at 124M; 0: never
#                         (estimate it from the small shape's bf16 FLOP rate); auto: time it when
#                         the probe's bf16 matmul is at least a quarter of its fp32 rate (without
#                         AVX-512 torch 1.13's bf16 matmul is a scalar loop: minutes per step)
#   BENCH_TORCH_ROUTES=probe   probe: fp32 steps on the probe's faster matmul route; both: time
#                         full steps of both routes and keep the faster
#   BENCH_PERF=1          0: skip the perf breakdown
#   BENCH_SHAPES="124m small"   BENCH_THREADS="1 2"   BENCH_PRECS="fp32 bf16"
# Output: the markdown table and breakdown on stdout; raw data under $BENCH_WORK.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
SUM="$PY $REPO/bench/bench_summary.py"
WORK=${BENCH_WORK:-$(mktemp -d /tmp/dtrain-bench.XXXXXX)}
mkdir -p "$WORK"
REV=${BENCH_REV:-HEAD}
MAX_LOAD=${BENCH_MAX_LOAD:-0.8}
LOAD_WAIT=${BENCH_LOAD_WAIT:-900}
SHAPES=${BENCH_SHAPES:-"124m small"}
THREADS=${BENCH_THREADS:-"1 2"}
PRECS=${BENCH_PRECS:-"fp32 bf16"}
D_WARM=2 D_STEPS=3        # dtrain: 2 warm-up + 3 timed steps, median of the timed ones
T_WARM=1 T_STEPS=3        # PyTorch fp32 (its steps are slower; 1 warm-up + 3 timed)
log() { echo "[bench $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)] $*" >&2; }

# ---- prerequisites and the peer's best environment (bench/lib.sh) ------------------------
. "$REPO/bench/lib.sh"
peer_prepare
if [ "${BENCH_PERF:-1}" = 1 ] && ! command -v perf >/dev/null; then
    apt_install linux-perf || true
fi

# ---- build (own build dir, snapshot of $REV) ------------------------------------------------
bench_build "$REV" dtrain bench_gemm
DTRAIN=$BUILD/dtrain GEMM=$BUILD/bench_gemm

$PY "$REPO/bench/make_tokens.py" --out "$WORK/tok50257.bin" --vocab 50257 --count 100000
$PY "$REPO/bench/make_tokens.py" --out "$WORK/tok256.bin" --vocab 256 --count 100000

# ---- environment record ---------------------------------------------------------------------
CPU_MODEL=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
CPU_ISA=$(for f in avx2 avx512f avx512_bf16; do grep -qw $f /proc/cpuinfo && printf '%s ' $f; done | sed 's/ $//')
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "dtrain: $COMMIT"
    echo "cpu: $CPU_MODEL, $(nproc) cores," \
         "avx2=$(grep -qw avx2 /proc/cpuinfo && echo yes || echo no)" \
         "avx512f=$(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)" \
         "avx512_bf16=$(grep -qw avx512_bf16 /proc/cpuinfo && echo yes || echo no)"
    echo "libblas.so.3 -> $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)"
    echo "peer: torch $(jget "$PROBE0" torch) on $(jget "$PROBE0" blas | tr -d "[]'" | cut -d, -f1)," \
         "ATEN_CPU_CAPABILITY=${ATEN_CAP:-default}, malloc tuned (mallopt), OMP_WAIT_POLICY=PASSIVE;" \
         "probe at the small shape, 1 thread: fp32 matmul native $(jget "$PROBE0" fp32_gflops native)" \
         "/ oneDNN $(jget "$PROBE0" fp32_gflops onednn) GFLOP/s, bf16 $(jget "$PROBE0" bf16_gflops) GFLOP/s"
} | tee "$WORK/env.txt" >&2

# ---- wait for a quiet machine ---------------------------------------------------------------
wait_quiet "$MAX_LOAD" "$LOAD_WAIT"
START_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- the matrix -----------------------------------------------------------------------------
RES=$WORK/results.jsonl; : >"$RES"; peak_line=""
small_bf16_gflops=""   # PyTorch bf16 FLOP rate at the small shape, per thread count (estimates)
declare -A TBF16
for shape in $SHAPES; do
    case $shape in
    124m)  L=12 H=12 C=768 V=50257 B=4 T=256 MAXT=1024 TOK=$WORK/tok50257.bin ;;
    small) L=6 H=6 C=384 V=256 B=8 T=256 MAXT=256 TOK=$WORK/tok256.bin ;;
    *) echo "unknown shape $shape" >&2; exit 2 ;;
    esac
    FPT=$($SUM flops gpt2 $L $C $V $T)
    for t in $THREADS; do
        # the MFU denominator, at this thread count, right before this group of runs
        peak_line=$(OMP_NUM_THREADS=$t OMP_WAIT_POLICY=PASSIVE "$GEMM" 5 2>/dev/null)
        log "$shape t=$t $peak_line"
        for prec in $PRECS; do
            tag=$shape-t$t-$prec
            peak=$(sed -n "s/.*peak_${prec}_gflops=\([0-9.]*\).*/\1/p" <<<"$peak_line")
            impl=$(sed -n "s/.*impl_${prec}=\(.*\)$/\1/p" <<<"$peak_line" | sed 's/ impl_.*//')
            # dtrain
            rm -f "$WORK/$tag.metrics"
            OMP_NUM_THREADS=$t OMP_WAIT_POLICY=PASSIVE /usr/bin/time -f %M -o "$WORK/$tag.dtrain.rss" \
                "$DTRAIN" train --model.arch=gpt2 --model.n_layer=$L --model.n_head=$H \
                --model.n_embd=$C --model.vocab_size=$V --model.max_seq_len=$MAXT \
                --train.batch_size=$B --train.micro_batch_size=0 --train.seq_len=$T \
                --train.steps=$((D_WARM + D_STEPS)) --train.log_every=1 --train.eval_every=0 \
                --checkpoint.every=0 --train.sample_tokens=0 --train.export="" \
                --data.train="$TOK" --data.val="" --plugin.precision=$prec \
                --train.metrics="$WORK/$tag.metrics" >"$WORK/$tag.dtrain.log" 2>&1 ||
                { tail -20 "$WORK/$tag.dtrain.log" >&2; exit 1; }
            dsum=$($SUM median "$WORK/$tag.metrics" $D_WARM)
            log "$tag dtrain $($PY -c 'import json,sys; print(json.loads(sys.argv[1])["median_step_ms"])' "$dsum") ms/step"
            # PyTorch, immediately after, same shape/threads/precision
            tjson=""; tmm=""; testms=""; tsteps=$T_STEPS; trss=""
            targs=(--arch gpt2 --n-layer $L --n-head $H --n-embd $C --vocab $V --batch $B
                   --seq-len $T --max-seq-len $MAXT --threads $t --dtype $prec --data "$TOK")
            runtorch() { # matmul warmup steps -> JSON line
                # shellcheck disable=SC2046
                env $(peer_env $t) /usr/bin/time -f %M -o "$WORK/$tag.torch-$1.rss" \
                    $PY "$REPO/bench/torch_step.py" "${targs[@]}" --matmul $1 --warmup $2 \
                    --steps $3 2>"$WORK/$tag.torch-$1.err" | tee "$WORK/$tag.torch-$1.json"
            }
            # the peer's matmul routes at this run's shapes and thread count
            tprobe=$(probe $t $C $V $((B * T)) 2>"$WORK/$tag.probe.err" | tee "$WORK/$tag.probe.json")
            log "$tag peer probe $tprobe"
            bf16_real=$($PY -c 'import json,sys; p=json.loads(sys.argv[1]); print(int(p["bf16_gflops"] >= 0.25 * max(p["fp32_gflops"].values())))' "$tprobe")
            tmm_gflops=""
            if [ $prec = fp32 ]; then
                # the faster matmul route (OpenBLAS via torch.matmul, or torch's bundled oneDNN)
                routes=$(jget "$tprobe" best_fp32)
                [ "${BENCH_TORCH_ROUTES:-probe}" = both ] && routes="native onednn"
                best=""
                for mm in $routes; do
                    j=$(runtorch $mm $T_WARM $T_STEPS)
                    ms=$($PY -c 'import json,sys; print(json.loads(sys.argv[1])["ms_per_step"])' "$j")
                    log "$tag pytorch --matmul $mm $ms ms/step"
                    if [ -z "$best" ] || awk -v a="$ms" -v b="$best" 'BEGIN{exit !(a < b)}'; then
                        best=$ms; tjson=$j; tmm=$mm
                    fi
                done
                tmm_gflops=$(jget "$tprobe" fp32_gflops $tmm)
            elif [ "$bf16_real" = 1 ] && [ "${BENCH_TORCH_BF16_124M:-auto}" != 0 ] ||
                    [ "${BENCH_TORCH_BF16_124M:-auto}" = 1 ]; then
                # autocast bf16 on a CPU whose bf16 matmul is a real kernel: timed like fp32
                tmm=native; tmm_gflops=$(jget "$tprobe" bf16_gflops)
                tjson=$(runtorch native $T_WARM $T_STEPS)
                log "$tag pytorch bf16 autocast $(jget "$tjson" ms_per_step) ms/step"
            elif [ $shape = small ]; then
                # autocast bf16: without AVX-512 torch 1.13 runs bf16 matmuls in a scalar loop
                # (~1-2 GFLOP/s here): one untimed-warm-up-free step is all we can afford
                tsteps=1; tmm=native; tmm_gflops=$(jget "$tprobe" bf16_gflops)
                tjson=$(runtorch native 0 1)
                ms=$($PY -c 'import json,sys; print(json.loads(sys.argv[1])["ms_per_step"])' "$tjson")
                log "$tag pytorch bf16 autocast $ms ms/step"
                TBF16[$t]=$($PY -c "print($FPT * $B * $T / ($ms / 1e3))")
            elif [ -n "${TBF16[$t]:-}" ]; then
                # estimate from the small shape's bf16 FLOP rate (filled when small ran first)
                testms=$($PY -c "print(1e3 * $FPT * $B * $T / ${TBF16[$t]})")
            fi
            [ -n "$tjson" ] && trss=$(cat "$WORK/$tag.torch-$tmm.rss")
            $PY - "$dsum" "$tjson" >>"$RES" <<EOF
import json, sys
d = json.loads(sys.argv[1]); tj = json.loads(sys.argv[2]) if sys.argv[2] else None
print(json.dumps({"shape": "$shape", "threads": $t, "precision": "$prec",
    "peak_gflops": float("$peak"), "gemm_impl": "$impl", "tokens": $B * $T,
    "flops_per_token": $FPT, "dtrain_ms": d["median_step_ms"], "dtrain_steps": d["timed_step_ms"],
    "dtrain_self_mfu": d["mfu"], "dtrain_peak_mem_bytes": d["peak_mem_bytes"],
    "dtrain_rss_kb": int(open("$WORK/$tag.dtrain.rss").read().split()[-1]),
    "torch_ms": tj["ms_per_step"] if tj else None, "torch_matmul": "$tmm" or None,
    "torch_steps": $tsteps, "torch_rss_kb": int("$trss".split()[-1]) if "$trss" else None,
    "torch_est_ms": float("$testms") if "$testms" else None,
    "torch_mm_gflops": float("$tmm_gflops") if "$tmm_gflops" else None,
    "torch_aten": "${ATEN_CAP:-default}", "cpu": "$CPU_MODEL", "isa": "$CPU_ISA",
    "load": open("/proc/loadavg").read().split()[0]}))
EOF
        done
    done
done
# the bf16 124M estimate needs the small shape's rate: fill it in when 124m ran first
$PY - "$RES" "$(for t in "${!TBF16[@]}"; do echo "$t=${TBF16[$t]}"; done)" <<'EOF'
import json, sys
rates = dict(kv.split("=") for kv in sys.argv[2].split())
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    if r["precision"] == "bf16" and r["torch_ms"] is None and str(r["threads"]) in rates:
        r["torch_est_ms"] = 1e3 * r["flops_per_token"] * r["tokens"] / float(rates[str(r["threads"])])
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in rows))
EOF
END_LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "## dtrain vs PyTorch, single process ($(sed -n 's/^date: //p' "$WORK/env.txt"), dtrain $COMMIT)"
echo
sed 's/^/    /' "$WORK/env.txt"
echo "    load average at start: $START_LOAD; at end: $END_LOAD"
echo "    oneDNN matmul impl (last bench_gemm): ${peak_line#*impl_fp32=}" | sed "s/impl (last bench_gemm): /impl (last bench_gemm): fp32=/"
echo
$SUM table "$RES"
echo
echo "MFU = (6 x matmul weights incl. LM head + 6 L C T) x tokens/s / oneDNN matmul peak of the"
echo "same precision at the same thread count (bench_gemm, this run). Raw data: $WORK"

# ---- per-kernel breakdown: one dtrain step, 124M shape, 1 thread ----------------------------
if [ "${BENCH_PERF:-1}" = 1 ] && command -v perf >/dev/null; then
    tag=perf-124m-t1-fp32
    rm -f "$WORK/$tag.metrics"
    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE perf record -F 499 -g -o "$WORK/$tag.data" -- \
        "$DTRAIN" train --model.arch=gpt2 --model.n_layer=12 --model.n_head=12 --model.n_embd=768 \
        --model.vocab_size=50257 --model.max_seq_len=1024 --train.batch_size=4 \
        --train.micro_batch_size=0 --train.seq_len=256 --train.steps=2 --train.log_every=1 \
        --train.eval_every=0 --checkpoint.every=0 --train.sample_tokens=0 --train.export="" \
        --data.train="$WORK/tok50257.bin" --data.val="" --plugin.precision=fp32 \
        --train.metrics="$WORK/$tag.metrics" >"$WORK/$tag.log" 2>&1
    # the window of the last step: [last sample - step_ms, last sample] (no export/eval after it)
    last=$(perf script -i "$WORK/$tag.data" -F time 2>/dev/null | tail -1 | tr -d ' :')
    step_ms=$($PY -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["step_ms"])' "$WORK/$tag.metrics")
    win=$($PY -c "print('%.6f,%.6f' % ($last - $step_ms / 1e3, $last))")
    perf report -i "$WORK/$tag.data" --time "$win" --no-children --sort dso,symbol -g none \
        --stdio >"$WORK/$tag.report.txt" 2>/dev/null
    echo
    echo "## Where one dtrain step goes (GPT-2 124M, B=4 T=256, fp32, 1 thread, ${step_ms} ms; perf, last step only)"
    echo
    $SUM perf "$WORK/$tag.report.txt" 18
fi

# ---- the matmuls of one step, by shape (oneDNN's own timing, DNNL_VERBOSE=1) ----------------
if [ "${BENCH_PERF:-1}" = 1 ]; then
    for shape in 124m small; do
        case $shape in
        124m)  A="--model.n_layer=12 --model.n_head=12 --model.n_embd=768 --model.vocab_size=50257
                  --model.max_seq_len=1024 --train.batch_size=4 --data.train=$WORK/tok50257.bin"
               TOKS=1024 ;;
        small) A="--model.n_layer=6 --model.n_head=6 --model.n_embd=384 --model.vocab_size=256
                  --model.max_seq_len=256 --train.batch_size=8 --data.train=$WORK/tok256.bin"
               TOKS=2048 ;;
        esac
        # shellcheck disable=SC2086
        OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE DNNL_VERBOSE=1 "$DTRAIN" train --model.arch=gpt2 $A \
            --train.micro_batch_size=0 --train.seq_len=256 --train.steps=2 --train.log_every=1 \
            --train.eval_every=0 --checkpoint.every=0 --train.sample_tokens=0 --train.export="" \
            --data.val="" --plugin.precision=fp32 --train.metrics="$WORK/dnnl-$shape.metrics" \
            >"$WORK/dnnl-$shape.log" 2>&1
        step_ms=$($PY -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["step_ms"])' "$WORK/dnnl-$shape.metrics")
        echo
        echo "## oneDNN matmuls in one dtrain step ($shape, fp32, 1 thread, step ${step_ms} ms; DNNL_VERBOSE=1)"
        echo
        $SUM dnnl "$WORK/dnnl-$shape.log" $TOKS
    done
fi

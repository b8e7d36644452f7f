#!/usr/bin/env bash
# Data-parallel benchmark (issue 3, item 10). Not a test. Weak scaling, same per-rank batch:
#   1. dtrain 1 rank x 1 thread (plain single process) vs 2 ranks x 1 thread (mpirun -np 2
#      --bind-to core, OMP_NUM_THREADS=1), plugin ddp (ZeRO 0) and zero2: tokens/s ratio (target
#      >= 1.9x), exposed communication / step time (target <= 5%), bytes per step; plus the
#      no-communication ceiling: two independent 1-rank processes at once, one per core.
#   2. PyTorch (python3-torch) DDP over gloo, 2 x 1 vs a plain 1 x 1, same shapes, side by side
#      (bench/torch_ddp.py; the faster of torch's two fp32 matmul routes, chosen at 1 x 1).
#   3. The largest GPT-2-style model (parameters) that trains 2 steps with 2 ranks, fp32, batch 1
#      per rank, T=256, under ZeRO 0 and ZeRO 3, predicted from a probe's per-rank memory report
#      before it is tried, under a watchdog that kills the run above SCAL_MEM_LIMIT_GB of RSS.
# Shapes: small = GPT-2 L6 H6 C384 V256, per-rank batch 8, T=256; 124m = L12 H12 C768 V50257,
# per-rank batch 4, T=256.
#
#   bash bench/run_scaling.sh
#
# Knobs (environment):
#   SCAL_REV=HEAD         build dtrain from this git revision (git archive snapshot: others' uncommitted
#                         edits do not leak in); SCAL_REV=tree builds the working tree
#   SCAL_DTRAIN=PATH      use this dtrain binary instead of building one (SCAL_DTRAIN_LABEL: its name)
#   SCAL_WORK=DIR         scratch folder (default: a new /tmp/dtrain-scal.XXXXXX)
#   SCAL_PARTS="scaling largest"   SCAL_SHAPES="small 124m"
#   SCAL_MAX_LOAD=0.8     before each timed group: wait (poll 30 s, at most SCAL_LOAD_WAIT=600 s)
#                         for the 1-minute load average to drop below this, and while another
#                         engineer's bench/run_bench.sh runs (at most SCAL_BENCH_WAIT=3600 s); timed
#                         groups hold flock /tmp/dtrain-bench.lock
#   SCAL_IMPLS="dtrain pytorch"  which sides of part 1 to run
#   SCAL_TORCH_NOSYNC="small"  shapes at which PyTorch 2 x 1 is also run with no_sync() (its ceiling)
#   SCAL_MEM_LIMIT_GB=20  kill a largest-model run whose ranks' summed RSS passes this
# Output: markdown tables on stdout; raw data (metrics JSON lines, logs, mem reports) under $WORK.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
WORK=${SCAL_WORK:-$(mktemp -d /tmp/dtrain-scal.XXXXXX)}
mkdir -p "$WORK"
REV=${SCAL_REV:-HEAD}
PARTS=${SCAL_PARTS:-"scaling largest"}
SHAPES=${SCAL_SHAPES:-"small 124m"}
MAX_LOAD=${SCAL_MAX_LOAD:-0.8}
LOAD_WAIT=${SCAL_LOAD_WAIT:-600}
BENCH_WAIT=${SCAL_BENCH_WAIT:-3600}
NOSYNC_SHAPES=${SCAL_TORCH_NOSYNC:-small}
IMPLS=${SCAL_IMPLS:-"dtrain pytorch"}
MEM_LIMIT_GB=${SCAL_MEM_LIMIT_GB:-20}
WARM=${SCAL_WARM:-2} STEPS=${SCAL_STEPS:-3}   # every timed run: warm-up + timed steps, median of the timed ones
LOCK=/tmp/dtrain-bench.lock
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# the PyTorch peer's environment (and only its)
TORCH_ENV=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1)
MPIRUN=(mpirun -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=PASSIVE --bind-to core)
log() { echo "[scal $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)] $*" >&2; }
jget() { $PY -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

. "$REPO/bench/lib.sh"
# ---- build ----------------------------------------------------------------------------------
if [ -n "${SCAL_DTRAIN:-}" ]; then
    DTRAIN=$SCAL_DTRAIN; COMMIT=${SCAL_DTRAIN_LABEL:-"prebuilt $SCAL_DTRAIN"}
else
    bench_build "$REV" dtrain
    DTRAIN=$BUILD/dtrain
fi
[ -f "$WORK/tok50257.bin" ] || $PY "$REPO/bench/make_tokens.py" --out "$WORK/tok50257.bin" --vocab 50257 --count 200000 --seed 1
[ -f "$WORK/tok256.bin" ] || $PY "$REPO/bench/make_tokens.py" --out "$WORK/tok256.bin" --vocab 256 --count 200000 --seed 1

{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "dtrain: $COMMIT"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; $(free -g | awk '/^Mem/{print $2}') GiB"
    echo "mpi: $(mpirun --version 2>&1 | head -1)"
    echo "libblas.so.3 -> $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3)"
    echo "torch: $($PY -c 'import torch; print(torch.__version__)')"
} | tee "$WORK/env.txt" >&2

# ---- hygiene: quiet machine, one benchmark at a time ----------------------------------------
wait_quiet() { # until no run_bench.sh runs and the load is low, both at once
    local w=0 b=0
    while :; do
        if pgrep -f run_bench.sh >/dev/null && [ "$b" -lt "$BENCH_WAIT" ]; then
            [ $((b % 300)) = 0 ] && log "waiting for another engineer's run_bench.sh to finish"
            sleep 30; b=$((b + 30)); continue
        fi
        if awk -v m="$MAX_LOAD" '{exit !($1 >= m)}' /proc/loadavg && [ "$w" -lt "$LOAD_WAIT" ]; then
            [ $((w % 120)) = 0 ] && log "waiting for load < $MAX_LOAD"
            sleep 30; w=$((w + 30)); continue
        fi
        break
    done
    log "quiet enough (waited ${b}s for run_bench.sh, ${w}s for load)"
}
# a run_bench.sh that started during a timed group (it takes no lock) spoils the comparison:
# say so in the log and in the results
contended() { pgrep -f run_bench.sh >/dev/null && { log "WARNING: run_bench.sh is running: $1 is contended"; echo true; } || echo false; }
exec 9>"$LOCK"
locked() { log "waiting for $LOCK"; flock 9; wait_quiet; "$@"; flock -u 9; }

# ---- runs -----------------------------------------------------------------------------------
shape_args() { # shape -> sets L H C V B T MAXT TOK
    case $1 in
    small) L=6 H=6 C=384 V=256 B=8 T=256 MAXT=256 TOK=$WORK/tok256.bin ;;
    124m)  L=12 H=12 C=768 V=50257 B=4 T=256 MAXT=1024 TOK=$WORK/tok50257.bin ;;
    *) echo "unknown shape $1" >&2; exit 2 ;;
    esac
}
dtrain_args() { # steps global_batch plugin metrics
    echo --model.arch=gpt2 --model.n_layer=$L --model.n_head=$H --model.n_embd=$C \
        --model.vocab_size=$V --model.max_seq_len=$MAXT --train.batch_size=$2 \
        --train.micro_batch_size=0 --train.seq_len=$T --train.steps=$1 --train.log_every=1 \
        --train.eval_every=0 --checkpoint.every=0 --train.sample_tokens=0 --train.export= \
        --data.train=$TOK --data.val= --plugin.type=$3 --plugin.precision=fp32 --train.metrics=$4
}
# summary of a dtrain metrics file: medians over the timed steps
dsum() { # metrics warm tokens_per_step_global
    $PY - "$@" <<'EOF'
import json, statistics as S, sys
rows = [json.loads(l) for l in open(sys.argv[1])][int(sys.argv[2]):]
ms = S.median(r["step_ms"] for r in rows)
print(json.dumps({"ms": ms, "steps_ms": [r["step_ms"] for r in rows],
    "tokens_per_s": int(sys.argv[3]) / (ms / 1e3),
    "exposed_ms": S.median(r["comm_exposed_ms"] for r in rows),
    "exposed_share": S.median(r["comm_exposed_ms"] / r["step_ms"] for r in rows),
    "comm_bytes": rows[-1]["comm_bytes"], "peak_mem_bytes": rows[-1]["peak_mem_bytes"],
    "loss": rows[-1]["loss"]}))
EOF
}
RES=$WORK/scaling.jsonl
scaling_shape() {
    local shape=$1 tag gb
    shape_args "$shape"
    gb=$((2 * B))
    [[ " $IMPLS " == *" dtrain "* ]] && scaling_dtrain "$shape"
    [[ " $IMPLS " == *" pytorch "* ]] && scaling_torch "$shape"
    return 0
}
scaling_dtrain() {
    local shape=$1 tag gb
    shape_args "$shape"
    gb=$((2 * B))
    # dtrain 1 x 1: plain single process, the baseline
    tag=$shape-dtrain-1x1
    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE taskset -c 0 "$DTRAIN" train \
        $(dtrain_args $((WARM + STEPS)) $B none "$WORK/$tag.metrics") >"$WORK/$tag.log" 2>&1 ||
        { tail "$WORK/$tag.log" >&2; exit 1; }
    s=$(dsum "$WORK/$tag.metrics" $WARM $((B * T))); log "$tag $s"
    echo "{\"shape\":\"$shape\",\"impl\":\"dtrain\",\"layout\":\"1x1\",\"plugin\":\"none\",\"contended\":$(contended $tag),\"r\":$s}" >>"$RES"
    # dtrain 2 x 1, ddp and zero2
    for plugin in ddp zero2; do
        tag=$shape-dtrain-2x1-$plugin
        "${MPIRUN[@]}" -np 2 "$DTRAIN" train \
            $(dtrain_args $((WARM + STEPS)) $gb $plugin "$WORK/$tag.metrics") \
            --train.mem_report="$WORK/$tag.mem.json" >"$WORK/$tag.log" 2>&1 ||
            { tail "$WORK/$tag.log" >&2; exit 1; }
        s=$(dsum "$WORK/$tag.metrics" $WARM $((gb * T))); log "$tag $s"
        echo "{\"shape\":\"$shape\",\"impl\":\"dtrain\",\"layout\":\"2x1\",\"plugin\":\"$plugin\",\"contended\":$(contended $tag),\"r\":$s}" >>"$RES"
    done
    # ceiling: two independent 1-rank processes at once (no communication), one per core
    tag=$shape-dtrain-2indep
    for c in 0 1; do
        OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE taskset -c $c "$DTRAIN" train \
            $(dtrain_args $((WARM + STEPS)) $B none "$WORK/$tag.$c.metrics") >"$WORK/$tag.$c.log" 2>&1 &
    done
    wait
    s0=$(dsum "$WORK/$tag.0.metrics" $WARM $((B * T))); s1=$(dsum "$WORK/$tag.1.metrics" $WARM $((B * T)))
    s=$($PY -c 'import json,sys; a,b=map(json.loads,sys.argv[1:]); print(json.dumps({"ms": max(a["ms"],b["ms"]), "tokens_per_s": a["tokens_per_s"]+b["tokens_per_s"], "exposed_share": 0, "exposed_ms": 0, "comm_bytes": 0}))' "$s0" "$s1")
    log "$tag $s"
    echo "{\"shape\":\"$shape\",\"impl\":\"dtrain\",\"layout\":\"2 indep\",\"plugin\":\"none\",\"contended\":$(contended $tag),\"r\":$s}" >>"$RES"

}
scaling_torch() {
    local shape=$1 tag
    shape_args "$shape"
    # PyTorch: 1 x 1 with both matmul routes (keep the faster), then DDP 2 x 1 with it
    targs=(--n-layer $L --n-head $H --n-embd $C --vocab $V --batch $B --seq-len $T
           --max-seq-len $MAXT --data "$TOK" --warmup $WARM --steps $STEPS)
    local best="" bestmm="" j ms
    for mm in native onednn; do
        tag=$shape-torch-1x1-$mm
        j=$("${TORCH_ENV[@]}" $PY "$REPO/bench/torch_ddp.py" --nproc 1 --matmul $mm "${targs[@]}" \
            2>"$WORK/$tag.err" | tee "$WORK/$tag.json")
        ms=$(jget "$j" ms_per_step); log "$tag $ms ms/step"
        if [ -z "$best" ] || awk -v a="$ms" -v b="$best" 'BEGIN{exit !(a < b)}'; then
            best=$ms; bestmm=$mm
        fi
        echo "{\"shape\":\"$shape\",\"impl\":\"pytorch\",\"layout\":\"1x1\",\"plugin\":\"$mm\",\"contended\":$(contended $tag),\"r\":$j}" >>"$RES"
    done
    tag=$shape-torch-2x1-ddp
    j=$("${TORCH_ENV[@]}" $PY "$REPO/bench/torch_ddp.py" --nproc 2 --matmul $bestmm "${targs[@]}" \
        2>"$WORK/$tag.err" | tee "$WORK/$tag.json")
    log "$tag $(jget "$j" ms_per_step) ms/step ($bestmm)"
    echo "{\"shape\":\"$shape\",\"impl\":\"pytorch\",\"layout\":\"2x1\",\"plugin\":\"ddp-gloo-$bestmm\",\"contended\":$(contended $tag),\"r\":$j}" >>"$RES"
    if [[ " $NOSYNC_SHAPES " == *" $shape "* ]]; then
        tag=$shape-torch-2x1-nosync
        j=$("${TORCH_ENV[@]}" $PY "$REPO/bench/torch_ddp.py" --nproc 2 --no-sync --matmul $bestmm \
            "${targs[@]}" 2>"$WORK/$tag.err" | tee "$WORK/$tag.json")
        log "$tag $(jget "$j" ms_per_step) ms/step"
        echo "{\"shape\":\"$shape\",\"impl\":\"pytorch\",\"layout\":\"2x1 no_sync\",\"plugin\":\"$bestmm\",\"contended\":$(contended $tag),\"r\":$j}" >>"$RES"
    fi
}

scaling_table() {
    $PY - "$RES" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def tps(r): return r["r"]["tokens_per_s"]
print("| shape | impl | layout | plugin / route | ms/step (median) | tokens/s (global) | vs 1x1 | exposed comm / step | comm bytes/step/rank |")
print("|---|---|---|---|---:|---:|---:|---:|---:|")
for shape in dict.fromkeys(r["shape"] for r in rows):
    for impl in ("dtrain", "pytorch"):
        rs = [r for r in rows if r["shape"] == shape and r["impl"] == impl]
        base = [r for r in rs if r["layout"] == "1x1"]
        if not base: continue
        b = max(tps(r) for r in base)  # PyTorch: the faster matmul route
        for r in rs:
            d = r["r"]; ms = d.get("ms", d.get("ms_per_step"))
            ex = "%.2f%% (%.1f ms)" % (100 * d["exposed_share"], d["exposed_ms"]) if "exposed_share" in d and r["layout"] == "2x1" else "-"
            cb = "%.1f MiB" % (d["comm_bytes"] / 2**20) if d.get("comm_bytes") else "-"
            c = " (CONTENDED)" if r.get("contended") else ""
            print(f"| {shape} | {impl} | {r['layout']}{c} | {r['plugin']} | {ms:.0f} | {tps(r):.0f} | "
                  f"{tps(r) / b:.2f}x | {ex} | {cb} |")
EOF
}

# ---- largest model: 2 ranks, fp32, batch 1 per rank, T=256, 2 steps -------------------------
# candidates: GPT-2 blocks, H = C/64, V 50257, T = max_seq_len = 256, ordered by parameters
nparams() { echo $((12 * $2 * $1 * $1 + 13 * $2 * $1 + 50257 * $1 + 256 * $1 + 2 * $1)); } # C L
CANDS=$(for C in 1024 1280 1536 1600 1792 2048; do for L in 24 30 36 42 48; do
            echo "$(nparams $C $L) $C $L"; done; done | sort -n)
mem_used_kb() { # summed RSS (KiB) of the processes running $DTRAIN
    local s=0 p r
    for p in $(pgrep -x dtrain || true); do
        [ "$(readlink -f /proc/$p/exe 2>/dev/null)" = "$(readlink -f "$DTRAIN")" ] || continue
        r=$(awk '/^VmRSS/{print $2}' /proc/$p/status 2>/dev/null || echo 0); s=$((s + ${r:-0}))
    done
    echo $s
}
big_run() { # stage C L tag -> 0 ok, 1 failed or killed; $WORK/$tag.{log,metrics,mem.json,maxrss}
    local stage=$1 C=$2 L=$3 tag=$4 pid peak=0 kb limit=$((MEM_LIMIT_GB * 1048576))
    "${MPIRUN[@]}" -np 2 "$DTRAIN" train --model.arch=gpt2 --model.n_layer=$L --model.n_head=$((C / 64)) \
        --model.n_embd=$C --model.vocab_size=50257 --model.max_seq_len=256 --train.batch_size=2 \
        --train.micro_batch_size=0 --train.seq_len=256 --train.steps=2 --train.log_every=1 \
        --train.eval_every=0 --checkpoint.every=0 --train.sample_tokens=0 --train.export= \
        --data.train="$WORK/tok50257.bin" --data.val= --plugin.type=$([ "$stage" = 0 ] && echo ddp || echo zero$stage) \
        --plugin.precision=fp32 --train.metrics="$WORK/$tag.metrics" \
        --train.mem_report="$WORK/$tag.mem.json" >"$WORK/$tag.log" 2>&1 &
    pid=$!
    while kill -0 $pid 2>/dev/null; do
        kb=$(mem_used_kb); [ "$kb" -gt "$peak" ] && peak=$kb
        if [ "$kb" -gt "$limit" ] || [ "$(awk '/MemAvailable/{print $2}' /proc/meminfo)" -lt 1048576 ]; then
            log "$tag: RSS $((kb / 1024)) MiB past the limit (or < 1 GiB available): killing mpirun $pid"
            kill $pid; sleep 5; kill -9 $pid 2>/dev/null || true
            echo "$peak" >"$WORK/$tag.maxrss"; wait $pid || true; return 1
        fi
        sleep 0.5
    done
    echo "$peak" >"$WORK/$tag.maxrss"
    wait $pid || { tail -5 "$WORK/$tag.log" >&2; return 1; }
}
# predicted summed RSS (KiB) of candidate C L from reference run $ref (C0 L0): parameter-sized
# categories scale with the parameter count; activations with L*C (B, T fixed; the V-sized logits
# are scaled too, which over-predicts); comm (ZeRO 2/3 unit buffers: 3 x the embedding unit + 6 x
# the widest block, engine.c alloc_unit_buf) with 3(V+T)C + 6*12C^2; temp with C^2; plus the
# reference's RSS above the accountant's total (MPI, code, allocator).
predict_kb() { # ref C0 L0 C L
    $PY - "$WORK/$1.mem.json" "$(cat "$WORK/$1.maxrss")" "$2" "$3" "$4" "$5" <<'EOF'
import json, sys
rep = json.load(open(sys.argv[1])); rss0 = int(sys.argv[2]) * 1024
C0, L0, C, L = map(int, sys.argv[3:7])
n = lambda C, L: 12 * L * C * C + 13 * L * C + 50257 * C + 258 * C
u = lambda C: 3 * (50257 + 256) * C + 6 * 12 * C * C
tot = 0
for r in rep["per_rank"]:
    tot += ((r["params"] + r["grads"] + r["optim"]) * n(C, L) / n(C0, L0)
            + r["activations"] * (L * C) / (L0 * C0) + r["temp"] * max(1, (C / C0) ** 2)
            + r["comm"] * u(C) / u(C0))
over = max(0, rss0 - sum(r["total"] for r in rep["per_rank"]))
print(int((tot + over) / 1024))
EOF
}
LRES=$WORK/largest.jsonl
largest_stage() {
    local stage=$1 ref=probe-z$stage C0=1024 L0=8 p C L tag pred limit=$((MEM_LIMIT_GB * 1048576))
    log "z$stage probe C$C0 L$L0"
    big_run $stage $C0 $L0 $ref || { log "probe failed"; return 1; }
    # try the largest candidate predicted to fit; on failure, the next smaller one
    local tried=0
    while read -r p C L; do
        pred=$(predict_kb $ref $C0 $L0 $C $L)
        [ "$pred" -le $((limit * 95 / 100)) ] || continue
        echo "$p $C $L $pred"
    done <<<"$CANDS" | sort -rn | while read -r p C L pred; do
        tag=z$stage-C$C-L$L
        log "z$stage try C$C L$L: $((p / 1000000))M params, predicted RSS $((pred / 1048576)) GiB"
        if big_run $stage $C $L $tag; then
            $PY - "$WORK/$tag" "$stage" "$C" "$L" "$p" "$pred" >>"$LRES" <<'EOF'
import json, sys
w, stage, C, L, p, pred = sys.argv[1:]
m = [json.loads(l) for l in open(w + ".metrics")]
print(json.dumps({"stage": int(stage), "C": int(C), "L": int(L), "params": int(p),
    "pred_rss_kb": int(pred), "maxrss_kb": int(open(w + ".maxrss").read()),
    "mem": json.load(open(w + ".mem.json")), "loss": [r["loss"] for r in m],
    "step_ms": [r["step_ms"] for r in m]}))
EOF
            log "z$stage C$C L$L trained: peak summed RSS $(($(cat "$WORK/$tag.maxrss") / 1024)) MiB"
            break
        fi
        log "z$stage C$C L$L failed; trying the next smaller"
    done
}
largest_table() {
    $PY - "$LRES" <<'EOF'
import json, sys
G = 2**30
print("| ZeRO | model (GPT-2, V 50257, T 256) | parameters | per rank: params | grads | optim | activations | comm | temp | accountant total | summed RSS, 2 ranks (predicted) |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for l in open(sys.argv[1]):
    r = json.loads(l); m = r["mem"]["per_rank"][0]
    f = lambda k: "%.2f GiB" % (m[k] / G)
    print(f"| {r['stage']} | L{r['L']} C{r['C']} H{r['C'] // 64} | {r['params'] / 1e9:.3f} B | "
          + " | ".join(f(k) for k in ("params", "grads", "optim", "activations", "comm", "temp", "total"))
          + f" | {r['maxrss_kb'] / 2**20:.1f} GiB ({r['pred_rss_kb'] / 2**20:.1f}) |")
    print(f"<!-- losses {r['loss']} step_ms {r['step_ms']} -->")
EOF
}

# ---- main -----------------------------------------------------------------------------------
: >"$RES"; : >"$LRES"
if [[ " $PARTS " == *" scaling "* ]]; then
    for shape in $SHAPES; do
        log "== scaling, $shape"
        locked scaling_shape "$shape"
    done
fi
if [[ " $PARTS " == *" largest "* ]]; then
    for stage in 0 3; do
        log "== largest model, ZeRO $stage"
        locked largest_stage $stage || true
    done
fi

echo
echo "## Data parallelism, 2 ranks x 1 thread vs 1 x 1 ($(sed -n 's/^date: //p' "$WORK/env.txt"), dtrain $COMMIT)"
echo
sed 's/^/    /' "$WORK/env.txt"
echo
[ -s "$RES" ] && scaling_table
echo
[ -s "$LRES" ] && largest_table
echo
echo "Raw data: $WORK"

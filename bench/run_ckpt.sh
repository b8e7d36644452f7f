#!/usr/bin/env bash
# Sharded checkpoints (issue 11, item 9; not a test): save and load time and checkpoint size
# against model size on 1 and 2 ranks, the time a save holds training up, sync vs async, and
# the largest GPT that trains and also checkpoints in 2 ranks x CKPT_CAP_GIB, before and after.
#
#   bash bench/run_ckpt.sh            # ~5-10 minutes on 2 cores at the default sizes
#
# Part 1 (timed). GPT-2 shapes L:C (head size 64, V 50257, T 256, one sequence per rank),
# 1 rank (plugin none) and 2 ranks (zero3: each rank writes half), 9 steps with a checkpoint
# every 3 (steps 3, 6, 9), run three ways: no checkpoints, sync and async; then a resume from
# the sync step-9 folder. Per row:
#   size        the step folder on disk (du)
#   save s      sync: one whole save, mean of the three (the trainer's "saved in")
#   load s      the resume (the trainer's "loaded in"; one folder, no resume=auto checksums)
#   held s      per save, the time the training loop stood still for it: sync, the save
#               itself; async, the time in the save calls (the copy to the staging buffer, and
#               the wait when a save comes before the one before it is written) plus the
#               wait at the end for the last one, divided by the number of saves
#   async copy  the first save's time in the save call: the copy alone
#   step ratio  async: the median step time of the async run over that of the run without
#               checkpoints (the writer thread competing for the cores; on a loaded machine
#               mostly noise, so it is a ratio of medians, not a sum of differences)
# Part 2 (planned; the planner is exact to the byte against the accountant, see
# plan/mem_predict). For the two layouts of bench/run_largest.sh (toolkit off: ddp fp32;
# on: zero3 bf16 ac=full offload=disk), the largest candidate shape whose per-rank peak with
# checkpoint.every > 0 fits CKPT_CAP_GIB, for each way a checkpoint has been written:
#   whole       the whole format of older dtrain: weights, exp_avg, exp_avg_sq gathered into
#               three whole-model arenas on every rank, plus the local arena it gathers
#               through and the tp ranks' arenas (the planner of 5f56fb9: 12 x n_full +
#               (1 + tp) x 4 x n_local bytes)
#   sharded v1  sharded, with the offloaded moments copied (8 MiB + 8 bytes x the optimizer's
#               floats when offloaded; the planner of f4ea4e9)
#   sync        now: 8 MiB ckpt.io (dtrain plan --checkpoint.every=1)
#   async       now: ckpt.io + a staging copy of 12 bytes per float of the rank's partition
#
# Knobs (environment):
#   CKPT_DTRAIN=PATH     the dtrain binary (default: build/dtrain of this checkout)
#   CKPT_WORK=DIR        scratch (default: a new /tmp/dtrain-ckpt.XXXXXX); checkpoints go here
#   CKPT_SIZES="4:256 6:384 12:768"   L:C of the timed shapes
#   CKPT_RANKS="1 2"
#   CKPT_CAP_GIB=10      part 2's budget per rank (2 ranks)
#   CKPT_PARTS="1 2"
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
DTRAIN=${CKPT_DTRAIN:-$REPO/build/dtrain}
WORK=${CKPT_WORK:-$(mktemp -d /tmp/dtrain-ckpt.XXXXXX)}
SIZES=${CKPT_SIZES:-"4:256 6:384 12:768"}
RANKS=${CKPT_RANKS:-"1 2"}
CAP=${CKPT_CAP_GIB:-10}
PARTS=${CKPT_PARTS:-"1 2"}
mkdir -p "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
log() { echo "[ckpt $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)] $*" >&2; }
CPU="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc --all) cores"
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "dtrain: $(git -C "$REPO" rev-parse --short HEAD)"
    echo "cpu: $CPU, $(free -g | awk '/Mem:/ {print $2}') GiB; load at start $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "disk: $(df -h "$WORK" | awk 'NR == 2 {print $1, $2, "(" $4 " free)"}')"
} | tee "$WORK/env.txt" >&2

shape_args() { # L C
    echo "--model.arch=gpt2 --model.n_layer=$1 --model.n_embd=$2 --model.n_head=$(($2 / 64)) \
--model.vocab_size=50257 --model.max_seq_len=256 --train.log_every=1 --train.eval_every=0 \
--train.sample_tokens=0 --train.export= --data.val="
}

# ---- part 1: timed ----------------------------------------------------------------------
part1() {
    [ -f "$WORK/tok.bin" ] ||
        $PY "$REPO/bench/make_tokens.py" --out "$WORK/tok.bin" --vocab 50257 --count 100000 --seed 1
    echo "| parameters | ranks | layout | checkpoint size | save s (sync) | load s | training held per save: sync / async, s | async copy s | async: step time ratio | s/step (no checkpoints) | CPU |"
    echo "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"
    for size in $SIZES; do
        L=${size%:*} C=${size#*:}
        for np in $RANKS; do
            local layout=none tag=L$L-C$C-np$np
            [ "$np" -gt 1 ] && layout=zero3
            local args=($(shape_args "$L" "$C") --config "$REPO/configs/default.ini"
                        --data.train="$WORK/tok.bin" --train.seq_len=256 --train.batch_size="$np"
                        --train.micro_batch_size=1 --train.steps=9 --plugin.type=$layout
                        --checkpoint.keep=1)
            for way in none sync async load; do
                local extra=()
                case $way in
                none) extra=(--checkpoint.every=0) ;;
                sync) extra=(--checkpoint.every=3 --checkpoint.dir="$WORK/ck-sync") ;;
                async) extra=(--checkpoint.every=3 --checkpoint.dir="$WORK/ck-async"
                              --checkpoint.async=true) ;;
                load) extra=(--checkpoint.every=0 --checkpoint.resume="$WORK/ck-sync/step-9") ;;
                esac
                log "$tag $way"
                mpirun --oversubscribe -np "$np" "$DTRAIN" train "${args[@]}" "${extra[@]}" \
                    --train.metrics="$WORK/$tag.$way.jsonl" >"$WORK/$tag.$way.log" 2>&1 ||
                    { log "$tag $way failed: $(tail -1 "$WORK/$tag.$way.log")"; continue 2; }
            done
            local bytes
            bytes=$(du -sb "$WORK/ck-sync/step-9" | cut -f1)
            rm -rf "$WORK/ck-sync" "$WORK/ck-async"
            $PY - "$WORK/$tag" "$np" "$layout" "$bytes" "$CPU" <<'EOF'
import json, re, statistics, sys
base, np, layout, size, cpu = sys.argv[1:]
steps = lambda way: {json.loads(l)["step"]: json.loads(l)["step_ms"] / 1e3
                     for l in open(f"{base}.{way}.jsonl")}
text = lambda way: open(f"{base}.{way}.log").read()
none, asy = steps("none"), steps("async")
saved = {int(s): float(t) for s, t in re.findall(r"step-(\d+) \(saved in ([0-9.]+) s\)", text("sync"))}
held = {int(s): float(t) for s, t in re.findall(r"step-(\d+): writing in the background "
                                                 r"\(training held ([0-9.]+) s\)", text("async"))}
load = float(re.search(r"loaded in ([0-9.]+) s", text("load")).group(1))
params = float(re.search(r"\| ([0-9.]+)M parameters", text("none")).group(1)) * 1e6
end = float(re.search(r"waited ([0-9.]+) s at the end", text("async")).group(1))
save, copy = statistics.mean(saved.values()), held[min(held)]
held_async = (sum(held.values()) + end) / len(held)
ratio = statistics.median(asy.values()) / statistics.median(none.values())
print(f"| {params / 1e6:.1f} M | {np} | {layout} | {int(size) / 2**20:.1f} MiB | {save:.2f} | "
      f"{load:.2f} | {save:.2f} / {held_async:.2f} | {copy:.2f} | {ratio:.2f} | "
      f"{statistics.median(none.values()):.2f} | {cpu} |")
EOF
        done
    done
}

# ---- part 2: planned ----------------------------------------------------------------------
layout_args() {
    case $1 in
    off) echo "--plugin.type=ddp --plugin.precision=fp32 --plugin.ac=none --plugin.offload=none" ;;
    on)  echo "--plugin.type=zero3 --plugin.precision=bf16 --plugin.ac=full --plugin.offload=disk \
--plugin.offload_dir=$WORK/offload" ;;
    esac
}
candidates() { # as bench/run_largest.sh
    for C in 1024 1280 1536 1792 2048 2304 2560 3072 3584 4096; do
        for L in 8 12 16 20 24 28 32 36 40 48 56 64; do
            echo "$L $C $(( 12 * L * C * C + 13 * L * C + (50257 + 256) * C + 2 * C ))"
        done
    done | sort -k3 -n
}
plan_json() { # layout L C extra... -> the --explain JSON of the larger rank (rank 0 here)
    local layout=$1 L=$2 C=$3; shift 3
    "$DTRAIN" plan --config "$REPO/configs/default.ini" --world 2 --explain \
        $(shape_args "$L" "$C") --model.max_seq_len=256 --train.seq_len=256 --train.batch_size=2 \
        --train.micro_batch_size=1 --train.steps=2 $(layout_args "$layout") "$@" 2>/dev/null
}
part2() {
    echo "| toolkit | checkpoint | largest that trains and checkpoints in 2 x $CAP GiB | parameters | predicted peak per rank | of which the checkpoint's temporaries |"
    echo "|---|---|---|---:|---:|---:|"
    for layout in off on; do
        local rows=$WORK/plan-$layout.txt
        : >"$rows"
        while read -r L C P; do
            # total without checkpoints, with a sync and an async save, and the arena sizes
            local none sync asy
            none=$(plan_json "$layout" "$L" "$C" --checkpoint.every=0) || continue
            sync=$(plan_json "$layout" "$L" "$C" --checkpoint.every=1) || continue
            asy=$(plan_json "$layout" "$L" "$C" --checkpoint.every=1 --checkpoint.async=true) || continue
            $PY - "$layout" "$L" "$C" "$P" <<EOF >>"$rows"
import json, sys
layout, L, C, P = sys.argv[1:]
none, sync, asy = (json.loads(x) for x in ('''$none''', '''$sync''', '''$asy'''))
n = none["local_floats"]            # dp only: the local arena is the whole model (tp 1)
own = (n + 1) // 2 + 15 & ~15        # a rank's ZeRO partition (2 ranks)
base = none["predicted"]["total"]
extra = {"whole": 12 * n + 8 * n,
         "sharded v1": (8 << 20) + (8 * own if layout == "on" else 0),
         "sync": sync["predicted"]["total"] - base,
         "async": asy["predicted"]["total"] - base}
for way, e in extra.items():
    print(way.replace(" ", "_"), L, C, P, base + e, e)
EOF
        done < <(candidates)
        for way in whole sharded_v1 sync async; do
            $PY - "$rows" "$way" "$layout" "$CAP" <<'EOF'
import sys
rows, way, layout, cap = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]) * 2**30
best = None
for line in open(rows):
    w, L, C, P, total, extra = line.split()
    if w == way and float(total) <= cap and (best is None or int(P) > int(best[3])):
        best = (w, L, C, P, total, extra)
g = lambda b: f"{float(b) / 2**30:.2f} GiB"
if best:
    w, L, C, P, total, extra = best
    print(f"| {layout} | {way.replace('_', ' ')} | L{L} C{C} H{int(C) // 64} | {int(P) / 1e9:.2f} B | "
          f"{g(total)} | {g(extra)} |")
else:
    print(f"| {layout} | {way.replace('_', ' ')} | none of the candidates | | | |")
EOF
        done
    done
}

for part in $PARTS; do
    log "part $part"
    part$part
done
log "done; logs in $WORK"

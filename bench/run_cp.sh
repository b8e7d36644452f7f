#!/usr/bin/env bash
# Context parallelism (ring attention, plugin.cp_size) on a GPT-2 124M (not a test), 4 ranks:
#  1. The longest sequence that fits a per-rank budget (CP_MEM), doubling seq_len under the
#     planner's exact memory model, with the activation memory per rank at each length: on 4
#     ranks the ring (cp 4) against Ulysses (sp 4); on 16 ranks Ulysses inside a ring (sp 4 x
#     cp 4, one sequence split 16 ways) against the most Ulysses alone can split this 12-head
#     model over 16 ranks (sp 4 x dp 4).
#  2. One training step at the ring's longest length: the measured peak against the plan.
#  3. Step time and exposed communication at CP_SEQ tokens: zigzag and contiguous rings and
#     Ulysses side by side, alternating, the median of steps 2..CP_STEPS of each run.
#
#   bash bench/run_cp.sh
#
# Knobs (environment): CP_DTRAIN=PATH (default build/dtrain), CP_WORK=DIR, CP_MEM=2.5GiB,
# CP_SEQ=4096, CP_STEPS=4, CP_ROUNDS=2.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
DTRAIN=${CP_DTRAIN:-$REPO/build/dtrain}
WORK=${CP_WORK:-$(mktemp -d /tmp/dtrain-cp.XXXXXX)}
MEM=${CP_MEM:-2.5GiB} SEQ=${CP_SEQ:-4096} STEPS=${CP_STEPS:-4} ROUNDS=${CP_ROUNDS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
mkdir -p "$WORK"
cd "$WORK"
[ -f tok.bin ] || $PY "$REPO/bench/make_tokens.py" --out tok.bin --vocab 50257 --count 600000 --seed 1
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); dtrain: $(git -C "$REPO" rev-parse --short HEAD)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc --all) cores"
echo "GPT-2 124M (12 layers, 12 heads, vocabulary 50257), fp32, batch 1, ZeRO-2, 4 ranks x 1 thread"
common=(--config "$REPO/configs/gpt2-124m.ini" --plugin.type=hybrid --plugin.zero_stage=2
        --train.batch_size=1 --train.micro_batch_size=0 --plugin.precision=fp32)
plan() { # WORLD T LAYOUT-ARGS...: "total activations" per rank, bytes, from the planner
    local world=$1 T=$2; shift 2
    "$DTRAIN" plan --world "$world" "${common[@]}" --train.seq_len="$T" --model.max_seq_len="$T" \
        --explain "$@" | $PY -c 'import json,sys
p=json.load(sys.stdin)["predicted"]; print(p["total"], p["activations"])'
}
budget=$($PY -c 'import sys; s=sys.argv[1]; u={"GiB":2**30,"MiB":2**20}; print(int(float(s[:-3])*u[s[-3:]]))' "$MEM")
longest() { # TITLE WORLD "A-ARGS" "B-ARGS": the doubling table and the longest of each
    echo
    echo "## 1$1. Longest sequence within $MEM per rank, $2 ranks (planner; doubling from 1024)"
    echo "| seq_len | $3 total GiB | acts GiB | $4 total GiB | acts GiB |"
    echo "|---|---|---|---|---|"
    local best_a=0 best_b=0 T at aa bt ba
    for ((T = 1024; T <= 1048576; T *= 2)); do
        # shellcheck disable=SC2086
        read -r at aa < <(plan "$2" "$T" $3)
        # shellcheck disable=SC2086
        read -r bt ba < <(plan "$2" "$T" $4)
        $PY -c 'import sys; a=[int(x)/2**30 for x in sys.argv[2:]]; print("| %s | %.2f | %.2f | %.2f | %.2f |" % (sys.argv[1], *a))' "$T" "$at" "$aa" "$bt" "$ba"
        [ "$at" -le "$budget" ] && best_a=$T
        [ "$bt" -le "$budget" ] && best_b=$T
        [ "$at" -gt "$budget" ] && [ "$bt" -gt "$budget" ] && break
    done
    echo "longest within $MEM: [$3] $best_a tokens, [$4] $best_b tokens"
    best_cp=$best_a
}
longest b 16 "--plugin.sp_size=4 --plugin.cp_size=4" "--plugin.sp_size=4 --train.batch_size=4"
longest a 4 "--plugin.cp_size=4" "--plugin.sp_size=4"

echo
echo "## 2. One step at the ring's longest ($best_cp tokens): measured peak against the plan"
mpirun --oversubscribe -np 4 "$DTRAIN" train "${common[@]}" --data.train=tok.bin --data.val= \
    --train.seq_len="$best_cp" --model.max_seq_len="$best_cp" --train.steps=1 \
    --train.eval_every=0 --train.export= --checkpoint.every=0 --plugin.cp_size=4 \
    --train.mem_report=long.mem.json --train.metrics=long.jsonl > long.log 2>&1
read -r ct ca < <(plan 4 "$best_cp" --plugin.cp_size=4)
$PY - "$ct" long.mem.json <<'EOF'
import json, sys
want = int(sys.argv[1]); m = json.load(open(sys.argv[2]))
got = m["peak"]["total"] if "total" in m["peak"] else sum(m["peak"].values())
print(f"rank 0 peak {got / 2**30:.3f} GiB measured, {want / 2**30:.3f} GiB planned (ratio {got / want:.6f})")
EOF

echo
echo "## 3. Step time at $SEQ tokens (median of steps 2..$STEPS; rounds alternate)"
run() { # NAME ARGS...
    local name=$1; shift
    mpirun --oversubscribe -np 4 "$DTRAIN" train "${common[@]}" --data.train=tok.bin --data.val= \
        --train.seq_len="$SEQ" --model.max_seq_len="$SEQ" --train.steps="$STEPS" \
        --train.eval_every=0 --train.export= --checkpoint.every=0 --train.metrics="$name.jsonl" \
        "$@" > "$name.log" 2>&1
}
stat() { # FILE: median step_ms and exposed comm ms of steps 2..
    $PY -c 'import json,statistics,sys
rows=[json.loads(l) for l in open(sys.argv[1]) if "step_ms" in l][1:]
print("%.0f %.0f %.1f" % (statistics.median(r["step_ms"] for r in rows),
      statistics.median(r["comm_exposed_ms"] for r in rows), rows[-1]["comm_bytes_cp"] / 2**20))' "$1"
}
echo "| round | layout | step ms | exposed comm ms | ring MiB sent a step |"
echo "|---|---|---|---|---|"
for ((r = 1; r <= ROUNDS; r++)); do
    for lay in "zigzag|--plugin.cp_size=4" "contiguous|--plugin.cp_size=4 --plugin.cp_split=contiguous" \
               "ulysses|--plugin.sp_size=4"; do
        name=${lay%%|*}
        # shellcheck disable=SC2086
        run "$name" ${lay#*|}
        read -r ms ex mib < <(stat "$name.jsonl")
        echo "| $r | $name | $ms | $ex | $mib |"
    done
done

#!/usr/bin/env bash
# Pipeline boundaries whole or in tensor-parallel pieces (plugin.pp_scatter), between two
# "machines" (not a test): two network namespaces made by netns-cluster (shared/tools/ beside
# the repository, or SCATTER_NETNS=PATH), each holding one stage of a pp 2 x tp 2 run, their
# link throttled to SCATTER_RATE each way (tc's token bucket on each host's interface); the
# two tp ranks of a stage talk inside their host. Runs with and without pieces alternate;
# prints each run's median step time (steps 3-8) and the bytes its rank 0 sent to the other
# stage in the last step and its last loss (the same with and without pieces), then the
# medians. Needs root and iproute2.
#
#   bash bench/run_pp_scatter.sh
#
# Knobs: SCATTER_DTRAIN=PATH (default build/dtrain), SCATTER_RATE (default 200mbit),
# SCATTER_ROUNDS (default 3), SCATTER_WORK=DIR (default a new /tmp folder).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
DTRAIN=$(readlink -f "${SCATTER_DTRAIN:-$REPO/build/dtrain}")
TOOL=$(readlink -f "${SCATTER_NETNS:-$REPO/../shared/tools/netns-cluster}")
RATE=${SCATTER_RATE:-200mbit}
ROUNDS=${SCATTER_ROUNDS:-3}
WORK=$(readlink -f "${SCATTER_WORK:-$(mktemp -d /tmp/dtrain-scatter.XXXXXX)}")
mkdir -p "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
[ -x "$TOOL" ] || { echo "netns-cluster not found at $TOOL (set SCATTER_NETNS)" >&2; exit 1; }

trap '"$TOOL" down 2> /dev/null || true' EXIT
"$TOOL" down 2> /dev/null || true
"$TOOL" up 2
for h in dt0 dt1; do
    ip netns exec "$h" tc qdisc replace dev eth0 root tbf rate "$RATE" burst 64kb latency 400ms
done
printf 'dt0 slots=2\ndt1 slots=2\n' > "$WORK/hosts"
read -r -a net <<< "$("$TOOL" mpiflags)"
# the namespaces share this machine's hostname and /tmp: each host's daemon gets a hostname
# of its own, or both make the same Open MPI session folder at once
cat > "$WORK/agent" <<EOF
#!/bin/sh
exec unshare --uts sh -c 'hostname "\$2" && exec "\$0" "\$@"' "$TOOL" "\$@"
EOF
chmod +x "$WORK/agent"
for i in "${!net[@]}"; do
    [ "${net[$i]}" = plm_rsh_agent ] && net[i + 1]=$WORK/agent
done

[ -f "$WORK/tok.bin" ] ||
    $PY "$REPO/bench/make_tokens.py" --out "$WORK/tok.bin" --vocab 512 --count 400000 --seed 1
args=(--model.arch=gpt2 --model.n_layer=4 --model.n_head=6 --model.n_embd=384
      --data.train="$WORK/tok.bin" --data.val= --train.seq_len=256 --model.max_seq_len=256
      --model.vocab_size=512 --train.batch_size=8 --train.steps=8 --train.log_every=1
      --train.eval_every=0 --checkpoint.every=0 --train.sample_tokens=0 --train.export=
      --train.micro_batch_size=0 --plugin.type=hybrid --plugin.tp_size=2 --plugin.pp_size=2
      --plugin.microbatches=8)
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); dtrain: $(git -C "$REPO" rev-parse --short HEAD)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), $(nproc --all) cores"
    echo "GPT-2 4 x 384, T 256, batch 8 in 8 micro-batches, pp 2 (a host each) x tp 2 (inside a host), 1F1B, link $RATE each way"
}
run() { # $1: name, $2: pp_scatter
    mpirun --hostfile "$WORK/hosts" -np 4 "${net[@]}" -x OMP_NUM_THREADS -x OMP_WAIT_POLICY \
        "$DTRAIN" train "${args[@]}" --plugin.pp_scatter="$2" --train.metrics="$WORK/$1.jsonl" \
        > "$WORK/$1.log" 2>&1 || { tail "$WORK/$1.log" >&2; exit 1; }
    $PY - "$WORK/$1.jsonl" "$1" <<'PY'
import json, statistics, sys
m = [json.loads(l) for l in open(sys.argv[1])]
print(f"| {sys.argv[2]} | {statistics.median(s['step_ms'] for s in m[2:8]):.1f} | "
      f"{m[-1]['comm_bytes_pp']} | {m[-1]['comm_bytes_tp']} | {m[-1]['loss']:.6f} |")
PY
}
echo "| run | step ms (median of steps 3-8) | bytes to the other stage (rank 0, last step) | bytes in the tp group | last loss |"
echo "|---|---:|---:|---:|---:|"
for r in $(seq "$ROUNDS"); do
    run "whole$r" false | tee -a "$WORK/rows.md"
    run "pieces$r" true | tee -a "$WORK/rows.md"
done
$PY - "$WORK/rows.md" <<'PY'
import statistics, sys
rows = [l.strip().strip("|").split("|") for l in open(sys.argv[1])]
w = statistics.median(float(r[1]) for r in rows if r[0].strip().startswith("whole"))
p = statistics.median(float(r[1]) for r in rows if r[0].strip().startswith("pieces"))
print(f"\nmedian step: whole {w:.1f} ms, pieces {p:.1f} ms, pieces / whole {p / w:.3f}")
PY

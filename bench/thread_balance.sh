#!/usr/bin/env bash
# Which kernels of a training step run on every OpenMP thread (issue 12 item 3), from a perf
# profile rather than from timings, so it holds on a loaded machine: a kernel that scales has
# its samples spread over the threads; one that does not has them on the main thread only.
# Not a test.
#
#   bash bench/thread_balance.sh [BUILD_DIR] [fp32|bf16] [124m|small]
#
# Runs 2 steps at OMP_NUM_THREADS=2 under `perf record`, keeps the samples of the last step
# (the window of its step_ms before the last sample: nothing runs after it), and prints per
# symbol its share of the step's samples and how they split between the main thread and the
# others.
# Symbols at >= 1% of the step with under a quarter of their samples off the main thread are
# marked "SERIAL". oneDNN's JIT kernels have no symbol: "[jit]".
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$REPO/build} PREC=${2:-fp32} SHAPE=${3:-124m}
WORK=$(mktemp -d /tmp/dtrain-thr.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
case $SHAPE in
124m) A="--model.n_layer=12 --model.n_head=12 --model.n_embd=768 --model.vocab_size=50257
         --model.max_seq_len=1024 --train.batch_size=4" V=50257 ;;
small) A="--model.n_layer=6 --model.n_head=6 --model.n_embd=384 --model.vocab_size=256
          --model.max_seq_len=256 --train.batch_size=8" V=256 ;;
*) echo "unknown shape $SHAPE" >&2; exit 2 ;;
esac
/usr/bin/python3 "$REPO/bench/make_tokens.py" --out "$WORK/tok.bin" --vocab $V --count 100000
# shellcheck disable=SC2086
OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE perf record -q -F 999 -o "$WORK/perf.data" -- \
    "$BUILD/dtrain" train --model.arch=gpt2 $A --train.micro_batch_size=0 --train.seq_len=256 \
    --train.steps=2 --train.log_every=1 --train.eval_every=0 --checkpoint.every=0 \
    --train.sample_tokens=0 --train.export="" --data.train="$WORK/tok.bin" --data.val="" \
    --plugin.precision="$PREC" --train.metrics="$WORK/m.jsonl" >"$WORK/log" 2>&1 ||
    { tail -5 "$WORK/log" >&2; exit 1; }
step_ms=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["step_ms"])' "$WORK/m.jsonl")
echo "$SHAPE $PREC, 2 threads, the last of 2 steps ($step_ms ms): share of samples, main / other threads"
perf script -i "$WORK/perf.data" -F tid,time,ip,sym 2>/dev/null >"$WORK/samples.txt"
last=$(tail -1 "$WORK/samples.txt" | awk '{sub(":", "", $2); print $2}')
awk -v from="$last" -v ms="$step_ms" '
    NR == 1 { main = $1; from -= ms / 1000 }
    { t = $2; sub(":", "", t); if (t + 0 < from) next
      s = (NF < 4 || $4 == "[unknown]") ? "[jit]" : $4
      n[s]++; tot++; if ($1 == main) m[s]++; else w[s]++ }
    END { for (k in n) if (n[k] >= 0.002 * tot)
              printf "%5.1f%%  main %6d  other %6d  %s%s\n", 100 * n[k] / tot, m[k], w[k], k,
                     (n[k] >= 0.01 * tot && w[k] < 0.25 * n[k]) ? "   SERIAL" : "" }' \
    "$WORK/samples.txt" | sort -rn

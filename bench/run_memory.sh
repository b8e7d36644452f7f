#!/usr/bin/env bash
# Memory toolkit benchmark (issue 9, memory half). Not a test. One model (GPT-2 124M: L12 H12
# C768 V50257, T 256, 4 sequences per rank), one training step per row on 2 ranks (mpirun -np
# 2, one thread each), over a pruned grid of the memory levers: plugin.ac none / selective /
# full x precision fp32 / bf16 / fp16 x ZeRO 0 / 3 x act_compress none / int8 x offload none /
# disk. Each row prints rank 0's measured per-category peaks (the accountant's, from
# train.mem_report) beside the planner's prediction of them (plan/memory.c, written into the
# same report), and the worst predicted/measured ratio over every category of both ranks.
# Memory is deterministic: the load of the machine does not change a byte, nothing is timed.
#
#   bash bench/run_memory.sh
#
# Knobs (environment):
#   MEMB_REV=HEAD        build dtrain from this git revision (git archive snapshot); MEMB_REV=tree
#                        builds the working tree as it is
#   MEMB_DTRAIN=PATH     use this dtrain binary instead of building one (COMMIT: MEMB_COMMIT)
#   MEMB_WORK=DIR        scratch folder (default: a new /tmp/dtrain-memory.XXXXXX)
#   MEMB_ROWS=all        or a space-separated list of row names to run
# Output: a markdown table on stdout; mem reports and logs under $MEMB_WORK.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
WORK=${MEMB_WORK:-$(mktemp -d /tmp/dtrain-memory.XXXXXX)}
mkdir -p "$WORK"
log() { echo "[memory $(date +%T)] $*" >&2; }

if [ -n "${MEMB_DTRAIN:-}" ]; then
    DTRAIN=$MEMB_DTRAIN
    COMMIT=${MEMB_COMMIT:-$(git -C "$REPO" rev-parse --short HEAD)}
else
    . "$REPO/bench/lib.sh"
    bench_build "${MEMB_REV:-HEAD}" dtrain
    DTRAIN=$BUILD/dtrain
fi
$PY "$REPO/bench/make_tokens.py" --out "$WORK/tok.bin" --vocab 50257 --count 100000

export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
shape=(--model.arch=gpt2 --model.n_layer=12 --model.n_head=12 --model.n_embd=768
       --model.vocab_size=50257 --model.max_seq_len=1024 --train.seq_len=256
       --train.batch_size=8 --train.micro_batch_size=0 --data.train="$WORK/tok.bin"
       --data.val="" --train.steps=1 --train.log_every=1 --train.eval_every=0
       --train.sample_tokens=0 --train.export="" --checkpoint.every=0)

# name | the levers (dtrain flags)
ROWS=(
    "z0_fp32|--plugin.precision=fp32"
    "z0_fp32_sel|--plugin.precision=fp32 --plugin.ac=selective"
    "z0_fp32_full|--plugin.precision=fp32 --plugin.ac=full"
    "z0_bf16|--plugin.precision=bf16"
    "z0_bf16_sel|--plugin.precision=bf16 --plugin.ac=selective"
    "z0_bf16_full|--plugin.precision=bf16 --plugin.ac=full"
    "z0_fp16|--plugin.precision=fp16"
    "z0_fp16_sel|--plugin.precision=fp16 --plugin.ac=selective"
    "z0_fp16_full|--plugin.precision=fp16 --plugin.ac=full"
    "z0_fp32_int8|--plugin.precision=fp32 --plugin.act_compress=int8"
    "z0_fp32_sel_int8|--plugin.precision=fp32 --plugin.ac=selective --plugin.act_compress=int8"
    "z0_bf16_sel_int8|--plugin.precision=bf16 --plugin.ac=selective --plugin.act_compress=int8"
    "z0_fp32_offload|--plugin.precision=fp32 --plugin.offload=disk"
    "z3_fp32|--plugin.precision=fp32 --plugin.zero_stage=3"
    "z3_fp32_sel|--plugin.precision=fp32 --plugin.zero_stage=3 --plugin.ac=selective"
    "z3_fp32_full|--plugin.precision=fp32 --plugin.zero_stage=3 --plugin.ac=full"
    "z3_bf16|--plugin.precision=bf16 --plugin.zero_stage=3"
    "z3_bf16_full|--plugin.precision=bf16 --plugin.zero_stage=3 --plugin.ac=full"
    "z3_fp16_sel|--plugin.precision=fp16 --plugin.zero_stage=3 --plugin.ac=selective"
    "z3_bf16_sel_int8|--plugin.precision=bf16 --plugin.zero_stage=3 --plugin.ac=selective --plugin.act_compress=int8"
    "z3_fp32_offload|--plugin.precision=fp32 --plugin.zero_stage=3 --plugin.offload=disk"
    "z3_bf16_full_offload|--plugin.precision=bf16 --plugin.zero_stage=3 --plugin.ac=full --plugin.offload=disk"
    "z3_bf16_sel_int8_offload|--plugin.precision=bf16 --plugin.zero_stage=3 --plugin.ac=selective --plugin.act_compress=int8 --plugin.offload=disk"
)

done_rows=()
for row in "${ROWS[@]}"; do
    name=${row%%|*} flags=${row#*|}
    if [ "${MEMB_ROWS:-all}" != all ] && [[ " $MEMB_ROWS " != *" $name "* ]]; then
        continue
    fi
    zero=()
    [[ $flags == *zero_stage=3* ]] && zero=(--plugin.type=hybrid)
    log "$name"
    # shellcheck disable=SC2086
    mpirun --oversubscribe -np 2 "$DTRAIN" train "${shape[@]}" "${zero[@]}" $flags \
        --plugin.offload_dir="$WORK/offload" --train.mem_report="$WORK/$name.mem.json" \
        > "$WORK/$name.log" 2>&1 || { log "$name failed"; tail -5 "$WORK/$name.log" >&2; exit 1; }
    done_rows+=("$name|$flags")
done

echo "Memory per rank, GPT-2 124M (L12 C768 V50257), T 256, 4 sequences per rank, 2 ranks, one step."
echo "Commit $COMMIT, $(date -u +%F), CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')."
echo "Rank 0's peak per category in MiB as measured (a cell shows the prediction in parentheses"
echo "only where it differs); ratio: the worst predicted/measured over every category of both ranks."
echo
$PY - "$WORK" "${done_rows[@]}" <<'EOF'
import json, sys
work, rows = sys.argv[1], sys.argv[2:]
cats = ["params", "grads", "optim", "activations", "comm", "temp", "total"]
mib = lambda b: f"{b / 2**20:.1f}"
print("| ZeRO | precision | ac | act_compress | offload | " + " | ".join(cats) +
      " | predicted total | ratio |")
print("|" + "---|" * (len(cats) + 7))
for row in rows:
    name, flags = row.split("|", 1)
    opt = dict(f[2:].split("=", 1) for f in flags.split())
    rep = json.load(open(f"{work}/{name}.mem.json"))
    r0, worst = rep["per_rank"][0], 1.0
    for r in rep["per_rank"]:
        for c in cats:
            m, p = r[c], r["predicted"][c]
            q = p / m if m else (1.0 if p == 0 else float("inf"))
            worst = q if abs(q - 1) > abs(worst - 1) else worst
    cells = [mib(r0[c]) + ("" if r0[c] == r0["predicted"][c] else
                           f" ({mib(r0['predicted'][c])})") for c in cats]
    print(f"| {opt.get('plugin.zero_stage', '0')} | {opt['plugin.precision']} | "
          f"{opt.get('plugin.ac', 'none')} | {opt.get('plugin.act_compress', 'none')} | "
          f"{opt.get('plugin.offload', 'none')} | " + " | ".join(cells) +
          f" | {mib(r0['predicted']['total'])} | {worst:.6f} |")
EOF

#!/usr/bin/env bash
# How much of the gradient all-reduce the trainer's overlap hides, by bucket size, against the
# time model (not a test): the accuracy bench's GPT-2 (4 blocks of 384, vocabulary 512, T 256,
# batch 8) on dp 2 ZeRO 0 bf16, 2 ranks x 1 thread, with plugin.overlap off and on with
# buckets of 25 (the default), 4 and 1 MB. Runs alternate, ROUNDS of each, so all see the same
# machine; each run's median step_ms and comm_exposed_ms over steps 3-16, then the median of
# the runs. The model's figures for each setting come from one device: `dtrain plan --device
# this --show-device` measured once before the runs, its flags given to every plan, so the
# settings differ only by what the model says of them.
#
#   bash bench/run_buckets.sh
#
# Knobs (environment): BK_DTRAIN=PATH (default build/dtrain), BK_WORK=DIR, BK_ROUNDS=4.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
DTRAIN=${BK_DTRAIN:-$REPO/build/dtrain}
WORK=${BK_WORK:-$(mktemp -d /tmp/dtrain-buckets.XXXXXX)}
ROUNDS=${BK_ROUNDS:-4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
mkdir -p "$WORK"
[ -f "$WORK/tok.bin" ] ||
    $PY "$REPO/bench/make_tokens.py" --out "$WORK/tok.bin" --vocab 512 --count 400000 --seed 1
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); dtrain: $(git -C "$REPO" rev-parse --short HEAD)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), $(nproc --all) cores"

# shellcheck disable=SC2206 # word splitting of the argument lists is meant
BASE=(--model.arch=gpt2 --model.n_layer=4 --model.n_head=6 --model.n_embd=384
    --data.train="$WORK/tok.bin" --data.val= --train.seq_len=256 --model.max_seq_len=256
    --model.vocab_size=512 --train.batch_size=8 --train.micro_batch_size=0 --train.steps=16
    --train.log_every=1 --train.eval_every=0 --checkpoint.every=0 --train.sample_tokens=0
    --train.export= --plugin.type=ddp --plugin.precision=bf16)
SETTINGS=(off b25 b4 b1)
declare -A ARG=([off]="--plugin.overlap=false" [b25]="--plugin.bucket_mb=25"
    [b4]="--plugin.bucket_mb=4" [b1]="--plugin.bucket_mb=1")

# one device for every plan: the flags --show-device prints
read -r -a DEV < <("$DTRAIN" plan --world 2 --device this --show-device "${BASE[@]}" 2>/dev/null |
    grep -- '^--device')
echo "${DEV[*]}" > "$WORK/device.txt"
share='?'
for i in "${!DEV[@]}"; do [ "${DEV[$i]}" != --exposed-share ] || share=${DEV[$((i + 1))]}; done
echo "device: \`dtrain plan --device this --show-device\` once (in $WORK/device.txt), exposed share $share"
for s in "${SETTINGS[@]}"; do
    # shellcheck disable=SC2086
    "$DTRAIN" plan --world 2 "${DEV[@]}" --explain --json "${BASE[@]}" ${ARG[$s]} \
        > "$WORK/$s.plan.json"
done
for r in $(seq 1 "$ROUNDS"); do
    for s in "${SETTINGS[@]}"; do
        # shellcheck disable=SC2086
        mpirun --oversubscribe -np 2 "$DTRAIN" train "${BASE[@]}" ${ARG[$s]} \
            --train.metrics="$WORK/$s.$r.jsonl" > "$WORK/$s.$r.log" 2>&1
    done
done
$PY - "$WORK" "${SETTINGS[@]}" <<'EOF'
import glob, json, statistics as st, sys
work, settings = sys.argv[1], sys.argv[2:]
name = {"off": "overlap off", "b25": "25 MB", "b4": "4 MB", "b1": "1 MB"}
print("\n| | " + " | ".join(name[s] for s in settings) + " |")
print("|---|" + "---:|" * len(settings))
rows = {"step ms (median of the runs)": [], "the runs' steps": [], "comm_exposed_ms": [],
        "model: step ms": [], "model: exposed communication ms": []}
for s in settings:
    steps, comm = [], []
    for f in sorted(glob.glob(f"{work}/{s}.[0-9]*.jsonl")):
        r = [json.loads(l) for l in open(f) if l.strip()]
        r = [x for x in r if x.get("step", 0) >= 3]
        steps.append(st.median(x["step_ms"] for x in r))
        comm.append(st.median(x["comm_exposed_ms"] for x in r))
    p = json.load(open(f"{work}/{s}.plan.json"))
    rows["step ms (median of the runs)"].append(f"{st.median(steps):.1f}")
    rows["the runs' steps"].append(f"{min(steps):.1f}-{max(steps):.1f}")
    rows["comm_exposed_ms"].append(f"{st.median(comm):.1f}")
    rows["model: step ms"].append(f"{p['predicted']['step_ms']:.1f}")
    rows["model: exposed communication ms"].append(f"{p['exposed_comm_ms']:.1f}")
for k, v in rows.items():
    print(f"| {k} | " + " | ".join(v) + " |")
EOF

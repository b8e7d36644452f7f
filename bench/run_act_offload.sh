#!/usr/bin/env bash
# Activations on disk (plugin.act_offload = disk) on a GPT-2 124M at 4096 tokens (not a test):
# one process of AO_THREADS threads, batch 1, fp32, with the saved activations in memory and on
# disk, without checkpointing and with ac = full (where only the blocks' inputs are kept), in
# alternating rounds. Per run: the activation peak the accountant measured and the planner's
# figure, the median step time of steps 2..AO_STEPS, the I/O the run measured per step (bytes
# written and read, the I/O thread's busy time, and the time the computation waited: the
# exposed I/O), and the step time `dtrain plan --device this` predicts, with the disk rates
# it probed under the same folder (8 MiB records, fdatasync'd writes, reads after dropping the
# pages). The file goes through the page cache: with memory to spare the I/O thread's writes
# and reads run at memory speed, and the probed rates are what is left when they do not.
#
#   bash bench/run_act_offload.sh
#
# Knobs (environment): AO_DTRAIN=PATH (default build/dtrain), AO_WORK=DIR, AO_DIR=DIR (the
# act_offload_dir; default $AO_WORK/acts), AO_SEQ=4096, AO_STEPS=4, AO_ROUNDS=2, AO_THREADS=2.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
DTRAIN=${AO_DTRAIN:-$REPO/build/dtrain}
WORK=${AO_WORK:-$(mktemp -d /tmp/dtrain-act-offload.XXXXXX)}
DIR=${AO_DIR:-$WORK/acts}
SEQ=${AO_SEQ:-4096} STEPS=${AO_STEPS:-4} ROUNDS=${AO_ROUNDS:-2} THREADS=${AO_THREADS:-2}
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE
mkdir -p "$WORK"
cd "$WORK"
[ -f tok.bin ] || $PY "$REPO/bench/make_tokens.py" --out tok.bin --vocab 50257 --count 300000 --seed 1
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); dtrain: $(git -C "$REPO" rev-parse --short HEAD)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') ($(grep -qm1 avx512_bf16 /proc/cpuinfo && echo AVX-512-BF16 || echo no AVX-512-BF16)), $(nproc --all) cores"
echo "disk: act_offload_dir $DIR on $(df --output=source,fstype "$DIR" 2>/dev/null | tail -1 || df --output=source,fstype "$WORK" | tail -1)"
echo "GPT-2 124M (12 layers, 12 heads, vocabulary 50257), fp32, batch 1 x $SEQ tokens, 1 process x $THREADS threads"
common=(--config "$REPO/configs/gpt2-124m.ini" --train.batch_size=1 --train.micro_batch_size=0
        --train.seq_len="$SEQ" --model.max_seq_len="$SEQ" --plugin.precision=fp32)
disk=(--plugin.act_offload=disk --plugin.act_offload_dir="$DIR")

run() { # NAME ARGS...
    local name=$1; shift
    "$DTRAIN" train "${common[@]}" --data.train=tok.bin --data.val= --train.steps="$STEPS" \
        --train.eval_every=0 --train.export= --checkpoint.every=0 --train.metrics="$name.jsonl" \
        --train.mem_report="$name.mem.json" "$@" > "$name.log" 2>&1
}
plan() { # ARGS...: planned activation bytes, step ms, exposed I/O ms, disk write and read MB/s
    "$DTRAIN" plan --world 1 --device this "${common[@]}" --explain "$@" | $PY -c 'import json,sys
j=json.load(sys.stdin); p=j["predicted"]
print(p["activations"], p["step_ms"], j.get("act_disk_exposed_ms", 0), j.get("disk_write_mb_s", 0),
      j.get("disk_read_mb_s", 0))'
}
stat() { # NAME: measured activations, median step ms and per-step disk figures of steps 2..
    $PY - "$1" <<'PY'
import json, statistics, sys
n = sys.argv[1]
acts = json.load(open(n + ".mem.json"))["peak"]["activations"]
rows = [json.loads(l) for l in open(n + ".jsonl") if "step_ms" in l][1:]
med = lambda k: statistics.median(r.get(k, 0) for r in rows)
print(acts, "%.0f %.1f %.0f %.0f %.0f" % (med("step_ms"), med("act_disk_wait_ms"), med("act_disk_busy_ms"),
      med("act_disk_written") / 2**20, med("act_disk_read") / 2**20))
PY
}
echo
echo "| round | ac | activations | MiB measured | MiB planned | vs memory | step ms | vs memory | exposed I/O ms | planned exposed I/O ms | I/O busy ms | MiB written / read a step | planned step ms |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for ((r = 1; r <= ROUNDS; r++)); do
    for ac in none full; do
        for where in memory disk; do
            name=${ac}_${where}_$r
            extra=(--plugin.ac="$ac")
            [ "$where" = disk ] && extra+=("${disk[@]}")
            run "$name" "${extra[@]}"
            read -r acts ms wait busy wmib rmib < <(stat "$name")
            read -r pacts pms pio dw dr < <(plan "${extra[@]}")
            if [ "$where" = memory ]; then base_acts=$acts base_ms=$ms; fi
            $PY -c 'import sys
a = sys.argv[1:]
acts, ms, pacts, base_acts, base_ms = int(a[3]), float(a[4]), int(a[10]), int(a[12]), float(a[13])
io = "%s / %s" % (a[7], a[8]) if a[2] == "disk" else "-"
disk = a[2] == "disk"
print("| %s | %s | %s | %.1f | %.1f | %.1f%% | %.0f | %.3f | %s | %s | %s | %s | %.0f |" % (a[0], a[1], a[2],
      acts / 2**20, pacts / 2**20, 100 * acts / base_acts, ms, ms / base_ms,
      a[5] if disk else "-", a[14] if disk else "-", a[6] if disk else "-", io, float(a[11])))' \
                "$r" "$ac" "$where" "$acts" "$ms" "$wait" "$busy" "$wmib" "$rmib" "$dw" "$pacts" "$pms" \
                "$base_acts" "$base_ms" "$pio"
            [ "$where" = disk ] && probe="disk probed by dtrain plan under $DIR: write $dw MB/s (fdatasync'd), read $dr MB/s (pages dropped)"
        done
    done
done
echo
echo "$probe"

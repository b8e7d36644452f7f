#!/usr/bin/env bash
# Documents kept apart (data.doc_mask) on a GPT-2 124M (not a test): one process of DM_THREADS
# threads, batch DM_BATCH x DM_SEQ tokens, fp32, on random tokens with an end-of-document id
# every DM_DOC tokens (4 documents a sequence by default) and every DM_LONG tokens (about one a
# sequence, its ends falling anywhere in the rows), against the same run without doc_mask, in
# alternating rounds. Per run: the median
# step time of steps 2..DM_STEPS, its ratio to the unmasked run of the same round, and the
# ratio `dtrain plan` predicts (its attention share of the documents' tiles) on this machine
# as probed once (`--device this --show-device`), so every prediction sees the same rates.
#
#   bash bench/run_doc_mask.sh
#
# Knobs (environment): DM_DTRAIN=PATH (default build/dtrain), DM_WORK=DIR, DM_SEQ=1024,
# DM_DOC=256, DM_LONG=1000, DM_BATCH=4, DM_STEPS=4, DM_ROUNDS=2, DM_THREADS=2, DM_PRECISION=fp32.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
DTRAIN=${DM_DTRAIN:-$REPO/build/dtrain}
WORK=${DM_WORK:-$(mktemp -d /tmp/dtrain-doc-mask.XXXXXX)}
SEQ=${DM_SEQ:-1024} DOC=${DM_DOC:-256} LONG=${DM_LONG:-1000} BATCH=${DM_BATCH:-4} STEPS=${DM_STEPS:-4}
ROUNDS=${DM_ROUNDS:-2} THREADS=${DM_THREADS:-2} PREC=${DM_PRECISION:-fp32}
EOT=50256
export OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=PASSIVE
mkdir -p "$WORK"
cd "$WORK"
for len in "$DOC" "$LONG"; do
    [ -f "docs$len.bin" ] || $PY "$REPO/bench/make_tokens.py" --out "docs$len.bin" --vocab 50257 \
        --count $((BATCH * SEQ * (STEPS + 1) + 1)) --seed 1 --eot $EOT --doc-len "$len"
done
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); dtrain: $(git -C "$REPO" rev-parse --short HEAD)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') ($(grep -qm1 avx512_bf16 /proc/cpuinfo && echo AVX-512-BF16 || echo no AVX-512-BF16)), $(nproc --all) cores"
echo "GPT-2 124M, $PREC, batch $BATCH x $SEQ tokens, 1 process x $THREADS threads"
common=(--config "$REPO/configs/gpt2-124m.ini" --train.batch_size="$BATCH" --train.micro_batch_size=0
        --train.seq_len="$SEQ" --model.max_seq_len="$SEQ" --plugin.precision="$PREC")

run() { # NAME ARGS...: the median step ms of steps 2..
    local name=$1; shift
    "$DTRAIN" train "${common[@]}" --data.val= --train.steps="$STEPS" --train.eval_every=0 \
        --train.export= --checkpoint.every=0 --train.metrics="$name.jsonl" "$@" > "$name.log" 2>&1
    $PY -c 'import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "step_ms" in l][1:]
print("%.0f" % statistics.median(r["step_ms"] for r in rows))' "$name.jsonl"
}
read -r -a device < <("$DTRAIN" plan --device this --show-device --world 1 "${common[@]}")
echo "device as probed: ${device[*]}"
plan() { # ARGS...: predicted step ms and attention share
    "$DTRAIN" plan --world 1 "${device[@]}" "${common[@]}" --explain "$@" | $PY -c 'import json,sys
j=json.load(sys.stdin); print(j["predicted"]["step_ms"], j.get("attn_share", 1))'
}
read -r p_off _ < <(plan)
echo
echo "| round | documents a sequence | step ms | vs doc_mask off | planned vs off | planned attention share |"
echo "|---|---|---|---|---|---|"
for ((r = 1; r <= ROUNDS; r++)); do
    off=$(run "off_$r" --data.train=docs$DOC.bin)
    echo "| $r | doc_mask off | $off | 1 | 1 | 1 |"
    for len in "$DOC" "$LONG"; do
        ms=$(run "on${len}_$r" --data.train=docs$len.bin --data.doc_mask=true --data.eot_token=$EOT)
        read -r p_on share < <(plan --data.doc_mask=true --data.doc_len="$len" --data.eot_token=$EOT)
        $PY -c 'import sys
a = sys.argv[1:]
print("| %s | %.2f | %s | %.3f | %.3f | %.3f |" % (a[0], int(a[6]) / int(a[1]), a[2],
      float(a[2]) / float(a[3]), float(a[4]) / float(a[5]), float(a[7])))' \
            "$r" "$len" "$ms" "$off" "$p_on" "$p_off" "$SEQ" "$share"
    done
done

#!/bin/bash
# A weighted blend of token datasets (data.train = "0.7 A 0.3 B"; issue 22, item 2) trains
# the same in every layout: one process, dp2 x ZeRO-2 with micro-batches, tp2, pp2, within
# 1e-5 (per-step losses and exported weights); a run stopped at step 2 and resumed (in its own
# layout, and in another) continues as the straight run: bit-identical, and within 1e-5
# across the change. The shards are written by a small numpy writer of llm.c's format, not
# by dtrain.
#   blend.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
. "$src/tests/train/layout_lib.sh"
/usr/bin/python3 - <<'PY'
import numpy as np
def shard(path, ids):
    h = np.zeros(256, dtype=np.int32); h[0], h[1], h[2] = 20240520, 1, len(ids)
    with open(path, "wb") as f:
        f.write(h.tobytes()); f.write(np.asarray(ids, dtype=np.uint16).tobytes())
rng = np.random.default_rng(1)
shard("a.bin", rng.integers(0, 120, 20000))
shard("b.bin", rng.integers(120, 254, 9000))
PY
base=(--config "$src/configs/tiny-gpt2.ini" "--data.train=0.7 a.bin 0.3 b.bin" --data.val=
      --train.batch_size=8 --train.steps=4 --optim.eps=1e-6 --optim.warmup_steps=1
      --optim.lr=3e-3 --plugin.grad_clip=1.0 --model.vocab_size=254)
run ref 1 || { echo "reference run failed"; tail -5 ref.log; exit 1; }
same dp2_zero2_micro 2 --plugin.type=hybrid --plugin.zero_stage=2 --train.micro_batch_size=2
same tp2 2 --plugin.type=hybrid --plugin.tp_size=2
same pp2 2 --plugin.pp_size=2 --plugin.microbatches=4
# resume at step 2: its own layout bit-identical, another layout within 1e-5
ck=(--checkpoint.every=2 --checkpoint.keep=0)
run first 1 "${ck[@]}" --checkpoint.dir=c1 || failed=$((failed + 1))
rm -rf c1/step-4
cp -r c1 c2
run resumed 1 "${ck[@]}" --checkpoint.dir=c1 --checkpoint.resume=auto || failed=$((failed + 1))
check "blend resumed in its own layout is bit-identical" cmp ref.safetensors resumed.safetensors
run resumed_dp2 2 "${ck[@]}" --checkpoint.dir=c2 --checkpoint.resume=auto --plugin.type=zero2 \
    || failed=$((failed + 1))
check "blend resumed on dp2 follows the straight run" /usr/bin/python3 \
    "$src/tests/train/compare_runs.py" <(tail -n 2 ref.jsonl) ref.safetensors \
    <(tail -n 2 resumed_dp2.jsonl) resumed_dp2.safetensors 1e-5
# the weights matter: another blend of the same files trains differently
run other 1 "--data.train=0.3 a.bin 0.7 b.bin" || failed=$((failed + 1))
check "another weighting gives other weights" bash -c '! cmp -s ref.safetensors other.safetensors'
finish

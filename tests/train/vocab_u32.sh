#!/bin/bash
# A Llama-3-sized vocabulary (128256 ids) trains from Llama 3's kind of token shard (llm.c's
# format: magic 20240801, version 7, uint32 ids), written here by numpy as the format is
# published, not by dtrain: a 2-layer Llama on one process, and tp 2 (the vocabulary-parallel
# embedding and head), dp 2 with ZeRO-2, and pp 2 each equal to it within 1e-5.
#   vocab_u32.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
base=(--config "$src/configs/tiny-llama.ini" --data.train=u32.bin --data.val=
      --model.vocab_size=128256 --train.batch_size=4 --train.steps=3 --optim.eps=1e-6
      --optim.warmup_steps=1 --optim.lr=3e-3 --plugin.grad_clip=1.0)
. "$src/tests/train/layout_lib.sh"
/usr/bin/python3 - <<'PY' || { echo "writing the shard failed"; exit 1; }
import numpy as np
rng = np.random.default_rng(7)
ids = rng.integers(0, 128256, size=20000, dtype=np.uint32)
ids[::5] = rng.integers(65536, 128256, size=ids[::5].shape, dtype=np.uint32)  # past uint16
header = np.zeros(256, dtype=np.int32)
header[:3] = (20240801, 7, len(ids))
with open("u32.bin", "wb") as f:
    f.write(header.tobytes())
    f.write(ids.astype("<u4").tobytes())
PY
run ref 1 || { echo "reference run failed"; tail -5 ref.log; exit 1; }
check "the reference trains" grep -q '"step": 3' ref.jsonl
same tp2 2 --plugin.tp_size=2
same dp2_zero2 2 --plugin.type=zero2
same pp2 2 --plugin.pp_size=2 --plugin.microbatches=2
finish

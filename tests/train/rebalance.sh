#!/bin/bash
# Pipeline stage boundaries moved by measured time (train.rebalance_every): from a badly cut
# start (7 layers on one chunk and 1 on the other), the first check moves the boundaries
# (the log names the old and new counts), and the run still gives the single process's
# losses and weights (1e-5): GPT-2 pp2 1F1B, dp2 x pp2 ZeRO-1, ZeRO-3 from the other side,
# the interleaved schedule (4 chunks on 2 ranks), and the DiT. A run that moved, checkpointed
# and was resumed (starting from the old cut, loading shards written in the new one) ends
# with the straight run's weights and weight average bit for bit. rebalance_every without a
# pipeline and a margin out of range are refused.
#   rebalance.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
base=(--config "$src/configs/tiny-gpt2.ini" --data.train=data/train.bin --data.val=
      --model.n_layer=8 --model.n_embd=128 --train.batch_size=8 --train.seq_len=64
      --train.steps=6 --optim.eps=1e-6 --plugin.type=hybrid)
. "$src/tests/train/layout_lib.sh"
moved() { # NAME FROM: the log says the counts FROM moved
    check "$1 moved its boundaries" grep -q "layers per chunk $2 -> " "$1.log"
}
pp=(--plugin.pp_size=2 --train.rebalance_every=2)

run ref 1 || { echo "reference run failed"; cat ref.log; exit 1; }
same pp2 2 "${pp[@]}" --plugin.microbatches=4 --plugin.pp_layers=7,1 && moved pp2 7,1
same dp2pp2z1 4 "${pp[@]}" --plugin.zero_stage=1 --plugin.microbatches=2 --plugin.pp_layers=7,1 &&
    moved dp2pp2z1 7,1
same dp2pp2z3 4 "${pp[@]}" --plugin.zero_stage=3 --plugin.microbatches=2 --plugin.pp_layers=1,7 &&
    moved dp2pp2z3 1,7
same interleaved 2 "${pp[@]}" --plugin.pp_schedule=interleaved --plugin.pp_chunks=2 \
    --plugin.microbatches=4 --plugin.pp_layers=5,1,1,1 && moved interleaved 5,1,1,1

# the DiT
dit=(--config "$src/configs/tiny-dit.ini" --model.n_layer=6 --train.eval_every=0
     --optim.warmup_steps=1 --optim.lr=3e-3 --plugin.grad_clip=1.0)
ran dit_ref 1 "${dit[@]}" && ran dit_pp2 2 "${dit[@]}" "${pp[@]}" --plugin.microbatches=4 \
    --plugin.pp_layers=5,1 && moved dit_pp2 5,1 &&
    check "dit_pp2 equivalence" /usr/bin/python3 "$src/tests/train/compare_runs.py" \
        dit_ref.jsonl dit_ref.safetensors dit_pp2.jsonl dit_pp2.safetensors 1e-5

# a checkpoint written after a move, resumed from the old cut
ck=("${pp[@]}" --plugin.microbatches=4 --plugin.pp_layers=7,1 --train.ema_decay=0.9
    --checkpoint.dir=ck --checkpoint.every=3 --checkpoint.keep=0)
ran straight 2 "${ck[@]}" && moved straight 7,1 &&
    cut=$(grep -o 'layers per chunk 7,1 -> [0-9,]*' straight.log | head -1 | sed 's/.*-> //; s/,$//') &&
    check "the step folder's config names the split it was written in ($cut)" \
        grep -qF "pp_layers = \\\"$cut\\\"" ck/step-3/manifest.json && rm -rf ck/step-6 &&
    ran resumed 2 "${ck[@]}" --checkpoint.resume=auto &&
    check "resumed == straight (weights)" cmp resumed.safetensors straight.safetensors &&
    check "resumed == straight (average)" cmp resumed.ema.safetensors straight.ema.safetensors

# refused
refused() { # NAME WANT ARGS...
    local name=$1 want=$2; shift 2
    if run "$name" 1 "$@"; then echo "FAIL $name: ran"; failed=$((failed + 1)); return; fi
    check "$name says '$want'" grep -q -- "$want" "$name.log"
}
refused no_pipeline "runs no pipeline" --train.rebalance_every=2
refused margin "train.rebalance_margin=-1" --train.rebalance_margin=-1
finish

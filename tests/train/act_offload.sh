#!/bin/bash
# Activations on disk (plugin.act_offload = disk) change where they live, never results: the
# per-step losses and exported weights are the same bits as the same layout keeping them in
# memory, on one process (fp32, bf16, ac=full, ac=selective, int8 storage, several
# micro-batches) and under tp2, tp2 split_gather, sp2 (Ulysses), cp2 (ring), dp2 x ZeRO-3,
# pp2 1F1B, pp2 ZB-H1 (the W pass reads the sets again), pp2 interleaved and
# pp2 x dp2 x ZeRO-2. The activation peak goes down; evaluation writes nothing (every step
# of a run evaluating every second step writes the same bytes); no file is left in the folder; a
# folder that cannot be written and the DiT are refused on every rank.
#   act_offload.sh DTRAIN SRC_DIR ARCH
dtrain=$1 src=$2 arch=$3
base=(--config "$src/configs/tiny-$arch.ini" --data.train=data/train.bin --train.batch_size=8
      --train.steps=3 --optim.eps=1e-6 --optim.warmup_steps=1 --optim.lr=3e-3
      --plugin.grad_clip=1.0 --model.vocab_size=254 --model.n_layer=4)
. "$src/tests/train/layout_lib.sh"
disk=(--plugin.act_offload=disk --plugin.act_offload_dir=acts)

acts() { # peak activation bytes of a run
    /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak"]["activations"])' "$1.mem.json"
}

# NAME NP ARGS...: the layout in memory, then on disk (bit-identical, less activation memory)
both() {
    local name=$1 np=$2; shift 2
    ran "$name" "$np" "$@" || return
    ran "${name}_disk" "$np" "$@" "${disk[@]}" || return
    identical "${name}_disk" "$name"
    local mem got
    mem=$(acts "$name") got=$(acts "${name}_disk")
    check "$name activations on disk $got < $mem" test "$got" -lt "$mem"
}
both one 1
both one_bf16 1 --plugin.precision=bf16
both one_full 1 --plugin.ac=full --model.n_layer=8 # inputs only: 9 positions vs 2 kept, 2 passing, 2 frames
both one_sel 1 --plugin.ac=selective --plugin.ac_every=2
both one_int8 1 --plugin.act_compress=int8
both one_micro 1 --train.micro_batch_size=2
both tp2 2 --plugin.tp_size=2
both tp2_sg 2 --plugin.tp_size=2 --plugin.sp_mode=split_gather
both sp2 2 --plugin.sp_size=2
both cp2 2 --plugin.cp_size=2 --train.seq_len=64
both dp2_zero3 2 --plugin.type=zero3 --train.micro_batch_size=2
both pp2_1f1b 2 --plugin.pp_size=2 --plugin.microbatches=4 --model.n_layer=6
both pp2_zbh1 2 --plugin.pp_size=2 --plugin.pp_schedule=zbh1 --plugin.microbatches=4 \
    --model.n_layer=6
both pp2_interleaved 2 --plugin.pp_size=2 --plugin.pp_schedule=interleaved \
    --plugin.pp_chunks=2 --plugin.microbatches=2 --model.n_layer=8
both pp2_dp2_zero2 4 --plugin.pp_size=2 --plugin.type=hybrid --plugin.zero_stage=2 \
    --plugin.microbatches=2 --model.n_layer=6
# evaluation forwards write nothing: with an evaluation every second step, every step writes the
# same bytes, and the validation losses equal the in-memory run's
ev=(--data.val=data/val.bin --train.eval_every=2 --train.eval_batches=2)
both eval 1 "${ev[@]}"
check "evaluation writes nothing to the activation file" /usr/bin/python3 - eval_disk.jsonl eval.jsonl <<'PY'
import json, sys
disk, mem = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
written = {r["act_disk_written"] for r in disk}
assert len(written) == 1 and written != {0}, f"bytes written per step differ: {sorted(written)}"
vals = [r.get("val_loss") for r in disk]
assert any(v is not None for v in vals), "no step evaluated"
assert vals == [r.get("val_loss") for r in mem], "validation losses differ"
PY
check "no file left under acts/" test -z "$(ls -A acts)"

# errors, one line on every rank
refused() { # NAME PATTERN ARGS...
    local name=$1 pattern=$2; shift 2
    check "$name refused on every rank" /bin/bash -c "! timeout 60 mpirun --oversubscribe -np 2 \
        '$dtrain' train ${base[*]} $* > $name.out 2> $name.err && \
        [ \$(grep -c 'error:.*$pattern' $name.err) -eq 2 ]"
}
refused unwritable "act_offload_dir /sys/kernel is not writable" \
    --plugin.act_offload=disk --plugin.act_offload_dir=/sys/kernel
: > plain
refused uncreatable "act_offload_dir plain/sub cannot be created" \
    --plugin.act_offload=disk --plugin.act_offload_dir=plain/sub
refused dit "act_offload=disk is built for GPT-2 and Llama" \
    --config "$src/configs/dit-bounce.ini" --plugin.act_offload=disk
finish

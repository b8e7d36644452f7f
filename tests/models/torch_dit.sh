#!/bin/bash
# The DiT against an independent PyTorch DiT (DESIGN invariant 2): tests/models/dit_torch_dump
# runs one rectified-flow step of dtrain's dt_dit (forward, MSE loss, backward, one AdamW
# update) on random weights and writes it all down; tests/models/torch_dit.py redoes the step
# in PyTorch (float32, also on the oneDNN route the benchmark may use, or float64) and
# compares the output, the loss, every gradient and every updated weight (relative 2-norm per
# tensor <= 1e-4). Then the same comparison with one dtrain gradient scaled by 1.001 must fail
# (the check can fail): a self-attention weight's, or with text (TEXT_LEN > 0: cross-attention
# to a caption of TEXT_LEN bytes, TEXT_DIM 0, or to TEXT_LEN given embeddings of width
# TEXT_DIM) a cross-attention key weight's, the new path's.
#   torch_dit.sh DUMP_EXE SRC_DIR ATTN N_CLASSES fp32|fp64 [TEXT_LEN TEXT_DIM]
set -euo pipefail
dump=$1 src=$2 attn=$3 classes=$4 prec=$5 text_len=${6:-0} text_dim=${7:-0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dump_args=("$work/dit.safetensors" "$attn" "$classes")
perturb=blocks.1.attn.qkv.weight
if [ "$text_len" -gt 0 ]; then
    dump_args+=("$text_len" "$text_dim")
    perturb=blocks.1.cross_attn.k_linear.weight
fi
"$dump" "${dump_args[@]}"
py=(/usr/bin/python3 "$src/tests/models/torch_dit.py" --dump "$work/dit.safetensors" --rtol 1e-4)
[ "$prec" = fp64 ] && py+=(--fp64)
"${py[@]}"
# fp32: also the benchmark peer's oneDNN route (bench/torch_dit_step.py --matmul onednn)
[ "$prec" = fp32 ] && "${py[@]}" --matmul onednn
set +e
"${py[@]}" --perturb "g.$perturb" > "$work/perturbed.txt"
rc=$?
set -e
if [ "$rc" != 1 ] || ! grep -q "FAIL  grad $perturb" "$work/perturbed.txt"; then
    echo "torch_dit.sh: a gradient scaled by 1.001 was not caught (rc $rc):" >&2
    cat "$work/perturbed.txt" >&2
    exit 1
fi
echo "perturbed gradient g.$perturb caught (rc 1)"

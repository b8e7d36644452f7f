#!/bin/bash
# Megatron indexed datasets (PREFIX.bin + PREFIX.idx, the format Megatron-LM, NeMo and GPT-NeoX
# write), written here by a small numpy writer of the published format, not by dtrain: the
# same token stream stored as an llm.c shard, as a Megatron dataset of uint16 ids and as one
# of int32 ids, and as nanoGPT's raw uint16 .bin (no header) trains to the same bits; on 2 ranks (dp 2) too. A damaged index is one error
# naming the file and what is wrong. Documents kept apart (data.doc_mask): a shard whose
# documents end with an end-of-document id (data.eot_token) trains to the same bits as the same
# documents in a Megatron dataset, read through its document index alone (one sequence a
# document, and two sequences a document, Megatron's --split-sentences), and to other bits
# than without doc_mask; doc_mask with neither an eot_token nor an index is refused.
#   megatron_data.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
base=(--config "$src/configs/tiny-gpt2.ini" --data.val= --train.batch_size=4 --train.steps=3
      --optim.eps=1e-6 --optim.warmup_steps=1 --optim.lr=3e-3)
. "$src/tests/train/layout_lib.sh"
/usr/bin/python3 - <<'PY' || { echo "writing the datasets failed"; exit 1; }
import struct
import numpy as np

rng = np.random.default_rng(3)
docs = [rng.integers(0, 256, size=int(n)) for n in rng.integers(5, 400, size=60)]
stream = np.concatenate(docs)

def shard(path, ids):  # llm.c: 256 int32 header (magic, version, count), uint16 ids
    head = np.zeros(256, dtype=np.int32)
    head[:3] = (20240520, 1, len(ids))
    with open(path, "wb") as f:
        f.write(head.tobytes()); f.write(ids.astype("<u2").tobytes())

def megatron(prefix, seqs, code, dtype, doc_index=None, ptr_shift=0):
    lengths = np.array([len(s) for s in seqs], dtype="<i4")
    size = np.dtype(dtype).itemsize
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64) * size]).astype("<i8")
    pointers[1] += ptr_shift
    doc_index = np.arange(len(seqs) + 1, dtype="<i8") if doc_index is None else doc_index
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00"); f.write(struct.pack("<Q", 1)); f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(seqs))); f.write(struct.pack("<Q", len(doc_index)))
        f.write(lengths.tobytes()); f.write(pointers.tobytes()); f.write(doc_index.astype("<i8").tobytes())
    with open(prefix + ".bin", "wb") as f:
        for s in seqs:
            f.write(np.asarray(s, dtype=dtype).tobytes())

shard("stream.bin", stream)
np.asarray(stream, dtype=np.uint16).tofile("nanogpt.bin")  # nanoGPT's prepare.py: raw ids
megatron("mega16", docs, 8, "<u2")
megatron("mega32", docs, 4, "<i4")
megatron("bad_dtype", docs, 7, "<f4")
megatron("bad_ptr", docs, 8, "<u2", ptr_shift=2)
megatron("bad_docs", docs, 8, "<u2", doc_index=np.array([0, 5, 3, 60]))
megatron("short", docs, 8, "<u2")
with open("short.bin", "r+b") as f:
    f.truncate(100)
# documents with Megatron's --append-eod: ids below 255, each ending with the EOD id 255
eod = [np.append(rng.integers(0, 255, size=int(n)), 255) for n in rng.integers(3, 60, size=120)]
shard("docs.bin", np.concatenate(eod))
megatron("docs_mega", eod, 8, "<u2")
halves = [p for d in eod for p in (d[: len(d) // 2], d[len(d) // 2 :])]
megatron("docs_split", halves, 8, "<u2", doc_index=np.arange(0, len(halves) + 1, 2))
PY
run ref 1 --data.train=stream.bin || { echo "reference run failed"; tail -5 ref.log; exit 1; }
for name in mega16 mega32 nanogpt.bin; do
    run "$name" 1 --data.train=$name || { echo "FAIL $name: run failed"; tail -3 $name.log; failed=$((failed + 1)); continue; }
    check "$name == the shard (losses)" /usr/bin/python3 "$src/tests/train/compare_runs.py" \
        ref.jsonl ref.safetensors "$name.jsonl" "$name.safetensors" 0 --losses-only
done
same mega16_dp2 2 --data.train=mega16 --plugin.type=zero2
dm=(--data.doc_mask=true --train.seq_len=64)
run docs_eot 1 --data.train=docs.bin "${dm[@]}" --data.eot_token=255 \
    || { echo "FAIL docs_eot: run failed"; tail -3 docs_eot.log; failed=$((failed + 1)); }
for name in docs_mega docs_split; do
    run "$name" 1 --data.train=$name "${dm[@]}" || { echo "FAIL $name: run failed"; tail -3 $name.log; failed=$((failed + 1)); continue; }
    check "$name (document index) == docs.bin (eot_token)" /usr/bin/python3 \
        "$src/tests/train/compare_runs.py" docs_eot.jsonl docs_eot.safetensors "$name.jsonl" \
        "$name.safetensors" 0 --losses-only
done
run docs_unmasked 1 --data.train=docs.bin --train.seq_len=64
check "doc_mask changes the losses" bash -c "! /usr/bin/python3 '$src/tests/train/compare_runs.py' \
    docs_eot.jsonl docs_eot.safetensors docs_unmasked.jsonl docs_unmasked.safetensors 1e-4 --losses-only"
refused() { # NAME PATTERN ARGS...
    local name=$1 pattern=$2; shift 2
    if "$dtrain" train "${base[@]}" "$@" > "$name.log" 2>&1; then
        echo "FAIL $name: accepted"; failed=$((failed + 1))
    elif grep -q "^dtrain: error:.*$pattern" "$name.log"; then passed=$((passed + 1))
    else echo "FAIL $name:"; cat "$name.log"; failed=$((failed + 1)); fi
}
refused bad_dtype "bad_dtype.idx: token ids stored as float32 (dtype code 7)" --data.train=bad_dtype
refused bad_ptr "bad_ptr.idx: sequence 1: length" --data.train=bad_ptr
refused bad_docs "bad_docs.idx: document index 2 is 3" --data.train=bad_docs
refused short "short.bin: 100 bytes, but short.idx counts .*: truncated" --data.train=short
refused bin_named "beside it is a Megatron index" --data.train=mega16.bin
refused no_eot "data.doc_mask needs to know where documents end" --data.train=docs.bin --data.doc_mask=true
finish

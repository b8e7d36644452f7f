#!/bin/bash
# Bad input never crashes dtrain: each case must exit non-zero (but not by a signal) and print
# exactly one line on stderr, beginning "dtrain: error:" and naming what is wrong.
#   error_cases.sh DTRAIN SRC_DIR
set -uo pipefail
dtrain=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
passed=0 failed=0

expect_error() { # NAME PATTERN -- ARGS...
    local name=$1 pattern=$2
    shift 3
    "$dtrain" "$@" > out.txt 2> err.txt
    local rc=$?
    local lines
    # a base command with a key overridden again warns about it (the last one wins): not
    # the error line this counts
    lines=$(grep -vc "^dtrain: warning: train: .* is given twice" err.txt)
    if [ $rc -eq 0 ] || [ $rc -ge 128 ] || [ "$lines" -ne 1 ] || ! grep -q "^dtrain: error:.*$pattern" err.txt; then
        echo "FAIL $name: rc=$rc, stderr ($lines lines):"; cat err.txt
        failed=$((failed + 1))
    else
        echo "ok   $name: $(cat err.txt)"
        passed=$((passed + 1))
    fi
}

"$dtrain" prepare --input "$src/src/core" --out data > /dev/null || { echo "prepare failed"; exit 1; }
tiny=(--config "$src/configs/tiny-gpt2.ini" --data.train=data/train.bin --data.val=data/val.bin)
"$dtrain" train "${tiny[@]}" --train.steps=0 --train.export=good.safetensors > /dev/null

python3 - <<'PY'
import json, struct
def rewrite(src, dst, fix):
    raw = open(src, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    head = json.loads(raw[8:8 + n]); body = raw[8 + n:]
    head, body = fix(head, body)
    h = json.dumps(head).encode(); h += b' ' * (-len(h) % 8)
    open(dst, 'wb').write(struct.pack('<Q', len(h)) + h + body)
def lie_size(h, b):
    h['wte.weight']['shape'][0] += 1; return h, b
def lie_offset(h, b):
    t = h['ln_f.bias']; t['data_offsets'] = [t['data_offsets'][0] + 10**9, t['data_offsets'][1] + 10**9]; return h, b
rewrite('good.safetensors', 'lie_size.safetensors', lie_size)
rewrite('good.safetensors', 'lie_offset.safetensors', lie_offset)
raw = open('good.safetensors', 'rb').read()
open('truncated.safetensors', 'wb').write(raw[:len(raw) - 100])
open('huge_header.safetensors', 'wb').write(struct.pack('<Q', 1 << 60) + b'{}')
tok = open('data/train.bin', 'rb').read()
open('bad_magic.bin', 'wb').write(struct.pack('<i', 12345) + tok[4:])
open('truncated.bin', 'wb').write(tok[:len(tok) - 1001])
open('config_typo.ini', 'w').write('[model]\nn_layers = 3\n')
PY

expect_error "missing config file" "no_such.ini" -- train --config no_such.ini
expect_error "unknown key" "n_layers" -- train --config config_typo.ini
expect_error "unknown override" "model.n_layers" -- train "${tiny[@]}" --model.n_layers=3
expect_error "unknown section" "foo" -- train "${tiny[@]}" --foo.bar=1
expect_error "malformed number" "12x" -- train "${tiny[@]}" --train.steps=12x
expect_error "malformed float" "fast" -- train "${tiny[@]}" --optim.lr=fast
expect_error "bad enum" "fp64" -- train "${tiny[@]}" --plugin.precision=fp64
expect_error "layout does not divide" "n_head" -- train "${tiny[@]}" --model.n_head=5
expect_error "missing data" "missing.bin" -- train "${tiny[@]}" --data.train=missing.bin
expect_error "wrong magic" "magic" -- train "${tiny[@]}" --data.train=bad_magic.bin
expect_error "truncated shard" "truncated" -- train "${tiny[@]}" --data.train=truncated.bin
expect_error "token >= vocab_size" "vocab" -- train "${tiny[@]}" --model.vocab_size=64
expect_error "safetensors size lie" "wte.weight" -- train "${tiny[@]}" --model.init=lie_size.safetensors
expect_error "safetensors offset lie" "ln_f.bias" -- train "${tiny[@]}" --model.init=lie_offset.safetensors
expect_error "truncated safetensors" "truncated" -- train "${tiny[@]}" --model.init=truncated.safetensors
expect_error "absurd header length" "header" -- train "${tiny[@]}" --model.init=huge_header.safetensors
expect_error "missing init" "nope.safetensors" -- train "${tiny[@]}" --model.init=nope.safetensors
expect_error "sample: truncated weights" "truncated" -- sample --checkpoint truncated.safetensors
expect_error "unknown command" "frobnicate" -- frobnicate
mkdir -p a_dir.ini
expect_error "config path is a directory" "a_dir.ini. is a directory" -- train --config a_dir.ini
expect_error "tp not available yet" "tp_size" -- train "${tiny[@]}" --plugin.tp_size=2
# the ring's keys (issue 24), with their bad inputs (issue 25, item 8)
expect_error "cp_size 0" "plugin.cp_size=0 must be >= 1" -- train "${tiny[@]}" --plugin.cp_size=0
expect_error "cp_split unknown" "cp_split" -- train "${tiny[@]}" --plugin.cp_split=spiral
expect_error "cp_size 2 on one process" "cp_size 2" -- train "${tiny[@]}" --plugin.cp_size=2
expect_error "cp on a sequence it cannot cut" "train.seq_len=30 does not split into the 4 chunks" -- \
    plan --config "$src/configs/tiny-gpt2.ini" --world 2 --plugin.cp_size=2 --train.seq_len=30

# numbers are parsed strictly and range-checked: no wrap, no NaN, each limit named
expect_error "sample --tokens wraps" "--tokens: '4294967297' is not a whole number from 1 to" -- \
    sample --checkpoint good.safetensors --tokens 4294967297
expect_error "sample --temperature nan" "--temperature: 'nan'" -- \
    sample --checkpoint good.safetensors --temperature nan
expect_error "sample --temperature inf" "--temperature: 'inf'" -- \
    sample --checkpoint good.safetensors --temperature inf
expect_error "sample --seed -1" "--seed: '-1' is not a seed" -- \
    sample --checkpoint good.safetensors --seed -1
expect_error "sample --steps for days" "--steps: '99999999999' is not a whole number from 1 to 10000" \
    -- sample --checkpoint good.safetensors --out a.gif --steps 99999999999
expect_error "sample --label wraps" "--label: '4294967296' is not a whole number" -- \
    sample --checkpoint good.safetensors --out a.gif --label 4294967296
expect_error "sample --seed past 2^64" "18446744073709551616" -- \
    sample --checkpoint good.safetensors --out a.gif --seed 18446744073709551616
expect_error "sample --guidance nan" "--guidance: 'nan'" -- \
    sample --checkpoint good.safetensors --out a.gif --guidance nan
expect_error "sample clips ignore --temperature" "--temperature is for text" -- \
    sample --checkpoint good.safetensors --out a.gif --temperature 0.5
expect_error "plan --mem 0" "--mem 0: a rank's memory must be more than 0" -- \
    plan --config "$src/configs/tiny-gpt2.ini" --world 2 --mem 0
expect_error "plan --mem past 1 PiB" "99999999999TiB" -- \
    plan --config "$src/configs/tiny-gpt2.ini" --world 2 --mem 99999999999TiB
expect_error "plan --flops 0" "--flops 0: a rate must be more than 0" -- \
    plan --config "$src/configs/tiny-gpt2.ini" --world 2 --flops 0
expect_error "plan --top without a value" "--top needs a value" -- \
    plan --config "$src/configs/tiny-gpt2.ini" --world 2 --top
expect_error "convert --seed wraps" "--seed: '-5' is not a seed" -- \
    convert --from good.safetensors --to x.safetensors --seed -5

# a metrics file whose lines carry nothing to plot: refused, naming the fields it looked for
printf '{"step": 1}\n{"step": 2, "other": 3}\n' > nothing.jsonl
expect_error "plot with nothing to plot" "no line has a field to plot (loss" -- \
    plot --metrics nothing.jsonl --out nothing.svg

# plot's misuses each name their problem (issue 25, item 6)
expect_error "plot without arguments" "plot: nothing to draw" -- plot
expect_error "plot --metrics without a value" "plot: --metrics needs a value" -- plot --metrics
expect_error "plot without --out" "plot: --out FILE.svg is missing" -- plot --metrics nothing.jsonl
expect_error "plot of both kinds" "--timeline and --metrics draw different pictures" -- \
    plot --metrics a --timeline b --out c.svg
expect_error "plot --step of metrics" "--step picks a step of a --timeline" -- \
    plot --metrics a --step 1 --out c.svg
expect_error "plot unknown option" "plot: unexpected argument '--bogus'" -- plot --bogus

# inputs that would block (a FIFO with no writer) or are devices: refused at once, by name
mkfifo in.fifo
expect_error "config is a FIFO" "in.fifo' is a FIFO" -- train --config in.fifo
expect_error "config is a device" "/dev/null' is a device" -- train --config /dev/null
expect_error "data is a FIFO" "in.fifo: not a regular file" -- train "${tiny[@]}" --data.train=in.fifo

# standard output that cannot be written fails the command with one error line
expect_stdout_error() { # NAME -- ARGS...
    local name=$1
    shift 2
    "$dtrain" "$@" > /dev/full 2> err.txt
    local rc=$?
    if [ $rc -ne 1 ] || [ "$(wc -l < err.txt)" -ne 1 ] || \
            ! grep -q "^dtrain: error: writing standard output failed" err.txt; then
        echo "FAIL $name: rc=$rc, stderr:"; cat err.txt
        failed=$((failed + 1))
    else
        echo "ok   $name: $(cat err.txt)"
        passed=$((passed + 1))
    fi
}
expect_stdout_error "plan --json > /dev/full" -- plan --config "$src/configs/tiny-gpt2.ini" --world 2 --json
expect_stdout_error "plan table > /dev/full" -- plan --config "$src/configs/tiny-gpt2.ini" --world 2
expect_stdout_error "schedule > /dev/full" -- schedule --pp 2 --microbatches 4 --kind 1f1b
expect_stdout_error "--version > /dev/full" -- --version

# outputs onto what is not a regular file: a device is written in place and stays a device,
# a directory is refused by name
if [ -c /dev/full ]; then
    expect_error "export onto /dev/full" "/dev/full.*No space" -- \
        train "${tiny[@]}" --train.steps=0 --train.export=/dev/full
    [ -c /dev/full ] && { echo "ok   /dev/full is still a device"; passed=$((passed + 1)); } \
        || { echo "FAIL /dev/full was replaced"; failed=$((failed + 1)); }
fi
expect_error "doc_mask without documents" "data.doc_mask needs to know where documents end" -- \
    train "${tiny[@]}" --data.doc_mask=true
expect_error "eot_token outside the vocabulary" "data.eot_token=300" -- \
    train "${tiny[@]}" --data.doc_mask=true --data.eot_token=300
expect_error "doc_mask on a DiT" "data.doc_mask keeps documents" -- \
    train --config "$src/configs/tiny-dit.ini" --data.doc_mask=true
# clips and latents from disk
expect_error "clips without data.train" "data.source=clips needs data.train" -- \
    train --config "$src/configs/tiny-dit.ini" --data.source=clips --data.train=
expect_error "latents into a language model" "data.source=latents does not feed model.arch=gpt2" -- \
    train "${tiny[@]}" --data.source=latents
expect_error "clips folder missing" "data.train: clipsdir" -- \
    train --config "$src/configs/tiny-dit.ini" --data.source=clips --data.train=clipsdir \
    --model.n_classes=0
expect_error "latents folder of no shard" "holds no \*.safetensors shard" -- \
    train --config "$src/configs/tiny-dit.ini" --data.source=latents --data.train=data \
    --model.n_classes=0
expect_error "prepare --video of a missing folder" "novideos" -- prepare --video novideos --out v
expect_error "prepare --video of a folder without video" "no training clip" -- \
    prepare --video "$src/configs" --out v
# stage boundaries by measured time
expect_error "rebalance_every without a pipeline" "runs no pipeline" -- \
    train "${tiny[@]}" --train.rebalance_every=2
expect_error "rebalance_every negative" "train.rebalance_every" -- \
    train "${tiny[@]}" --train.rebalance_every=-1
expect_error "negative doc_len" "data.doc_len=-3" -- \
    train "${tiny[@]}" --data.doc_len=-3
expect_error "export onto a directory" "a_dir.ini is a folder" -- \
    train "${tiny[@]}" --train.steps=0 --train.export=a_dir.ini

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

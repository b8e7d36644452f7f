#!/bin/bash
# Crash harness (issue 11, item 6): a 2-rank run of the tiny model that checkpoints every step
# with checkpoint.resume = auto is killed at a random moment (SIGKILL of one rank, or of every
# rank at once as when a machine goes down), restarted, killed again, ... and finally let run
# to the end; its export must be byte-identical to an uninterrupted run's (cmp). The moments,
# victims and kinds of kill come from --seed, so a failing trial can be replayed; the time a
# kill lands still varies with the machine's load.
#   crash_harness.sh DTRAIN SRC_DIR [--trials N] [--seed S] [--kills K]
# --kills: kills per trial before the run is let finish (default 3). CI runs a few trials.
set -uo pipefail
dtrain=$1 src=$2
shift 2
trials=3 seed=1 kills=3
while [ $# -gt 0 ]; do
    case $1 in
    --trials) trials=$2 ;;
    --seed) seed=$2 ;;
    --kills) kills=$2 ;;
    *) echo "usage: crash_harness.sh DTRAIN SRC_DIR [--trials N] [--seed S] [--kills K]"; exit 2 ;;
    esac
    shift 2
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
"$dtrain" prepare --input "$src/src/core" --out data > /dev/null || exit 1
train=(mpirun --oversubscribe -np 2 "$dtrain" train --config "$src/configs/tiny-gpt2.ini"
       --data.train=data/train.bin --data.shuffle=true --train.steps=20 --train.batch_size=8
       --train.micro_batch_size=2 --train.comm_timeout=60 --checkpoint.every=1
       --checkpoint.keep=2)
t0=$(date +%s%N)
timeout 300 "${train[@]}" --checkpoint.dir=ck-ref --train.export=ref.safetensors > ref.log 2>&1 ||
    { echo "uninterrupted run failed"; cat ref.log; exit 1; }
span_ms=$((($(date +%s%N) - t0) / 1000000)) # kills land in [0, span_ms) after a start
RANDOM=$seed
passed=0 failed=0 n_kills=0 n_resumed=0

# kill the running job (timeout's pid $1, mpirun its child): one rank (0 or 1) or all ranks;
# the job must end by itself after that
strike() {
    local tp=$1 kind=$2 mp ranks= victims=()
    mp=$(pgrep -P "$tp" -x mpirun) && ranks=$(pgrep -P "$mp")
    if [ -z "$ranks" ]; then # not started yet, or already gone: stop it whole
        kill -TERM "$tp" 2> /dev/null
        return
    fi
    for p in $ranks; do
        local r=$({ tr '\0' '\n' < /proc/$p/environ; } 2> /dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
        [ "$kind" = all ] || [ "$kind" = "$r" ] && victims+=($p)
    done
    [ ${#victims[@]} -gt 0 ] && kill -9 "${victims[@]}" 2> /dev/null
}

for trial in $(seq "$trials"); do
    rm -rf ck out.safetensors
    : > trial.log
    kinds=""
    for attempt in $(seq $((kills + 1))); do
        rm -f out.safetensors
        timeout -s KILL 120 "${train[@]}" --checkpoint.dir=ck --checkpoint.resume=auto \
            --train.export=out.safetensors > run.log 2>&1 &
        mp=$!
        struck=""
        if [ "$attempt" -le "$kills" ]; then
            delay=$((RANDOM * 32768 + RANDOM)) kind=$((RANDOM % 3))
            delay=$((delay % span_ms))
            [ $kind -eq 2 ] && kind=all
            sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
            kill -0 "$mp" 2> /dev/null && strike "$mp" "$kind" && struck=" ${kind}@${delay}ms"
        fi
        wait "$mp"
        rc=$?
        if [ "$rc" -ne 0 ] && [ -n "$struck" ]; then # the kill ended this start
            kinds+=$struck
            n_kills=$((n_kills + 1))
        fi
        cat run.log >> trial.log
        grep -q "resumed from" run.log && n_resumed=$((n_resumed + 1))
        [ "$rc" -eq 0 ] && [ -f out.safetensors ] && break
        [ -z "$struck" ] && break # a start nobody killed must succeed
    done
    if [ "$rc" -eq 0 ] && cmp -s ref.safetensors out.safetensors; then
        passed=$((passed + 1))
        echo "trial $trial: identical (kills:${kinds:- none landed}; $attempt starts)"
    else
        failed=$((failed + 1))
        echo "FAIL trial $trial: exit $rc, export $( [ -f out.safetensors ] && echo differs || echo missing) (kills:$kinds; $attempt starts)"
        grep -E "error|warning|resumed" trial.log | tail -8
        keep=${TMPDIR:-/tmp}/crash-trial-seed$seed-$trial
        rm -rf "$keep" && cp -r ck "$keep" && cp trial.log "$keep/" && echo "kept in $keep"
    fi
done
echo "$passed passed, $failed failed ($n_kills kills landed, $n_resumed resumed runs; seed $seed)"
[ "$failed" -eq 0 ]

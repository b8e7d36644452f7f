# Shared by the layout-equivalence scripts (layouts.sh, tp_layouts.sh, pp_layouts.sh): a scratch
# folder with prepared data, and helpers that run dtrain under mpirun and compare a run with
# the single-process reference. Source it after setting dtrain=, src= and the base=() options.
#   run NAME NP ARGS...    train with NP ranks: NAME.jsonl, .safetensors, .mem.json, .log
#   same NAME NP ARGS...   run, then compare with ref.jsonl / ref.safetensors (1e-5)
#   ran NAME NP ARGS...    run, counting a failed run
#   identical NAME REF     losses equal (tolerance 0) and the exported weights the same bytes
#   check NAME COMMAND...  count COMMAND's success or failure (printing its tail on failure)
#   finish                 print the tally; exit status 0 when nothing failed
set -uo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
"$dtrain" prepare --input "$src/src/core" --out data > /dev/null || exit 1
passed=0 failed=0
check() {
    local name=$1; shift
    if out=$("$@" 2>&1); then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $name"; echo "$out" | tail -5; fi
}
run() {
    local name=$1 np=$2; shift 2
    timeout 300 mpirun --oversubscribe -np "$np" "$dtrain" train "${base[@]}" \
        --train.metrics="$name.jsonl" --train.export="$name.safetensors" \
        --train.mem_report="$name.mem.json" "$@" > "$name.log" 2>&1
}
same() {
    local name=$1
    if ! run "$@"; then
        echo "FAIL $name: run failed"; tail -3 "$name.log"; failed=$((failed + 1)); return
    fi
    check "$name equivalence" /usr/bin/python3 "$src/tests/train/compare_runs.py" \
        ref.jsonl ref.safetensors "$name.jsonl" "$name.safetensors" 1e-5
}
ran() {
    run "$@" && return 0
    echo "FAIL $1: run failed"; tail -3 "$1.log"; failed=$((failed + 1)); return 1
}
identical() {
    check "$1 == $2 (losses)" /usr/bin/python3 "$src/tests/train/compare_runs.py" \
        "$2.jsonl" "$2.safetensors" "$1.jsonl" "$1.safetensors" 0 --losses-only
    check "$1 == $2 (weights)" cmp "$1.safetensors" "$2.safetensors"
}
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}

#!/bin/bash
# Bad layouts and bad input under mpirun: every rank prints the same one-line error, the job
# exits non-zero, and nothing hangs (each case runs under a time limit).
#   mpi_errors.sh DTRAIN SRC_DIR
set -uo pipefail
dtrain=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
"$dtrain" prepare --input "$src/src/core" --out data > /dev/null || exit 1
tiny=(--config "$src/configs/tiny-gpt2.ini" --data.train=data/train.bin --data.val=data/val.bin)
passed=0 failed=0
expect_all_ranks() { # NAME NP PATTERN ARGS...
    local name=$1 np=$2 pattern=$3
    shift 3
    timeout 60 mpirun --oversubscribe -np "$np" "$dtrain" train "${tiny[@]}" "$@" > out.txt 2> err.txt
    local rc=$? n
    n=$(grep -c "error:.*$pattern" err.txt)
    local distinct
    distinct=$(grep "error:" err.txt | sed 's/^dtrain\[rank [0-9]*\]: //' | sort -u | wc -l)
    if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ "$n" -ne "$np" ] || [ "$distinct" -ne 1 ]; then
        echo "FAIL $name: rc=$rc, $n of $np ranks reported it, $distinct distinct messages"
        cat err.txt | head -8
        failed=$((failed + 1))
    else
        echo "ok   $name: $(grep -m1 error: err.txt)"
        passed=$((passed + 1))
    fi
}
expect_all_ranks "batch not divisible by dp" 3 "batch_size=4 is not divisible by the 3" --plugin.type=ddp
expect_all_ranks "micro-batch does not divide a rank's rows" 2 "micro_batch_size=3" --train.micro_batch_size=3 --train.batch_size=4
expect_all_ranks "world not divisible by model parallel degrees" 3 "tp_size" --plugin.tp_size=2
# model splits that do not divide: every rank names both numbers and the sizes that work
expect_all_ranks "heads not divisible by tp" 3 "model.n_head=4 is not divisible by plugin.tp_size=3; use plugin.tp_size 1, 2 or 4" --plugin.tp_size=3
expect_all_ranks "kv heads not divisible by tp" 4 "model.n_kv_head=2 is not divisible by plugin.tp_size=4" --config "$src/configs/tiny-llama.ini" --data.train=data/train.bin --plugin.tp_size=4
expect_all_ranks "heads per tp rank not divisible by sp" 4 "the 1 heads of each tp rank (model.n_head=2 / tp_size=2) are not divisible by plugin.sp_size=2" --model.n_head=2 --plugin.tp_size=2 --plugin.sp_size=2
expect_all_ranks "seq_len not divisible by sp" 2 "train.seq_len=31 is not divisible by plugin.sp_size=2" --plugin.sp_size=2 --train.seq_len=31
expect_all_ranks "seq_len not divisible by tp under split_gather" 2 "train.seq_len=31 is not divisible by plugin.tp_size=2 (sp_mode=split_gather" --plugin.tp_size=2 --plugin.sp_mode=split_gather --train.seq_len=31
expect_all_ranks "missing data on every rank" 2 "nothere.bin" --data.train=nothere.bin
expect_all_ranks "ddp with a ZeRO stage" 2 "zero_stage" --plugin.type=ddp --plugin.zero_stage=2
# only rank 0 writes metrics: its failure must reach the other ranks, which never touch the file
# a diverged run (issue 11, 5d): every rank names the same step, rank and tensor, and the
# metrics file on a full disk stops every rank
expect_all_ranks "diverged under ZeRO-3" 2 "step [0-9]*: the .* are not finite (first on rank [01] at [a-z_.0-9]*\[" --plugin.type=zero3 --optim.lr=3e38
expect_all_ranks "metrics on a full disk" 2 "cannot write metrics file /dev/full" --train.metrics=/dev/full
# (a missing folder is created, so the path lies under a file, where none can be)
expect_all_ranks "one rank fails, all report it" 2 "/dev/null/m.jsonl" --train.metrics=/dev/null/m.jsonl
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

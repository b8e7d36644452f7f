#!/bin/bash
# examples/slurm/train.sbatch on a real Slurm: a one-machine cluster (munged, slurmctld and
# slurmd from Debian's slurm-wlm packages, with a generated key and slurm.conf in a private
# directory and free ports) runs the batch script for a 2-task ZeRO-2 job, whose losses and
# exported weights must equal the single-process run's; threads and binding must come from the
# allocation; a task count that does not fit the layout must fail with one clear error on
# every rank. Every daemon started here is stopped on exit.
#   slurm.sh DTRAIN SRC_DIR
# Exit 77 (skipped) when Slurm or munge is not installed or this is not root.
set -uo pipefail
dtrain=$(readlink -f "$1") src=$(readlink -f "$2")
for cmd in munged slurmctld slurmd sbatch squeue scontrol sinfo srun python3; do
    command -v "$cmd" > /dev/null ||
        { echo "SKIP: '$cmd' not found (Debian packages slurmctld slurmd slurm-client munge)"; exit 77; }
done
if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: a private slurmd must run as root (running as uid $(id -u))"; exit 77
fi
T=$(mktemp -d /tmp/dtrain-slurm.XXXXXX)
chmod 755 "$T" # munge wants its socket's folders searchable by everyone
pids=()
cleanup() {
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2> /dev/null; done
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2> /dev/null
    done
    rm -rf "$T"
}
trap cleanup EXIT
passed=0 failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }

# munge with a fresh key, on a private socket
mkdir -p "$T/munge" "$T/state" "$T/spool" "$T/log" "$T/work"
chmod 700 "$T/munge"
head -c 1024 /dev/urandom > "$T/munge/munge.key" && chmod 400 "$T/munge/munge.key"
munged -f -F --socket="$T/munge/sock" --key-file="$T/munge/munge.key" --log-file="$T/log/munged" \
    --pid-file="$T/munge/pid" --seed-file="$T/munge/seed" > "$T/log/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$T/munge/sock" ] && break; sleep 0.1; done
[ -S "$T/munge/sock" ] || { bad "munged did not start"; cat "$T/log/munged.out"; finish; }

read -r port1 port2 < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
host=$(hostname -s)
ncpu=$(nproc)
export SLURM_CONF=$T/slurm.conf
cat > "$SLURM_CONF" <<CONF
ClusterName=dtraintest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port1
SlurmdPort=$port2
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge/sock
CredType=cred/munge
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$ncpu CoresPerSocket=$ncpu ThreadsPerCore=1 State=UNKNOWN
PartitionName=dtrain Nodes=$host Default=YES MaxTime=30 State=UP
CONF
slurmctld -D -i -f "$SLURM_CONF" > "$T/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" > "$T/log/slurmd.out" 2>&1 &
pids+=($!)
state=
for _ in $(seq 60); do
    state=$(sinfo -h -o %T 2> /dev/null)
    [ "$state" = idle ] && break
    sleep 0.5
done
if [ "$state" != idle ]; then
    bad "the node did not come up (state '$state')"; tail -5 "$T"/log/*.out "$T"/log/*.log; finish
fi
ok "one-machine Slurm up ($(sinfo -h -o '%P %D %c %T'), ports $port1/$port2)"
srun --mpi=list 2>&1 | grep -qw pmix && ok "srun --mpi=list offers pmix" || { bad "no pmix in srun --mpi=list"; finish; }

cd "$T/work"
"$dtrain" prepare --input "$src/src/core" --out data > /dev/null 2>&1 || { bad "prepare"; finish; }
tiny=(--config "$src/configs/tiny-gpt2.ini" --data.train=data/train.bin --data.val=data/val.bin
      --train.steps=4 --train.seed=7 --train.batch_size=8 --optim.eps=1e-6) # eps as multinode.sh: AdamW at
# the default 1e-8 turns rounding-level gradient differences of near-zero entries into 1e-4
OMP_NUM_THREADS=1 "$dtrain" train "${tiny[@]}" --train.metrics=ref.jsonl \
    --train.export=ref.safetensors > ref.log 2>&1 || { bad "single-process run"; tail -3 ref.log; finish; }

# dtrain behind a wrapper that records what each task got: threads and the CPUs it may use
cat > probe.sh <<PROBE
#!/bin/bash
echo "task \$SLURM_PROCID threads \$OMP_NUM_THREADS cpus \$(sed -n 's/^Cpus_allowed_list:\s*//p' /proc/self/status)" >&2
exec "$dtrain" "\$@"
PROBE
chmod +x probe.sh

# sbatch JOBNAME SBATCH_ARGS... -- DTRAIN_ARGS...: submit, wait (bounded), leave the state in $job_state
submit() {
    local name=$1; shift
    local sargs=()
    while [ "$1" != -- ]; do sargs+=("$1"); shift; done
    shift
    local id
    id=$(sbatch --parsable --time=10 --chdir="$T/work" --output="$T/work/$name.out" \
        --export=ALL,DTRAIN="$T/work/probe.sh" "${sargs[@]}" "$src/examples/slurm/train.sbatch" "$@") ||
        { job_state="not submitted"; return; }
    for _ in $(seq 360); do # 180 s at most
        [ -z "$(squeue -h -j "$id" 2> /dev/null)" ] && break
        sleep 0.5
    done
    if [ -n "$(squeue -h -j "$id" 2> /dev/null)" ]; then
        scancel "$id"; job_state="timed out"; return
    fi
    job_state=$(scontrol -o show job "$id" | grep -oE 'JobState=[A-Z_]+ .*ExitCode=[0-9:]+' |
        sed 's/ Reason=[^ ]*//; s/ Dependency=[^ ]*//')
}

submit dp2 --ntasks=2 --cpus-per-task=1 -- "${tiny[@]}" --plugin.type=zero2 \
    --train.metrics=run.jsonl --train.export=run.safetensors
case "$job_state" in
    *COMPLETED*ExitCode=0:0) ok "2-task job: $job_state" ;;
    *) bad "2-task job: $job_state"; tail -8 dp2.out ;;
esac
grep -q "2 ranks: dp 2, ZeRO 2" dp2.out && ok "dtrain saw a world of 2 ranks" || bad "world size: $(grep -m1 ranks dp2.out)"
"$src/tests/train/compare_runs.py" ref.jsonl ref.safetensors run.jsonl run.safetensors 1e-5 &&
    ok "2 tasks under Slurm = 1 process (losses, exported weights)" || bad "results differ"
# binding: each task on a core of its own, one thread each
mapfile -t probes < <(grep '^task ' dp2.out | sort)
if [ "${#probes[@]}" -eq 2 ] && [[ "${probes[0]}" =~ threads\ 1\ cpus\ [0-9]+$ ]] &&
        [[ "${probes[1]}" =~ threads\ 1\ cpus\ [0-9]+$ ]] &&
        [ "${probes[0]##* }" != "${probes[1]##* }" ]; then
    ok "tasks bound to different cores, 1 thread each (${probes[*]})"
else
    bad "binding: ${probes[*]}"
fi
if [ "$ncpu" -ge 2 ]; then
    submit threads --ntasks=1 --ntasks-per-node=1 --cpus-per-task=2 -- "${tiny[@]}" --train.steps=1
    grep -q "^task 0 threads 2 cpus" threads.out && [[ "$job_state" == *COMPLETED* ]] &&
        ok "--cpus-per-task=2 gives OMP_NUM_THREADS=2 ($(grep '^task' threads.out))" ||
        { bad "threads from the allocation: $job_state $(grep '^task' threads.out)"; tail -3 threads.out; }
fi

# a task count that does not fit the layout: the job fails, every rank says why, once
submit badlayout --ntasks=2 --cpus-per-task=1 -- "${tiny[@]}" --plugin.tp_size=4
n=$(grep -c 'error: world size 2 is not divisible by .*tp_size 4' badlayout.out)
distinct=$(grep 'error:' badlayout.out | grep -v '^srun' | sed 's/^dtrain\[rank [0-9]*\]: //' | sort -u | wc -l)
if [[ "$job_state" == *FAILED* ]] && [ "$n" -eq 2 ] && [ "$distinct" -eq 1 ]; then
    ok "2 tasks for tp_size 4: $(grep -m1 'error: world' badlayout.out)"
else
    bad "layout mismatch: $job_state, $n ranks, $distinct messages"; tail -5 badlayout.out
fi
finish

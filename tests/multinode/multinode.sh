#!/bin/bash
# Multi-node (issue 3 item 9): dp=2 x ZeRO-2 across two "hosts" made by ../shared/tools/netns-cluster
# (one network namespace each, joined by a bridge; Open MPI launches into them with
# `ip netns exec` as its rsh agent and the ranks talk over TCP only) gives the single-process
# result: same per-step losses and exported weights within 1e-5 relative.
# The mpirun line below is the README's multi-node recipe; only the rsh agent and the subnet
# (what netns-cluster mpiflags supplies), the hostname agent wrapper, the private session
# directory, the verbose/display flags and the where.sh wrapper are there for the test.
#   multinode.sh DTRAIN SRC_DIR
# Exit 77 (skipped) when the tool is missing or this machine cannot create network namespaces.
set -uo pipefail
dtrain=$(readlink -f "$1") src=$(readlink -f "$2")
tool=${DTRAIN_NETNS_CLUSTER:-$src/../shared/tools/netns-cluster}
lock=/tmp/dtrain-netns.lock

if [ ! -x "$tool" ]; then
    echo "SKIP: netns-cluster not found at $tool (it lives in shared/tools/ beside the repository)"
    exit 77
fi
tool=$(readlink -f "$tool")
if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: multi-node test needs root to create network namespaces (running as uid $(id -u))"
    exit 77
fi
for cmd in ip flock unshare hostname mpirun; do
    command -v "$cmd" > /dev/null || { echo "SKIP: '$cmd' not found (ip: Debian package iproute2)"; exit 77; }
done
# Can we create a network namespace and a bridge in it? (a private one: no global names touched)
if ! unshare --net sh -c 'ip link add dtprobe0 type bridge && ip link del dtprobe0' 2> /dev/null; then
    echo "SKIP: this machine cannot create network namespaces/bridges (no CAP_SYS_ADMIN/CAP_NET_ADMIN)"
    exit 77
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
work=$(mktemp -d /tmp/dtrain-multinode.XXXXXX)
work=$(readlink -f "$work")

# The bridge dtbr0 and the hosts dt0.. are global names: one user of netns-cluster at a time.
# fd 9 holds the lock; children get it closed (9>&-) so an orphan cannot keep it after a kill.
exec 9> "$lock"
if ! flock -w 200 9; then
    echo "FAIL: waited 200 s for $lock (another multi-node run holds the netns cluster)"
    rm -rf "$work"; exit 1
fi
have_cluster=0 child=
cleanup() {
    [ -n "$child" ] && kill -TERM "$child" 2> /dev/null && wait "$child" 2> /dev/null
    [ "$have_cluster" -eq 1 ] && "$tool" down 9>&- || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
cd "$work" || exit 1

passed=0 failed=0
pass() { passed=$((passed + 1)); echo "ok   $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit $?; }
# Run a command in the background and wait for it, so a TERM/INT reaches the trap at once
# (and the trap stops the command) instead of after the command ends.
bg() { "$@" 9>&- & child=$!; wait "$child"; local rc=$?; child=; return $rc; }

# `ip netns del` finishes in the kernel after it returns: a host's old veth (dtvN) can outlive
# `netns-cluster down` for a moment, and an `up` in that moment silently leaves a host without
# eth0 (Open MPI's daemon there then fails with "pmix_ifinit: unable to find network interfaces").
# So, holding the lock: take down whatever a killed earlier run left, wait until its links are
# gone, bring 2 hosts up, and check every host has its address on a live link before launching.
links_gone() { ! ip link show dtbr0 > /dev/null 2>&1 && ! ip -o link show | grep -qE ': dtv[0-9]+@'; }
cluster_ok() {
    local i
    for i in 0 1; do
        ip -n dt$i -4 -o addr show dev eth0 2> /dev/null | grep -q " 10.77.0.$((i + 1))/24 " || return 1
        ip -n dt$i -o link show dev eth0 2> /dev/null | grep -q "LOWER_UP" || return 1
        ip -o link show dev dtv$i 2> /dev/null | grep -q "master dtbr0 .*state UP" || return 1
    done
}
have_cluster=1
ok=0
for attempt in 1 2 3; do
    "$tool" down 9>&- 2> /dev/null || true
    for _ in $(seq 100); do links_gone && break; sleep 0.1; done
    if "$tool" up 2 9>&- && for _ in $(seq 50); do cluster_ok && break; sleep 0.1; done && cluster_ok; then
        ok=1; break
    fi
    echo "netns-cluster up 2 (attempt $attempt) did not give 2 working hosts; retrying"
done
if [ "$ok" -eq 1 ]; then
    pass "netns-cluster up 2: dt0 = 10.77.0.1 and dt1 = 10.77.0.2 on bridge dtbr0"
else
    fail "netns-cluster up 2"; ip -o link show | grep -E 'dtv|dtbr'; ip netns list; finish
fi
# Only dt0 and dt1 (a stale dt2.. from an interrupted run with more hosts must not join).
"$tool" hostfile 9>&- | grep -E '^dt[01] ' > "$work/hostfile"
if [ "$(wc -l < "$work/hostfile")" -ne 2 ]; then
    fail "hostfile has 2 hosts:"; cat "$work/hostfile"; finish
fi
read -r -a netflags <<< "$("$tool" mpiflags)"
case " ${netflags[*]} " in
*" --mca btl tcp,self "*) pass "mpiflags restrict the byte transfer layer to tcp,self: ${netflags[*]}" ;;
*) fail "mpiflags do not restrict btl to tcp,self: ${netflags[*]}" ;;
esac
# The namespaces share this machine's hostname and /tmp, so Open MPI's daemons on dt0 and dt1
# both think they are on host "$(hostname)" and create the same session directory
# (/tmp/ompi.<hostname>.<uid>/jf.N) at the same moment; about 1 launch in 7 then fails with
# "A call to mkdir was unable to create the desired directory ... File exists". Real machines have
# their own hostnames, so the test gives each host one too: its agent is the tool's agent run in
# a private UTS namespace whose hostname is the host's name (dt0, dt1). 0 failures in 40 launches.
cat > "$work/agent" <<EOF
#!/bin/sh
# Open MPI calls: agent --agent HOST COMMAND...  (plm_rsh_args is --agent)
exec unshare --uts sh -c 'hostname "\$2" && exec "\$0" "\$@"' "$tool" "\$@"
EOF
chmod +x "$work/agent"
for i in "${!netflags[@]}"; do
    [ "${netflags[$i]}" = plm_rsh_agent ] && netflags[$((i + 1))]=$work/agent
done

# Each rank records where it runs (namespace, address, environment), then becomes dtrain.
cat > "$work/where.sh" <<EOF
#!/bin/sh
r=\${OMPI_COMM_WORLD_RANK:-x}
echo "rank=\$r ns=\$(ip netns identify \$\$) host=\$(hostname) addr=\$(ip -4 -o addr show eth0 2>/dev/null | awk '{print \$4}') omp=\${OMP_NUM_THREADS:-unset} wait=\${OMP_WAIT_POLICY:-unset} cwd=\$(pwd)" > "$work/where.\$r"
exec "\$@"
EOF
chmod +x "$work/where.sh"

"$dtrain" prepare --input "$src/src/core" --out "$work/data" > "$work/prepare.log" 2>&1 9>&- \
    || { fail "prepare"; cat "$work/prepare.log"; finish; }
base=(--config "$src/configs/tiny-gpt2.ini" --data.train="$work/data/train.bin" --data.val="$work/data/val.bin"
      --train.batch_size=8 --train.steps=4 --train.eval_every=2 --optim.eps=1e-6
      --optim.warmup_steps=1 --optim.lr=3e-3)

if bg timeout 120 "$dtrain" train "${base[@]}" --train.metrics="$work/ref.jsonl" \
        --train.export="$work/ref.safetensors" > "$work/ref.log" 2>&1; then
    pass "single-process reference"
else
    fail "single-process reference"; tail -5 "$work/ref.log"; finish
fi

# The multi-node launch: hostfile (1 slot per host), the cluster's flags (rsh agent = ip netns exec,
# OOB and BTL on the bridge subnet, btl tcp,self), pml ob1 so the BTL choice is what is used,
# no binding (both "hosts" are this machine's cores), the OpenMP settings exported to every rank.
# Test-only: a private orte_tmpdir_base keeps this job's session directories apart from other
# Open MPI jobs running here (and removed with $work even if a daemon is killed).
mkdir -p "$work/ompi"
mpi=(mpirun --hostfile "$work/hostfile" -np 2 "${netflags[@]}" --mca pml ob1 --bind-to none
     --mca orte_tmpdir_base "$work/ompi"
     -x OMP_NUM_THREADS -x OMP_WAIT_POLICY --display-map
     --mca btl_base_verbose 30 --mca pml_base_verbose 10)
echo "running: ${mpi[*]} $work/where.sh $dtrain train ... --plugin.type=zero2"
if bg timeout 180 "${mpi[@]}" "$work/where.sh" "$dtrain" train "${base[@]}" --plugin.type=zero2 \
        --train.metrics="$work/mn.jsonl" --train.export="$work/mn.safetensors" > "$work/mn.log" 2>&1; then
    pass "2-host run (dp 2, ZeRO 2)"
else
    fail "2-host run (dp 2, ZeRO 2)"; grep -v '^\[' "$work/mn.log" | tail -20
    grep -E "pmix|unable|refused|unreachable" "$work/mn.log" | head -5; finish
fi

# One rank per namespace, each on its own bridge address, with the OpenMP settings.
cat "$work"/where.[0-9] 2> /dev/null
w0=$(cat "$work/where.0" 2> /dev/null) w1=$(cat "$work/where.1" 2> /dev/null)
if [[ "$w0" == *" ns=dt0 host=dt0 addr=10.77.0.1/24 "* && "$w1" == *" ns=dt1 host=dt1 addr=10.77.0.2/24 "* ]]; then
    pass "rank 0 runs in namespace dt0 and rank 1 in dt1"
else
    fail "one rank per namespace (rank 0 in dt0, rank 1 in dt1)"
fi
if [[ "$w0 $w1" == *"omp=$OMP_NUM_THREADS wait=$OMP_WAIT_POLICY"*"omp=$OMP_NUM_THREADS wait=$OMP_WAIT_POLICY"* ]]; then
    pass "OMP_NUM_THREADS=$OMP_NUM_THREADS and OMP_WAIT_POLICY=$OMP_WAIT_POLICY reach both ranks"
else
    fail "OpenMP environment reaches both ranks"
fi
grep -E "Data for node: dt|Process rank" "$work/mn.log" | sort -u | sed "s/^[[:space:]]*//"
# TCP only: each rank's verbose log initialises exactly the tcp and self BTLs, and pml ob1.
btls=$(grep -oE "select: initializing btl component [a-z0-9]+" "$work/mn.log" | awk '{print $5}' | sort | uniq -c | tr -s ' ')
if [ "$btls" = " 2 self
 2 tcp" ] && [ "$(grep -c "select: component ob1 selected" "$work/mn.log")" -eq 2 ] \
        && grep -q "btl: tcp: Found match: 10.77.0.1 (eth0)" "$work/mn.log" \
        && grep -q "btl: tcp: Found match: 10.77.0.2 (eth0)" "$work/mn.log"; then
    pass "both ranks use only the tcp (and self) BTL on the bridge addresses, pml ob1"
else
    fail "TCP-only transport (BTLs initialised per rank: $(echo $btls))"
fi
if grep -q "2 ranks: dp 2, ZeRO 2" "$work/mn.log"; then pass "dtrain reports 2 ranks: dp 2, ZeRO 2"
else fail "dtrain reports 2 ranks: dp 2, ZeRO 2"; fi

if out=$(/usr/bin/python3 "$src/tests/train/compare_runs.py" "$work/ref.jsonl" "$work/ref.safetensors" \
        "$work/mn.jsonl" "$work/mn.safetensors" 1e-5 2>&1 9>&-); then
    pass "2 hosts equal the single process (losses and weights, 1e-5)"
else
    fail "2 hosts equal the single process"; echo "$out" | tail -10
fi
finish

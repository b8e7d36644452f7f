# Shared by the bench/ scripts (sourced; needs REPO, WORK, PY and a log function).
#   bench_build REV TARGETS...   build TARGETS of a `git archive` snapshot of REV (or of the
#                                working tree for REV=tree) in $WORK/build, Release; sets
#                                COMMIT (the label the tables print) and BUILD (the folder)
#   peer_prepare                 the PyTorch peer at its best (issue 12 item 5): installs what
#                                is missing (as root), sets PROBE0 (bench/torch_probe.py at a
#                                small shape, 1 thread) and ATEN_CAP (ATen's faster kernel
#                                level here); exits 2 when torch does not run on OpenBLAS
#   peer_env THREADS             env(1) arguments for a peer process
#   probe THREADS C V TOKENS     bench/torch_probe.py's JSON line at that shape
#   jget JSON KEY...             one field of a JSON line
#   apt_install PACKAGE...       apt-get install as root (logged to $WORK/apt.log)
#   wait_quiet MAX_LOAD WAIT_S   take the machine's benchmark lock (fd 9, held until the script
#                                ends), then wait (at most WAIT_S) for the 1-minute load
#                                average to fall below MAX_LOAD
bench_build() {
    local rev=$1 src
    shift
    if [ "$rev" = tree ]; then
        src=$REPO; COMMIT="$(git -C "$REPO" rev-parse --short HEAD)+worktree"
    else
        src=$WORK/src; rm -rf "$src"; mkdir -p "$src"
        git -C "$REPO" archive "$rev" | tar -x -C "$src"
        COMMIT=$(git -C "$REPO" rev-parse --short "$rev")
    fi
    log "building dtrain $COMMIT in $WORK/build"
    nice cmake -S "$src" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release >"$WORK/cmake.log" 2>&1
    nice make -C "$WORK/build" -j2 "$@" >"$WORK/make.log" 2>&1 ||
        { tail -20 "$WORK/make.log" >&2; exit 1; }
    BUILD=$WORK/build
}

apt_install() {
    if [ "$(id -u)" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >"$WORK/apt.log" 2>&1 ||
            { apt-get update >>"$WORK/apt.log" 2>&1 &&
              DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >>"$WORK/apt.log" 2>&1; }
    else
        log "missing $*; install as root: apt-get install -y $*"; return 1
    fi
}

# The peer's environment: OpenBLAS's own kernel choice, sleeping idle threads, ATen's level.
ATEN_CAP=""
peer_env() { # THREADS -> env(1) arguments
    echo "-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$1" \
        "${ATEN_CAP:+ATEN_CPU_CAPABILITY=$ATEN_CAP}"
}
probe() { # THREADS C V TOKENS -> JSON line (bench/torch_probe.py)
    # shellcheck disable=SC2046
    env $(peer_env "$1") $PY "$REPO/bench/torch_probe.py" --threads "$1" --n-embd "$2" \
        --vocab "$3" --tokens "$4"
}
jget() { $PY -c 'import json,sys; v=json.loads(sys.argv[1]); [v := v[k] for k in sys.argv[2:]]; print(v)' "$@"; }

peer_prepare() {
    [ -x /usr/bin/time ] || apt_install time
    $PY -c 'import torch' 2>/dev/null || apt_install python3-torch
    # python3-torch links the generic libblas.so.3; Debian's reference BLAS there runs fp32
    # matmul at a few GFLOP/s. OpenBLAS provides the same alternative
    # (libblas.so.3-x86_64-linux-gnu) at higher priority, and makes torch's own matmul fast.
    if ! update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null |
            grep -q '^Value: .*openblas'; then
        log "libblas.so.3 is not OpenBLAS: installing libopenblas0-pthread for PyTorch"
        apt_install libopenblas0-pthread || log "WARNING: PyTorch runs on the reference BLAS"
    fi
    PROBE0=$(probe 1 384 256 2048)
    if [ "$(jget "$PROBE0" openblas)" != True ]; then
        echo "$(basename "$0"): PyTorch is not running on OpenBLAS (loaded: $(jget "$PROBE0" blas));" \
             "install libopenblas0-pthread (as root) - refusing to compare against an untuned peer" >&2
        exit 2
    fi
    # ATen's own kernels: AVX-512 where the CPU has it and it is faster here
    if grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo &&
            grep -qw avx512dq /proc/cpuinfo; then
        local p512
        ATEN_CAP=avx512; p512=$(probe 1 384 256 2048); ATEN_CAP=""
        if awk -v a="$(jget "$p512" pointwise_ms)" -v b="$(jget "$PROBE0" pointwise_ms)" \
                'BEGIN{exit !(a < b)}'; then
            ATEN_CAP=avx512
        fi
        log "ATen pointwise: default $(jget "$PROBE0" cpu_capability)" \
            "$(jget "$PROBE0" pointwise_ms) ms, AVX512 $(jget "$p512" pointwise_ms) ms -> ${ATEN_CAP:-default}"
    fi
}

wait_quiet() {
    # one benchmark at a time on this machine (bench/run_scaling.sh takes the same lock)
    exec 9>/tmp/dtrain-bench.lock
    flock 9
    local waited=0
    while awk -v m="$1" '{exit !($1 >= m)}' /proc/loadavg && [ "$waited" -lt "$2" ]; do
        [ $((waited % 120)) = 0 ] && log "waiting for load < $1"
        sleep 30; waited=$((waited + 30))
    done
    log "start (waited ${waited}s)"
}

# Shared by the bench/ scripts (sourced; needs REPO, WORK and a log function).
#   bench_build REV TARGETS...   build TARGETS of a `git archive` snapshot of REV (or of the
#                                working tree for REV=tree) in $WORK/build, Release; sets
#                                COMMIT (the label the tables print) and BUILD (the folder)
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

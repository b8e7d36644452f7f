#!/bin/bash
# Builds the libFuzzer targets with clang in a build tree of their own and runs each for
# SECONDS on a copy of its seed corpus (tests/fuzz/corpus/<target>/). Any crash, leak, hang
# or sanitizer report fails the test and leaves the reproducer in the log. Exit 77 (skipped)
# when clang or its libFuzzer runtime is missing.
#   run.sh SRC_DIR BUILD_DIR SECONDS [TARGET...]
# By hand, longer: bash tests/fuzz/run.sh . build-fuzz 600 manifest
set -uo pipefail
src=$1 build=$2 seconds=$3
shift 3
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors manifest state tokens indexed blend bpe clips)
command -v clang > /dev/null || { echo "clang not found: skipped"; exit 77; }
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' > "$probe/p.c"
clang -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" 2> /dev/null ||
    { echo "clang has no libFuzzer runtime (libclang-rt-dev): skipped"; exit 77; }
cmake -S "$src" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDTRAIN_FUZZ=ON > "$probe/cmake.log" 2>&1 || { cat "$probe/cmake.log"; exit 1; }
for t in "${targets[@]}"; do
    cmake --build "$build" -j "$(nproc)" --target fuzz_$t > "$probe/build.log" 2>&1 ||
        { tail -30 "$probe/build.log"; exit 1; }
done
failed=0
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE ASAN_OPTIONS=detect_leaks=1 TMPDIR="$probe"
for t in "${targets[@]}"; do
    corpus="$probe/corpus_$t"
    mkdir -p "$corpus" && cp "$src/tests/fuzz/corpus/$t"/* "$corpus"/
    # -rss_limit_mb: a hostile size must be refused, never allocated; -timeout: never hang
    if "$build/tests/fuzz_$t" "$corpus" -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=2048 -max_len=65536 -artifact_prefix="$probe/" > "$probe/$t.log" 2>&1; then
        echo "fuzz_$t: $(grep -o 'Done [0-9]* runs' "$probe/$t.log") in ${seconds}s, no finding"
    else
        echo "FAIL: fuzz_$t"
        tail -40 "$probe/$t.log"
        for a in "$probe"/crash-* "$probe"/leak-* "$probe"/timeout-* "$probe"/oom-*; do
            [ -f "$a" ] && { echo "reproducer $a:"; od -c "$a" | head -20; }
        done
        failed=1
    fi
done
exit $failed

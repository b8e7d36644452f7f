#!/bin/bash
# dtrain as an installed library: `cmake --install` into a temporary prefix gives the
# libraries (soname with the ABI version), the public headers (each compiles alone with only
# the prefix on the include path, none reaches into src/), dtrain.pc, the CMake package and the
# command; two programs outside the tree, built with `pkg-config --cflags --libs dtrain` alone,
# train and evaluate/sample on 2 ranks under mpirun, and their results agree with the
# single-process ones and with `dtrain sample`.
#   install.sh BUILD_DIR SRC_DIR VERSION ABI_VERSION
set -uo pipefail
build=$1 src=$2 version=$3 abi=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMP_WAIT_POLICY=PASSIVE
passed=0 failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }

P=$work/prefix
cmake --install "$build" --prefix "$P" > install.log || { bad "cmake --install"; cat install.log; finish; }
lib=$(sed -n 's/^libdir=${prefix}\///p' "$P"/lib*/pkgconfig/dtrain.pc 2>/dev/null | head -1)
for f in "$lib/libdtrain.so" "$lib/libdtrain.so.$abi" "$lib/libdtrain.so.$version" "$lib/libdtrain.a" \
         include/dtrain/dtrain.h include/dtrain/booster.h include/dtrain/config.h \
         include/dtrain/dist.h include/dtrain/mem.h include/dtrain/status.h \
         include/dtrain/version.h include/dtrain/export.h "$lib/pkgconfig/dtrain.pc" \
         "$lib/cmake/dtrain/dtrainConfig.cmake" "$lib/cmake/dtrain/dtrainConfigVersion.cmake" \
         bin/dtrain; do
    [ -e "$P/$f" ] && ok "installed $f" || bad "missing $P/$f"
done
[ "$lib" = lib ] && ok "pkg-config file under lib/" || bad "libdir is '$lib'"
soname=$(readelf -d "$P/$lib/libdtrain.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = "libdtrain.so.$abi" ] && ok "soname $soname" || bad "soname '$soname'"
# the shared library exports the public API and nothing of the internals
nm -D --defined-only "$P/$lib/libdtrain.so" | awk '{print $3}' | grep '^dt_' | sort > exported.txt
grep -q '^dt_booster_step$' exported.txt && grep -q '^dt_version$' exported.txt &&
    ! grep -q '^dt_gpt_init$' exported.txt && ! grep -q '^dt_mem_alloc$' exported.txt &&
    ok "exports $(wc -l < exported.txt) dt_ symbols, internals hidden" || bad "exports: $(tr '\n' ' ' < exported.txt)"
[ "$("$P/bin/dtrain" --version)" = "dtrain $version" ] && ok "installed dtrain --version" ||
    bad "installed dtrain --version"

# headers: self-contained, each alone with only the prefix on the include path
for h in "$P"/include/dtrain/*.h; do
    if grep -E '^#include "' "$h" | grep -vq '"dtrain/'; then
        bad "$(basename "$h") includes outside dtrain/: $(grep -E '^#include "' "$h" | grep -v '"dtrain/')"
    fi
    for std in c99 c11; do
        if echo "#include <dtrain/$(basename "$h")>" | cc -std=$std -fsyntax-only -Wall -Wextra \
                -Werror -I"$P/include" -x c - 2> hdr.err; then
            ok "$(basename "$h") compiles alone ($std)"
        else
            bad "$(basename "$h") alone ($std): $(head -2 hdr.err)"
        fi
    done
done

# programs outside the tree: pkg-config alone
export PKG_CONFIG_PATH=$P/$lib/pkgconfig
[ "$(pkg-config --modversion dtrain)" = "$version" ] && ok "pkg-config --modversion" || bad "modversion"
mkdir app && cp "$src/examples/booster_train.c" "$src/examples/hf_eval_sample.c" app/
for prog in booster_train hf_eval_sample; do
    # shellcheck disable=SC2046
    if cc -std=c11 -Wall -Wextra -Werror app/$prog.c -o app/$prog $(pkg-config --cflags --libs dtrain) \
            2> cc.err; then ok "built $prog with pkg-config"; else bad "build $prog: $(head -3 cc.err)"; fi
done
# a header used without its library: the link names the missing dtrain symbol
# shellcheck disable=SC2046
if cc app/booster_train.c -o nolib $(pkg-config --cflags dtrain) 2> nolib.err; then
    bad "linked without -ldtrain"
else
    grep -q "undefined reference to .dt_dist_init" nolib.err && ok "without the library: undefined dt_dist_init" ||
        bad "without the library: $(head -2 nolib.err)"
fi
export LD_LIBRARY_PATH=$P/$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# grep -q may stop reading before ldd ends, which pipefail would count as a failure
ldd app/booster_train > ldd.txt; grep -q "libdtrain.so.$abi => $P/$lib/" ldd.txt && ok "runs against the installed libdtrain.so.$abi" ||
    bad "ldd: $(ldd app/booster_train | grep dtrain)"

dt=$P/bin/dtrain
"$dt" prepare --input "$src/src/core" --out data > /dev/null 2>&1 || { bad "prepare"; finish; }
mpi() { timeout 300 mpirun --oversubscribe -x LD_LIBRARY_PATH -np "$@"; }
mpi 2 app/booster_train data/train.bin data/val.bin > bt.out 2> bt.err
rc=$?
read -r first last <<< "$(sed -n 's/^first loss \([0-9.]*\), last loss \([0-9.]*\).*/\1 \2/p' bt.out)"
if [ $rc -eq 0 ] && [ -n "${last:-}" ] && grep -q "on 2 data-parallel ranks" bt.out &&
        python3 -c "import sys; sys.exit(not float('$last') < float('$first'))"; then
    ok "booster_train on 2 ranks: loss $first -> $last"
else
    bad "booster_train on 2 ranks (rc $rc)"; cat bt.out bt.err | tail -5
fi

# a run that exports HF safetensors, then the second program evaluates and samples them
"$dt" train --config "$src/configs/tiny-gpt2.ini" --data.train=data/train.bin --data.val=data/val.bin \
    --train.steps=4 --train.seq_len=128 --model.max_seq_len=128 --train.export=w.safetensors \
    --plugin.type=zero2 --print-config > run.ini && "$dt" train --config run.ini > train.log 2>&1 ||
    { bad "export run"; tail -3 train.log; finish; }
for np in 1 2; do
    mpi $np app/hf_eval_sample run.ini w.safetensors "int main" > eval$np.out 2> eval$np.err &&
        ok "hf_eval_sample on $np rank(s): $(head -1 eval$np.out)" || { bad "hf_eval_sample np $np"; cat eval$np.err; }
done
python3 - <<'PY' && ok "val loss on 2 ranks = on 1 rank" || bad "val loss differs"
import re
a, b = (float(re.search(r'val loss ([0-9.]+)', open(f'eval{n}.out', errors='replace').readline()).group(1)) for n in (1, 2))
print(f'     val loss np1 {a:.6f} np2 {b:.6f}')
raise SystemExit(not abs(a - b) <= 1e-5 * abs(a))
PY
"$dt" sample --checkpoint w.safetensors --prompt "int main" --tokens 60 --seed 1337 \
    --temperature 0.8 > cli_sample.out 2> /dev/null
for np in 1 2; do
    sed '1,/^--- sample ---$/d' eval$np.out > sample$np.out
    cmp -s sample$np.out cli_sample.out && ok "sample on $np rank(s) = dtrain sample" ||
        { bad "sample np $np differs from dtrain sample"; od -c sample$np.out | head -3; od -c cli_sample.out | head -3; }
done

# the CMake package: find_package(dtrain) gives dtrain::dtrain
mkdir cm && cat > cm/CMakeLists.txt <<'CM'
cmake_minimum_required(VERSION 3.18)
project(app C)
find_package(dtrain REQUIRED)
add_executable(hf_eval_sample ${APP_SRC}/hf_eval_sample.c)
target_link_libraries(hf_eval_sample PRIVATE dtrain::dtrain)
CM
if cmake -S cm -B cm/build -DCMAKE_PREFIX_PATH="$P" -DAPP_SRC="$work/app" > cm.log 2>&1 &&
        cmake --build cm/build >> cm.log 2>&1; then
    mpi 2 cm/build/hf_eval_sample run.ini w.safetensors "int main" > cm.out 2> cm.err &&
        cmp -s cm.out eval2.out && ok "find_package(dtrain) build gives the same result" ||
        { bad "find_package build run"; cat cm.err | tail -3; }
else
    bad "find_package(dtrain)"; tail -5 cm.log
fi
finish

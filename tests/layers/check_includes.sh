#!/bin/bash
# The layers of DESIGN.md hold: a file includes only headers of its own layer or of the layers
# it sits on, mpi.h appears only in dist/, dnnl.h only in kernels/dnnl/, the library never
# calls exit() or abort() outside core/status.c's assertion, dt_dist_abort and cli/, and every
# header compiles on its own.
#   check_includes.sh SRC_DIR [BUILD_INCLUDE_DIR]   (the second: where generated headers are)
set -uo pipefail
gen=${2:+-I$2}
cd "$1" || exit 2
declare -A allowed=(
    [core]="core dtrain"
    [kernels]="core kernels"
    [io]="core io"
    [plan]="core plan"
    [dist]="core plan dist dtrain"
    [optim]="core kernels io optim"
    [nn]="core kernels nn"
    [models]="core kernels io nn models"
    [train]="core kernels io nn models plan dist optim train dtrain"
    [cli]="core kernels io nn models plan dist optim train cli dtrain"
    [dtrain]="dtrain"
)
passed=0 failed=0
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
for f in $(find src include -name '*.[ch]' | sort); do
    layer=$(echo "$f" | cut -d/ -f2)
    [ "$layer" = dnnl ] && layer=kernels
    for inc in $(grep -oE '^#include "[a-z_]+/' "$f" | sed 's/#include "//; s/\///'); do
        case " ${allowed[$layer]} " in
            *" $inc "*) passed=$((passed + 1)) ;;
            *) fail "$f ($layer) includes $inc/" ;;
        esac
    done
done
for f in $(grep -rlE '#include <mpi\.h>' src include); do
    case "$f" in src/dist/*) ;; *) fail "$f includes mpi.h outside dist/" ;; esac
done
for f in $(grep -rlE '#include <(oneapi/dnnl/)?dnnl\.h>' src include); do
    case "$f" in src/kernels/dnnl/*) ;; *) fail "$f includes dnnl.h outside kernels/dnnl/" ;; esac
done
while read -r hit; do
    case "$hit" in src/cli/*|src/core/status.c:*|src/dist/mpi_comm.c:*) ;; *) fail "exit/abort in library code: $hit" ;; esac
done < <(grep -rnE '\b(exit|abort|_Exit)\s*\(' src | grep -v '^\S*:\s*/\?\*' )
# every header compiles on its own (includes what it uses)
for h in $(find src include -name '*.h' | sort); do
    if echo "#include \"${h#*/}\"" | ${CC:-cc} -std=gnu11 -fsyntax-only -Wall -Werror -Isrc -Iinclude $gen \
            -x c - 2> /tmp/dtrain-header-check.$$; then
        passed=$((passed + 1))
    else
        fail "$h does not compile alone: $(head -1 /tmp/dtrain-header-check.$$)"
    fi
done
rm -f /tmp/dtrain-header-check.$$
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

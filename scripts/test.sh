#!/bin/bash
# Builds (if needed) and runs dtrain's whole test suite: unit tests of every layer, the
# PyTorch cross-checks and the command-line error cases. The README's second command.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j 2

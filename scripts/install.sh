#!/bin/bash
# Installs dtrain's Debian packages and builds it (Release) into build/.
# Used by the README's first command and by CI.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
    build-essential cmake pkg-config git ca-certificates \
    libdnnl-dev libopenmpi-dev openmpi-bin libcjson-dev libinih-dev libgif-dev \
    libavformat-dev libavcodec-dev libswscale-dev libavutil-dev ffmpeg \
    fortunes python3 python3-numpy python3-torch iproute2 time bc nodejs \
    slurmctld slurmd slurm-client munge clang libclang-rt-dev libomp-dev > /dev/null
# npm, for the reference tokenizers the tests fetch: Debian's nodejs comes without it, while a
# nodejs from elsewhere (NodeSource) bundles its own and conflicts with Debian's npm package
command -v npm > /dev/null ||
    $SUDO apt-get install -y -qq --no-install-recommends npm > /dev/null
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j "$(nproc)"

#!/usr/bin/env bash
# The README's first command: install the dependencies, build, and run the main job
# (the pipeline-parallel demo on two devices; on a machine without a GPU it runs on the
# host backend, with a one-line notice).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
source scripts/env.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
./build/pengine --mode pp --gpus 0,1

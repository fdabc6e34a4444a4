#!/usr/bin/env bash
# Sets up, builds (release preset) and runs the whole test suite. `.ci/run` calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)"
ctest --preset release -j "$(nproc)" "$@"

#!/usr/bin/env bash
# Sets up, checks the formatting, builds with warnings as errors (the ci preset) and runs the
# whole test suite. `.ci/run` calls this; extra arguments go to ctest (e.g. -L golden).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/format.sh --check
cmake --preset ci >/dev/null
cmake --build --preset ci -j "$(nproc)"
ctest --preset ci -j "$(nproc)" "$@"

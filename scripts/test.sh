#!/usr/bin/env bash
# Sets up, checks the formatting and that clang accepts every source, builds with warnings as
# errors (the ci preset), runs the whole test suite, then replays the fuzz corpora under ASan +
# UBSan. `.ci/run` calls this; extra arguments go to the main ctest run (e.g. -L golden).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/format.sh --check
# Every source through clang's front end as well (C++17 as clang reads it, its warnings).
bash scripts/clang_check.sh
cmake --preset ci >/dev/null
cmake --build --preset ci -j "$(nproc)"
ctest --preset ci -j "$(nproc)" "$@"
# The fuzz corpora again under AddressSanitizer + UBSan (docs/reliability.md): a parser
# regression that corrupts memory without crashing fails here.
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$(nproc)" --target fuzz_targets
ctest --preset asan -L fuzz

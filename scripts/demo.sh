#!/usr/bin/env bash
# The main job on a built-in default, no downloads: set up, build, then train a small LoL on
# the paper's maze task (5 x 5 mazes streamed on the fly, all five strategies, the strategy
# descriptor router-only) for a few minutes, and print what it learned: held-out loss, a greedy
# sample scored per strategy, and the routes it took.
# Ctrl-C stops with a usable checkpoint; `build/release/lol train --resume runs/demo` resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target lol
out=${1:-runs/demo}
build/release/lol train --preset maze-demo --data task:maze:5 --steps 1500 \
  --train-set seq_len=256 --train-set eval_every=250 --out "$out" --overwrite

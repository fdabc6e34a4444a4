#!/usr/bin/env bash
# The main job on a built-in default, no downloads: set up, build, then train a small LoL on
# the built-in strategy task (copy / reverse / sort, with a router-only strategy descriptor),
# and print what it learned: held-out loss, a greedy sample and its routes.
# Ctrl-C stops with a usable checkpoint; `build/release/lol train --resume runs/demo` resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target lol
out=${1:-runs/demo}
build/release/lol train --preset tiny --set vocab_size=20 --data task:copy --steps 1500 \
  --train-set eval_every=250 --out "$out" --overwrite
build/release/lol info --model "$(ls -d "$out"/checkpoints/step_* | tail -1)"

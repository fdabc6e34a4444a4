#!/usr/bin/env bash
# The main job on a built-in default, no downloads: set up, build, then
#  (a) train a small LoL on the paper's maze task live (5 x 5 mazes streamed on the fly, all five
#      strategies, the strategy descriptor router-only) with two data-parallel workers for five
#      to six minutes, printing held-out loss and teacher-forced next-token accuracy as they climb,
#      then greedy samples scored per strategy and the routes they took;
#  (b) strategy control (paper 4.1.3) of the model the cpu recipe trained, shipped in
#      models/maze-strategy-cpu (a few minutes of live training cannot show it on two cores):
#      mode paths from held-out mazes, then greedy traces on 100 other mazes per strategy with
#      the true descriptor and with the filler and each strategy's mode path forced, with both
#      confusion matrices and one maze per strategy and condition shown beside its reference.
# The full experiment (longer training, every intervention, curves) is scripts/strategy_control.sh
# (docs/experiments.md). Ctrl-C stops with a usable checkpoint; `build/release/lol train --resume
# runs/demo --nproc 2` resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target lol
out=${1:-runs/demo}
lol=build/release/lol
echo "== (a) live training: maze-demo on 5 x 5 mazes, 4000 steps of 2 x 1024 tokens"
# Measured choices (docs/experiments.md): 2 + 4 + 2 layers with windows of 32 learn faster per
# step than 1 + 4 + 1 with 16; lr 6e-3; at this size one thread per process beats two threads in
# one, so two single-threaded workers share each step; rows of 1024 tokens hold about a fifth more
# tokens per step than 4 rows of 256 (less padding after the last whole document of a row) for
# about the same time per step, and learn faster per step; the lr decays linearly to zero (wsd
# with decay_fraction 1): 4000 steps of it reach what 5000 of cosine to a tenth did (three seeds).
"$lol" --threads 1 train --preset maze-demo --data task:maze:5 --steps 4000 \
  --train-set seq_len=1024 --train-set batch_rows=1 --train-set grad_accum=2 \
  --train-set lr=6e-3 --train-set schedule=wsd --train-set decay_fraction=1 \
  --train-set min_lr_ratio=0 --train-set eval_every=500 \
  --train-set eval_batches=16 --nproc 2 --out "$out" --overwrite
echo "== (b) strategy control of the shipped model models/maze-strategy-cpu (100 held-out mazes per strategy)"
"$lol" path curve models/maze-strategy-cpu --task maze --size 5 --count 100 --show 1

#!/usr/bin/env bash
# The maze strategy-control experiment end to end (paper 4.1.3, figure 3; docs/experiments.md):
# train a LoL on mazes of all five strategies, follow strategy control along training (mode
# paths from held-out sequences, then greedy traces with the true descriptor and with the filler
# and each strategy's mode path forced, at every checkpoint), and at the end evaluate the last
# model on 100 held-out mazes per strategy under every intervention, with the report page.
#   scripts/maze_strategy.sh [OUT_DIR] [PROFILE] [STEPS]
#     PROFILE cpu (default): maze-demo on 5 x 5 mazes, fp32, two local data-parallel workers
#             gpu: maze-cpu's shape on 8 x 8 mazes (the paper's), bf16 on cuda (scripts/cuda_check.sh
#                  builds the engine there)
#             toy: the cpu recipe in seconds (tests/maze_strategy_test.sh)
#     STEPS overrides the profile's step count.
# Environment: LOL (binary), MAZE_TRAIN_SET (extra --train-set overrides, key=value separated by
# spaces) and MAZE_SET (extra --set overrides) to try the levers (docs/experiments.md);
# MAZE_DRY_RUN=1 only writes the run's config.json and train_config.json into OUT_DIR/run
# (`lol train --dry-run`; tests/shipped_model_test.sh compares them with the shipped model's).
# Stages whose output exists are skipped and an interrupted run resumes, so rerunning continues.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/maze-strategy}
profile=${2:-cpu}
lol=${LOL:-build/release/lol}
[ -x "$lol" ] || { echo "maze_strategy.sh: build first (cmake --preset release && cmake --build --preset release)" >&2; exit 1; }

device=()
case "$profile" in
  cpu)
    size=5 steps=${3:-40000} count=100 curve_count=20 every=2 nproc=2
    model=(--preset maze-demo)
    # 8 rows of 256 tokens a step (two to three 5 x 5 sequences of 108-142 tokens per row), dealt
    # to the two workers; lr 6e-3 measured best of 3e-3 / 6e-3 / 1e-2 (docs/experiments.md).
    train=(--train-set seq_len=256 --train-set batch_rows=4 --train-set grad_accum=2
           --train-set lr=6e-3 --train-set eval_every=500
           --train-set eval_batches=16 --train-set log_every=50
           --train-set "checkpoint_every=$((steps / 20 > 0 ? steps / 20 : 1))"
           --train-set keep_checkpoints=1000) ;;
  gpu)
    size=8 steps=${3:-6000} count=100 curve_count=20 every=2 nproc=1
    device=(--device cuda)
    model=(--preset maze-cpu)
    train=(--train-set seq_len=512 --train-set batch_rows=32 --train-set lr=3e-3
           --train-set precision=bf16 --train-set warmup_steps=200 --train-set eval_every=500
           --train-set "checkpoint_every=$((steps / 20 > 0 ? steps / 20 : 1))"
           --train-set keep_checkpoints=1000) ;;
  toy)
    size=5 steps=${3:-6} count=2 curve_count=2 every=1 nproc=2
    model=(--preset maze-demo --set d_model=16 --set n_heads=2 --set n_kv_heads=1
           --set ffn_hidden=32)
    train=(--train-set seq_len=256 --train-set batch_rows=2 --train-set grad_accum=2
           --train-set eval_every=3 --train-set eval_batches=1 --train-set checkpoint_every=3
           --train-set keep_checkpoints=1000) ;;
  *) echo "maze_strategy.sh: PROFILE must be cpu, gpu or toy, got '$profile'" >&2; exit 2 ;;
esac
for s in ${MAZE_SET:-}; do model+=(--set "$s"); done
for s in ${MAZE_TRAIN_SET:-}; do train+=(--train-set "$s"); done
mkdir -p "$out"
run="$out/run"

# 1. Train (or resume). Data: mazes streamed on the fly, document i is maze i / 5 with strategy
#    i % 5 + 1, the descriptor router-only (SPEC 3.1).
if [ -n "${MAZE_DRY_RUN:-}" ]; then
  "$lol" "${device[@]}" train "${model[@]}" --data "task:maze:$size" --steps "$steps" "${train[@]}" \
    --out "$run" --dry-run
  exit 0
fi
if [ ! -f "$out/trained" ]; then
  echo "== train ($profile: ${size}x${size} mazes, $steps steps)"
  par=()
  [ "$nproc" -gt 1 ] && par=(--nproc "$nproc")
  if [ -f "$run/train_config.json" ]; then
    "$lol" "${device[@]}" train --resume "$run" "${par[@]}"
  else
    "$lol" "${device[@]}" train "${model[@]}" --data "task:maze:$size" --steps "$steps" "${train[@]}" \
      --out "$run" "${par[@]}"
  fi
  touch "$out/trained"
fi

# 2. The learning curves of (a) descriptor and (b) forced mode path against tokens.
if [ ! -f "$out/curve.json" ]; then
  echo "== strategy control at every ${every}th checkpoint"
  "$lol" "${device[@]}" path curve "$run" --task maze --size "$size" --count "$curve_count" \
    --every "$every" --json "$out/curve.json" --out "$out/curve.html" \
    --title "Maze strategy control during training ($profile recipe)" >"$out/curve.md"
fi

# 3. The last model (eval.json is written atomically, last) on held-out mazes: mode paths from seed-0 mazes (with the route-flip
#    measurement), every intervention on seed-1 mazes, the report page.
if [ ! -f "$out/eval.json" ]; then
  echo "== final evaluation ($count mazes per strategy)"
  "$lol" "${device[@]}" route --model "$run" --task maze --size "$size" --count "$count" --seed 0 \
    --perturb 0.05 --out "$out/routes.jsonl"
  "$lol" path extract "$out/routes.jsonl" --out "$out/paths" >"$out/paths.txt"
  "$lol" "${device[@]}" path eval --model "$run" --task maze --size "$size" --paths "$out/paths" \
    --count "$count" --seed 1 --interventions descriptor,filler,full,id,gate,permute,random,depths \
    --depth-width 1 --samples "$out/samples.jsonl" --json "$out/eval.json" >"$out/eval.txt"
fi
"$lol" report "$out/routes.jsonl" --eval "$out/eval.json" \
  --title "Maze strategy control ($profile recipe)" --out "$out/report.html" >/dev/null

# 4. The summary: the curve, the mode paths, every condition and the confusion matrices.
{
  echo "# Maze strategy control ($profile recipe, $size x $size mazes)"
  echo
  echo "## Along training (descriptor, and forced mode paths with the filler)"
  cat "$out/curve.md"
  echo
  echo "## Mode paths ($count mazes per strategy)"
  cat "$out/paths.txt"
  echo
  echo "## The last model, every intervention ($count held-out mazes per strategy)"
  cat "$out/eval.txt"
} >"$out/summary.md"
cat "$out/summary.md"
echo "maze_strategy.sh: $out/summary.md, $out/curve.html, $out/report.html"

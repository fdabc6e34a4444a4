#!/usr/bin/env bash
# The strategy-control experiment end to end on mazes or sudoku (paper 4.1.3, figure 3;
# docs/experiments.md): train a LoL on puzzles of all five strategies, follow strategy control
# along training (mode paths from held-out sequences, then greedy traces with the true
# descriptor and with the filler and each strategy's mode path forced, at checkpoints), and at
# the end evaluate the last model on held-out puzzles under every intervention, with the report.
#   scripts/strategy_control.sh [OUT_DIR (runs/PROFILE)] [PROFILE] [STEPS]
#     PROFILE maze-cpu (default): maze-demo on 5 x 5 mazes, fp32, two local data-parallel workers
#             maze-gpu: maze-cpu's shape on 8 x 8 mazes (the paper's), bf16 on cuda
#                       (scripts/cuda_check.sh builds the engine there)
#             maze-toy: the maze-cpu recipe in seconds (tests/strategy_control_test.sh)
#             sudoku-cpu: sudoku-demo (maze-demo with windows of 64) on 9 x 9 sudoku, fp32, two
#                         workers
#             sudoku-toy: the sudoku-cpu recipe in seconds (tests/strategy_control_test.sh)
#     STEPS overrides the profile's step count.
# Environment: LOL (binary), STRATEGY_TRAIN_SET (extra --train-set overrides, key=value separated
# by spaces) and STRATEGY_SET (extra --set overrides) to try the levers (docs/experiments.md);
# STRATEGY_MAZE_SIZE (maze profiles: the maze side trained on and evaluated, the profile's
# otherwise), STRATEGY_DATA (the training data spec instead of that size's task stream, e.g. a
# `mix:` of sizes; curves, mode paths and evaluations stay on STRATEGY_MAZE_SIZE), STRATEGY_SIZES
# (maze profiles: other maze sides, separated by spaces, on which the last model is also
# evaluated, with the descriptor and with the mode paths of the evaluated size forced);
# STRATEGY_DRY_RUN=1 only writes the run's config.json and train_config.json into OUT_DIR/run
# (`lol train --dry-run`; tests/shipped_model_test.sh compares them with the shipped model's).
# Stages whose output exists are skipped and an interrupted run resumes, so rerunning continues.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${2:-maze-cpu}
out=${1:-runs/$profile}
lol=${LOL:-build/release/lol}
[ -x "$lol" ] || { echo "strategy_control.sh: build first (cmake --preset release && cmake --build --preset release)" >&2; exit 1; }

device=()
case "$profile" in
  maze-cpu)
    task=maze size=5 steps=${3:-40000} count=100 curve_count=20 every=2 nproc=2
    model=(--preset maze-demo)
    # 8 rows of 256 tokens a step (two to three 5 x 5 sequences of 108-142 tokens per row), dealt
    # to the two workers; lr 6e-3 measured best of 3e-3 / 6e-3 / 1e-2 (docs/experiments.md).
    train=(--train-set seq_len=256 --train-set batch_rows=4 --train-set grad_accum=2
           --train-set lr=6e-3 --train-set eval_every=500
           --train-set eval_batches=16 --train-set log_every=50
           --train-set "checkpoint_every=$((steps / 20 > 0 ? steps / 20 : 1))"
           --train-set keep_checkpoints=1000) ;;
  maze-gpu)
    task=maze size=8 steps=${3:-6000} count=100 curve_count=20 every=2 nproc=1
    device=(--device cuda)
    model=(--preset maze-cpu)
    train=(--train-set seq_len=512 --train-set batch_rows=32 --train-set lr=3e-3
           --train-set precision=bf16 --train-set warmup_steps=200 --train-set eval_every=500
           --train-set "checkpoint_every=$((steps / 20 > 0 ? steps / 20 : 1))"
           --train-set keep_checkpoints=1000) ;;
  maze-toy)
    task=maze size=5 steps=${3:-6} count=2 curve_count=2 every=1 nproc=2
    model=(--preset maze-demo --set d_model=16 --set n_heads=2 --set n_kv_heads=1
           --set ffn_hidden=32)
    train=(--train-set seq_len=256 --train-set batch_rows=2 --train-set grad_accum=2
           --train-set eval_every=3 --train-set eval_batches=1 --train-set checkpoint_every=3
           --train-set keep_checkpoints=1000) ;;
  sudoku-cpu)
    task=sudoku steps=${3:-6000} count=20 curve_count=10 every=4 nproc=2
    model=(--preset sudoku-demo)
    # 2 rows of 2,048 tokens per micro-batch, two micro-batches a step (one per worker): about
    # 13 sequences of 360-1,100 tokens a step; backtracking traces (S5) can run past 5,000
    # tokens and are cut at 2,048.
    train=(--train-set seq_len=2048 --train-set batch_rows=2 --train-set grad_accum=2
           --train-set lr=6e-3 --train-set eval_every=500 --train-set eval_batches=8
           --train-set log_every=50
           --train-set "checkpoint_every=$((steps / 20 > 0 ? steps / 20 : 1))"
           --train-set keep_checkpoints=1000) ;;
  sudoku-toy)
    task=sudoku steps=${3:-4} count=1 curve_count=1 every=1 nproc=2
    model=(--preset sudoku-demo --set d_model=16 --set n_heads=2 --set n_kv_heads=1
           --set ffn_hidden=32 --set max_seq_len=512)
    train=(--train-set seq_len=512 --train-set batch_rows=1 --train-set grad_accum=2
           --train-set eval_every=2 --train-set eval_batches=1 --train-set checkpoint_every=2
           --train-set keep_checkpoints=1000) ;;
  *) echo "strategy_control.sh: PROFILE must be maze-cpu, maze-gpu, maze-toy, sudoku-cpu or sudoku-toy, got '$profile'" >&2
     exit 2 ;;
esac
other_sizes=(${STRATEGY_SIZES:-})
[ -n "${STRATEGY_MAZE_SIZE:-}" ] && other_sizes=("$STRATEGY_MAZE_SIZE" "${other_sizes[@]}")
if [ -n "${STRATEGY_SIZES:-}${STRATEGY_MAZE_SIZE:-}" ]; then
  [ "$task" = maze ] || { echo "strategy_control.sh: STRATEGY_SIZES and STRATEGY_MAZE_SIZE are for maze profiles, not $profile" >&2; exit 2; }
  for n in "${other_sizes[@]}"; do
    [[ "$n" =~ ^[0-9]+$ ]] || { echo "strategy_control.sh: STRATEGY_SIZES and STRATEGY_MAZE_SIZE must be maze sides (numbers), got '$n'" >&2; exit 2; }
  done
fi
if [ -n "${STRATEGY_MAZE_SIZE:-}" ]; then
  size=$STRATEGY_MAZE_SIZE
  other_sizes=("${other_sizes[@]:1}")
fi
for s in ${STRATEGY_SET:-}; do model+=(--set "$s"); done
for s in ${STRATEGY_TRAIN_SET:-}; do train+=(--train-set "$s"); done
# What the stages say and pass for the task: the data stream, the maze side, the names.
if [ "$task" = maze ]; then
  data="task:maze:$size" size_arg=(--size "$size") title=Maze puzzles=mazes shape="$size x $size mazes"
else
  data="task:sudoku" size_arg=() title=Sudoku puzzles=puzzles shape="9 x 9 sudoku"
fi
data=${STRATEGY_DATA:-$data}
mkdir -p "$out"
run="$out/run"

# 1. Train (or resume). Data: puzzles streamed on the fly, document i is puzzle i / 5 with
#    strategy i % 5 + 1, the descriptor router-only (SPEC 3.1).
if [ -n "${STRATEGY_DRY_RUN:-}" ]; then
  "$lol" "${device[@]}" train "${model[@]}" --data "$data" --steps "$steps" "${train[@]}" \
    --out "$run" --dry-run
  exit 0
fi
if [ ! -f "$out/trained" ]; then
  echo "== train ($profile: $data, $steps steps)"
  par=()
  [ "$nproc" -gt 1 ] && par=(--nproc "$nproc")
  if [ -f "$run/train_config.json" ]; then
    "$lol" "${device[@]}" train --resume "$run" "${par[@]}"
  else
    "$lol" "${device[@]}" train "${model[@]}" --data "$data" --steps "$steps" "${train[@]}" \
      --out "$run" "${par[@]}"
  fi
  touch "$out/trained"
fi

# 2. The learning curves of (a) descriptor and (b) forced mode path against tokens.
if [ ! -f "$out/curve.json" ]; then
  echo "== strategy control at every ${every}th checkpoint"
  "$lol" "${device[@]}" path curve "$run" --task "$task" "${size_arg[@]}" --count "$curve_count" \
    --every "$every" --json "$out/curve.json" --out "$out/curve.html" \
    --title "$title strategy control during training ($profile recipe)" >"$out/curve.md"
fi

# 3. The last model (eval.json is written atomically, last) on held-out puzzles: mode paths from
#    seed-0 puzzles (with the route-flip measurement), every intervention on seed-1 puzzles, the
#    report page. The mode paths by SPEC 3.6's rule (argmax of the mean router probability), and
#    by the expert the windows ran most often (`--rule routed`, the balancing bias included),
#    forced in full.
if [ ! -f "$out/eval.json" ]; then
  echo "== final evaluation ($count $puzzles per strategy)"
  "$lol" "${device[@]}" route --model "$run" --task "$task" "${size_arg[@]}" --count "$count" \
    --seed 0 --perturb 0.05 --out "$out/routes.jsonl"
  "$lol" path extract "$out/routes.jsonl" --out "$out/paths" >"$out/paths.txt"
  "$lol" path extract "$out/routes.jsonl" --rule routed --out "$out/paths-routed" \
    >"$out/paths-routed.txt"
  "$lol" "${device[@]}" path eval --model "$run" --task "$task" "${size_arg[@]}" \
    --paths "$out/paths-routed" --count "$count" --seed 1 --interventions full \
    --json "$out/eval-routed.json" >"$out/eval-routed.txt"
  "$lol" "${device[@]}" path eval --model "$run" --task "$task" "${size_arg[@]}" \
    --paths "$out/paths" --count "$count" --seed 1 \
    --interventions descriptor,filler,full,id,gate,permute,random,depths,unbiased --depth-width 1 \
    --samples "$out/samples.jsonl" --json "$out/eval.json" >"$out/eval.txt"
fi
# 3b. Other maze sizes (STRATEGY_SIZES): the last model on n x n mazes, with the descriptor and
#     with the mode paths of stage 3 (both rules) forced on the filler.
for n in "${other_sizes[@]}"; do
  if [ ! -f "$out/size-$n/eval.json" ]; then
    echo "== $n x $n mazes ($count per strategy)"
    mkdir -p "$out/size-$n"
    "$lol" "${device[@]}" path eval --model "$run" --task maze --size "$n" \
      --paths "$out/paths-routed" --count "$count" --seed 1 --interventions full \
      --json "$out/size-$n/eval-routed.json" >"$out/size-$n/eval-routed.txt"
    "$lol" "${device[@]}" path eval --model "$run" --task maze --size "$n" \
      --paths "$out/paths" --count "$count" --seed 1 --interventions descriptor,filler,full \
      --json "$out/size-$n/eval.json" >"$out/size-$n/eval.txt"
  fi
done
"$lol" path stats "$out/routes.jsonl" --json "$out/stats.json" >"$out/stats.txt"
"$lol" report "$out/routes.jsonl" --eval "$out/eval.json" \
  --title "$title strategy control ($profile recipe)" --out "$out/report.html" >/dev/null

# 4. The summary: the curve, the mode paths, every condition and the confusion matrices.
{
  echo "# $title strategy control ($profile recipe, $shape)"
  echo
  [ -n "${STRATEGY_DATA:-}" ] && { echo "Trained on \`$data\`; evaluated on $shape."; echo; }
  echo "## Along training (descriptor, and forced mode paths with the filler)"
  cat "$out/curve.md"
  echo
  echo "## Mode paths ($count $puzzles per strategy)"
  cat "$out/paths.txt"
  echo
  echo "## Routes of the last model (utilisation, margins, windows the balancing bias decided)"
  cat "$out/stats.txt"
  echo
  echo "## The last model, every intervention ($count held-out $puzzles per strategy)"
  cat "$out/eval.txt"
  echo
  echo "## Mode paths by the routed rule (the expert the windows ran most often), forced"
  cat "$out/paths-routed.txt"
  echo
  cat "$out/eval-routed.txt"
  for n in "${other_sizes[@]}"; do
    echo
    echo "## $n x $n mazes: the descriptor, and the $shape mode paths forced ($count per strategy)"
    cat "$out/size-$n/eval.txt"
    echo
    echo "By the routed rule:"
    cat "$out/size-$n/eval-routed.txt"
  done
} >"$out/summary.md"
cat "$out/summary.md"
echo "strategy_control.sh: $out/summary.md, $out/curve.html, $out/report.html"

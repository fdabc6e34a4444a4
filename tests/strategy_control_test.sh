#!/usr/bin/env bash
# scripts/strategy_control.sh end to end at toy size, on mazes and on sudoku: trains with two
# workers, writes the strategy-control curve at every checkpoint, the final evaluation under every
# intervention, the report and the summary; a rerun skips every finished stage; a bad profile is
# refused.
source "$(dirname "$0")/lib.sh"

LOL=$lol bash "$root/scripts/strategy_control.sh" "$tmp/ms" maze-toy >"$tmp/first.txt" 2>&1 ||
  { cat "$tmp/first.txt"; fail "the toy recipe failed"; }
for f in run/checkpoints/step_00000003 run/checkpoints/step_00000006 curve.json curve.html \
         routes.jsonl paths/bfs.json paths-routed/bfs.json eval-routed.json eval.json \
         samples.jsonl stats.json report.html summary.md; do
  [ -e "$tmp/ms/$f" ] || fail "missing $f"
done
# One curve point per checkpoint, at its step and tokens (2 rows x 256 x 2 micro-batches).
grep -q '"step": 3,' "$tmp/ms/curve.json" || fail "curve.json lacks step 3"
grep -q '"tokens": 6144' "$tmp/ms/curve.json" || fail "curve.json lacks step 6's tokens"
[ "$(grep -c '"distinct_paths"' "$tmp/ms/curve.json")" = 2 ] || fail "curve.json: not 2 points"
for s in "## Along training" "| 6 | 6144 |" "distinct paths among 5 labels" "depths 4-4" \
         "forced mode paths (full)" "## Mode paths by the routed rule" \
         "windows the balancing bias decided (router choice not the argmax of p):" "unbiased " \
         "the descriptor with the balancing bias at zero (unbiased), requested against followed"; do
  grep -qF -- "$s" "$tmp/ms/summary.md" || fail "summary.md lacks '$s'"
done
grep -q "<svg" "$tmp/ms/curve.html" || fail "curve.html has no plot"

LOL=$lol bash "$root/scripts/strategy_control.sh" "$tmp/ms" maze-toy >"$tmp/second.txt" 2>&1 ||
  { cat "$tmp/second.txt"; fail "the rerun failed"; }
if grep -q "^== " "$tmp/second.txt"; then cat "$tmp/second.txt"; fail "the rerun redid a stage"; fi
cmp -s "$tmp/ms/summary.md" <(sed -n '/^# Maze/,/^strategy_control.sh:/p' "$tmp/second.txt" | sed '$d') ||
  fail "the rerun's summary differs"

# Other maze sizes on the finished run: only the new stage runs, and the summary gains its section
# (the descriptor and the 5 x 5 mode paths forced, on 4 x 4 mazes).
STRATEGY_SIZES=4 LOL=$lol bash "$root/scripts/strategy_control.sh" "$tmp/ms" maze-toy >"$tmp/sizes.txt" 2>&1 ||
  { cat "$tmp/sizes.txt"; fail "the run with STRATEGY_SIZES=4 failed"; }
[ "$(grep "^== " "$tmp/sizes.txt")" = "== 4 x 4 mazes (2 per strategy)" ] ||
  { cat "$tmp/sizes.txt"; fail "STRATEGY_SIZES=4 did not run exactly the other-size stage"; }
for f in size-4/eval.json size-4/eval-routed.json; do
  [ -e "$tmp/ms/$f" ] || fail "missing $f"
done
for s in "## 4 x 4 mazes: the descriptor, and the 5 x 5 mazes mode paths forced" \
         "By the routed rule:"; do
  grep -qF -- "$s" "$tmp/ms/summary.md" || fail "summary.md lacks '$s'"
done
for c in descriptor filler full; do
  grep -q "\"condition\": \"$c\"" "$tmp/ms/size-4/eval.json" || fail "size-4/eval.json has no $c result"
done
for bad in "4 x" "four"; do
  if STRATEGY_SIZES=$bad LOL=$lol bash "$root/scripts/strategy_control.sh" "$tmp/ms" maze-toy 2>"$tmp/err.txt" >/dev/null; then
    fail "STRATEGY_SIZES='$bad' was accepted"
  fi
  grep -q "must be maze sides (numbers), got" "$tmp/err.txt" || fail "no clear error for STRATEGY_SIZES='$bad'"
done

# STRATEGY_DATA trains on another data spec (a mixture of sizes), written into the run's training
# configuration; a dry run trains nothing.
STRATEGY_DRY_RUN=1 STRATEGY_MAZE_SIZE=4 STRATEGY_DATA="mix:task:maze:4,task:maze:5" LOL=$lol \
  bash "$root/scripts/strategy_control.sh" "$tmp/mix" maze-toy >"$tmp/mix.txt" 2>&1 ||
  { cat "$tmp/mix.txt"; fail "the dry run with STRATEGY_DATA failed"; }
grep -q '"data": *"mix:task:maze:4,task:maze:5"' "$tmp/mix/run/train_config.json" ||
  fail "STRATEGY_DATA is not the run's data: $(grep '"data"' "$tmp/mix/run/train_config.json")"

# Sudoku: the same stages on 9 x 9 puzzles (no maze side passed); a step is 2 micro-batches of
# 1 x 512 tokens, the context 512 tokens, so most held-out sequences (360 to thousands of
# tokens) are routed on their first 512.
LOL=$lol bash "$root/scripts/strategy_control.sh" "$tmp/su" sudoku-toy >"$tmp/sudoku.txt" 2>&1 ||
  { cat "$tmp/sudoku.txt"; fail "the sudoku toy recipe failed"; }
for f in curve.json curve.html routes.jsonl paths/naked.json paths/backtrack.json eval.json \
         report.html summary.md; do
  [ -e "$tmp/su/$f" ] || fail "sudoku: missing $f"
done
grep -q '"tokens": 4096' "$tmp/su/curve.json" || fail "sudoku: curve.json lacks step 4's tokens"
for s in "# Sudoku strategy control (sudoku-toy recipe, 9 x 9 sudoku)" "| 4 | 4096 |" \
         "distinct paths among 5 labels" "forced mode paths (full)"; do
  grep -qF -- "$s" "$tmp/su/summary.md" || fail "sudoku: summary.md lacks '$s'"
done
grep -qE "^route: [1-5] of 5 sequences were longer than the model's max_seq_len of 512 tokens" \
  "$tmp/sudoku.txt" || fail "sudoku: lol route did not say which sequences it cut"

if STRATEGY_SIZES=4 LOL=$lol bash "$root/scripts/strategy_control.sh" "$tmp/x" sudoku-toy 2>"$tmp/err.txt"; then
  fail "STRATEGY_SIZES was accepted for sudoku"
fi
grep -q "STRATEGY_SIZES and STRATEGY_MAZE_SIZE are for maze profiles" "$tmp/err.txt" || fail "no clear error for STRATEGY_SIZES on sudoku"
if LOL=$lol bash "$root/scripts/strategy_control.sh" "$tmp/x" nope 2>"$tmp/err.txt"; then
  fail "an unknown profile was accepted"
fi
grep -q "PROFILE must be maze-cpu, maze-gpu, maze-toy, sudoku-cpu or sudoku-toy" "$tmp/err.txt" ||
  fail "no clear error for a bad profile"
echo "strategy_control: ok"

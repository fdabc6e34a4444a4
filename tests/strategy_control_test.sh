#!/usr/bin/env bash
# scripts/maze_strategy.sh end to end at toy size: trains with two workers, writes the strategy-
# control curve at every checkpoint, the final evaluation under every intervention, the report
# and the summary; a rerun skips every finished stage; a bad profile is refused.
set -euo pipefail
lol=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

LOL=$lol bash "$root/scripts/maze_strategy.sh" "$tmp/ms" toy >"$tmp/first.txt" 2>&1 ||
  { cat "$tmp/first.txt"; fail "the toy recipe failed"; }
for f in run/checkpoints/step_00000003 run/checkpoints/step_00000006 curve.json curve.html \
         routes.jsonl paths/bfs.json eval.json samples.jsonl report.html summary.md; do
  [ -e "$tmp/ms/$f" ] || fail "missing $f"
done
# One curve point per checkpoint, at its step and tokens (2 rows x 256 x 2 micro-batches).
grep -q '"step": 3,' "$tmp/ms/curve.json" || fail "curve.json lacks step 3"
grep -q '"tokens": 6144' "$tmp/ms/curve.json" || fail "curve.json lacks step 6's tokens"
[ "$(grep -c '"distinct_paths"' "$tmp/ms/curve.json")" = 2 ] || fail "curve.json: not 2 points"
for s in "## Along training" "| 6 | 6144 |" "distinct paths among 5 labels" "depths 4-4" \
         "forced mode paths (full)"; do
  grep -qF -- "$s" "$tmp/ms/summary.md" || fail "summary.md lacks '$s'"
done
grep -q "<svg" "$tmp/ms/curve.html" || fail "curve.html has no plot"

LOL=$lol bash "$root/scripts/maze_strategy.sh" "$tmp/ms" toy >"$tmp/second.txt" 2>&1 ||
  { cat "$tmp/second.txt"; fail "the rerun failed"; }
if grep -q "^== " "$tmp/second.txt"; then cat "$tmp/second.txt"; fail "the rerun redid a stage"; fi
cmp -s "$tmp/ms/summary.md" <(sed -n '/^# Maze/,/^maze_strategy.sh:/p' "$tmp/second.txt" | sed '$d') ||
  fail "the rerun's summary differs"

if LOL=$lol bash "$root/scripts/maze_strategy.sh" "$tmp/x" nope 2>"$tmp/err.txt"; then
  fail "an unknown profile was accepted"
fi
grep -q "PROFILE must be cpu, gpu or toy" "$tmp/err.txt" || fail "no clear error for a bad profile"
echo "maze_strategy: ok"

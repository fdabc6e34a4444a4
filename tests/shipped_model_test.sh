#!/usr/bin/env bash
# The shipped model (models/maze-strategy-cpu, shown by part (b) of scripts/demo.sh) is what the
# cpu recipe trains: its config.json and the training config in its train_state.json equal the
# ones the recipe's training command resolves today (scripts/strategy_control.sh with STRATEGY_DRY_RUN=1),
# it was trained to the recipe's last step, its README gives the command that reproduces it, and
# the engine loads it and, running the demo's strategy-control command on it, still finds the
# strategy control the model was shipped for.
set -euo pipefail
lol=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
model=$root/models/maze-strategy-cpu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for f in config.json model.safetensors train_state.json README.md; do
  [ -f "$model/$f" ] || fail "models/maze-strategy-cpu lacks $f"
done
LOL=$lol STRATEGY_DRY_RUN=1 bash "$root/scripts/strategy_control.sh" "$tmp/recipe" maze-cpu >"$tmp/dry.txt" 2>&1 ||
  { cat "$tmp/dry.txt"; fail "the recipe's dry run failed"; }
# Same keys and values, whatever the order and layout: FILE [KEY] (the object under KEY) against
# FILE2.
same_json() {
  python3 - "$@" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
if len(sys.argv) == 4:
    a = a[sys.argv[2]]
b = json.load(open(sys.argv[-1]))
for k in sorted(set(a) | set(b)):
    if a.get(k) != b.get(k):
        print(f"  {k}: shipped {a.get(k)!r}, recipe {b.get(k)!r}")
        sys.exit(1)
PY
}
same_json "$model/config.json" "$tmp/recipe/run/config.json" ||
  fail "the shipped model's config.json is not the cpu recipe's (retrain it, see its README)"
same_json "$model/train_state.json" train_config "$tmp/recipe/run/train_config.json" ||
  fail "the shipped model's training config is not the cpu recipe's (retrain it, see its README)"
python3 - "$model/train_state.json" <<'PY' || fail "the shipped model stopped before the recipe's last step"
import json, sys
state = json.load(open(sys.argv[1]))
sys.exit(0 if state["step"] == state["train_config"]["steps"] else 1)
PY
grep -qF "scripts/strategy_control.sh runs/maze-strategy maze-cpu" "$model/README.md" ||
  fail "the README does not give the command that reproduces the model"

"$lol" info --model "$model" >"$tmp/info.txt" || fail "lol info cannot read the shipped model"
"$lol" --threads 1 path curve "$model" --task maze --size 5 --count 4 --show 1 >"$tmp/curve.txt" 2>&1 ||
  { cat "$tmp/curve.txt"; fail "the demo's strategy-control command fails on the shipped model"; }
# The model still does what docs/experiments.md reports (80% of traces as requested, with the
# descriptor and with the forced mode paths, over 100 mazes per strategy): on the first 4 mazes
# per strategy, 5 distinct mode paths and most traces as requested either way.
row=$(grep "^| 40000 | " "$tmp/curve.txt") || { cat "$tmp/curve.txt"; fail "no point at step 40000"; }
echo "$row" | awk -F'|' '{
  gsub(/ /, "", $4); gsub(/ /, "", $5); gsub(/ /, "", $8)
  exit !($4 == "5/5" && $5 >= 0.6 && $8 >= 0.6)
}' || fail "the shipped model no longer controls its strategies: $row"
grep -q "^dfs, filler, mode path forced (1: " "$tmp/curve.txt" ||
  { cat "$tmp/curve.txt"; fail "--show printed no forced-path generation"; }
echo "shipped_model: ok"

#!/usr/bin/env bash
# The main job on a built-in default, no downloads: set up, build, create a model from the
# tiny preset, run a forward pass and print its size and routes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target lol
lol=build/release/lol
out=${1:-runs/demo}
$lol init --preset tiny --seed 0 --out "$out/model" --overwrite
$lol info --model "$out/model"
$lol forward --model "$out/model" --tokens 1,2,3,4,5,6,7,8,9,10,11,12 --prompt-len 3 \
  --router-only 2 --out "$out/forward.json"
python3 - "$out/forward.json" <<'PY' 2>/dev/null || echo "forward written to $out/forward.json"
import json, sys
f = json.load(open(sys.argv[1]))
print(f"logits: {len(f['logits'])} positions x {f['vocab_size']} classes")
for r in f["routes"]:
    print(f"depth {r['depth']} window {r['window']} (tokens {r['start']}..{r['start'] + r['length'] - 1}): "
          f"expert {r['expert']} gate {r['gate']:.3f}")
PY

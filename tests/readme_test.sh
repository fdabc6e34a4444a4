#!/usr/bin/env bash
# The README as a newcomer meets it: every ```sh block but the set-up one (```sh setup) runs in
# order in a scratch directory, with build/release/lol standing for the binary under test.
# Only sizes shrink, so the whole README runs in a few minutes: --steps N -> 2, --count N -> 3,
# generations end at 32 tokens, and each bench line gets one short repetition. Then the outputs
# the README promises are checked (forward JSON with routes, traces equal to the data, one
# continuation per question).
#   tests/readme_test.sh LOL_BINARY README.md
set -uo pipefail
lol=$(realpath "$1")
readme=$(realpath "$2")
dir=$(mktemp -d)
trap 'cp "$dir/run.log" /tmp/readme_run.log 2>/dev/null; rm -rf "$dir"' EXIT
cd "$dir"

awk '/^```sh$/ {on = 1; next} /^```/ {on = 0} on' "$readme" >blocks.sh
[ -s blocks.sh ] || { echo "FAILED: no runnable sh block in $readme"; exit 1; }
sed -E -i \
  -e 's#build/release/lol#"$LOL"#g' \
  -e 's/--steps [0-9]+/--steps 2/g' \
  -e 's/--count [0-9]+/--count 3/g' \
  -e '/"\$LOL" bench/ s/--seq-len [0-9,]+//' \
  -e 's/"\$LOL" bench/"$LOL" bench --seq-len 64 --batch 2 --reps 1 --warmup 0 --contexts 32 --batches 1 --steps 2 --puzzles 2/' \
  -e 's/--suite serve/--suite serve --requests 4 --clients 2/' \
  blocks.sh
# One command per line (continuations joined), each announced with the time it starts.
awk '/\\$/ {sub(/\\$/, ""); line = line $0; next} {line = line $0; if (line ~ /^[[:space:]]*(#|$)/) {line = ""; next}
     cmd = line; gsub(/[\047"$`\\]/, "", cmd); printf "echo \"@@ $(date +%%s) %s\"\n%s\n", substr(cmd, 1, 100), line; line = ""}' \
  blocks.sh >commands.sh
# A two-step model seldom writes <eos>: its generations stop at 32 tokens, not at max_seq_len.
sed -E -i '/"\$LOL" generate/ {/--max-tokens/! s/"\$LOL" generate/"$LOL" generate --max-tokens 32/}' commands.sh
echo "running $(grep -c '^echo "@@' commands.sh) README commands from $readme"
if ! LOL="$lol" bash -e commands.sh >run.log 2>&1; then
  echo "FAILED: a README command failed; the last lines of its run:"
  tail -25 run.log
  exit 1
fi
failures=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAILED: $1"; failures=$((failures + 1)); fi; }
check "forward JSON holds routes" 'grep -q "\"routes\":\[{" fwd.json'
check "forced forward marks the forced entry" 'grep -q "\"forced_expert\":true" forced.json'
check "task trace reproduces the data" 'cmp -s maze.txt traced.txt'
check "one continuation per question" '[ "$(wc -l <continuations.txt)" -eq "$(wc -l <questions.txt)" ]'
check "routes written" '[ -s routes.jsonl ]'
check "served completion with routes" 'grep -q "\"routes\":\[{" completion.json'
check "untrained model written" '[ -f runs/untrained/model.safetensors ]'
check "routes of every strategy" '[ "$(grep -c "\"label\"" routes.jsonl)" -eq 15 ]'
check "a mode path per strategy" '[ "$(ls paths | wc -l)" -eq 5 ] && grep -q "\"count\"" paths/bfs.json'
check "route statistics" 'grep -q "expected_uniform" route_stats.json'
check "probes" 'grep -q "shuffled_mean" probes.json'
check "forced generation on fillers" '[ "$(wc -l <forced_bfs.txt)" -eq "$(wc -l <fillers.txt)" ]'
if [ "$failures" -ne 0 ]; then echo "$failures README checks failed"; exit 1; fi
echo "the README runs as written"

#!/usr/bin/env bash
# A data-parallel run that loses a worker: every process exits, the launcher names the lost
# rank, the last checkpoint stays usable and the run resumes at another number of workers.
# usage: distributed_test.sh LOL_BINARY
set -uo pipefail
lol=$(realpath "$1")
dir=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "distributed_test: FAIL: $*" >&2; exit 1; }

"$lol" train --preset maze-demo --data task:maze:5 --steps 30 --train-set seq_len=128 \
  --train-set grad_accum=2 --train-set checkpoint_every=5 --train-set eval_every=0 \
  --out "$dir/run" --nproc 2 >"$dir/train.log" 2>&1 &
launcher=$!
for _ in $(seq 600); do [ -d "$dir/run/checkpoints/step_00000005" ] && break; sleep 0.05; done
[ -d "$dir/run/checkpoints/step_00000005" ] || fail "no checkpoint appeared: $(tail -3 "$dir/train.log")"
workers=($(pgrep -P "$launcher"))
[ "${#workers[@]}" -eq 2 ] || fail "expected 2 worker processes, found ${#workers[@]}"
kill -9 "${workers[1]}"
rc=0
wait "$launcher" || rc=$?
[ "$rc" -ne 0 ] || fail "the run ended with status 0 after losing a worker"
grep -q "^lol: error: worker rank 1 was killed by signal 9" "$dir/train.log" ||
  fail "the launcher did not name the lost rank: $(tail -3 "$dir/train.log")"
for p in "${workers[@]}"; do ! kill -0 "$p" 2>/dev/null || fail "worker $p still runs"; done
last=$(ls "$dir/run/checkpoints" | tail -1)
"$lol" info --model "$dir/run" >/dev/null || fail "the last checkpoint ($last) is not readable"
"$lol" train --resume "$dir/run" --nproc 1 >"$dir/resume.log" 2>&1 || fail "resume: $(tail -3 "$dir/resume.log")"
[ -d "$dir/run/checkpoints/step_00000030" ] || fail "the resumed run did not reach step 30"
echo "distributed_test: ok (lost rank named, checkpoint $last intact, resumed by 1 worker to step 30)"

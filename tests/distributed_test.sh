#!/usr/bin/env bash
# A data-parallel run that loses a worker: every process exits, the launcher and the surviving
# rank name the lost rank, the last checkpoint stays usable and the run resumes at the same and
# at another number of workers. SIGINT stops every worker at a checkpoint with status 130. Then a
# worker that hangs (SIGSTOP): the other rank's collective
# times out, it names the hung rank, and the launcher ends the hung one.
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
grep -q "^lol: error: rank 0 of 2: a collective failed (.*); lost rank 1 (exited, killed or hung" "$dir/train.log" ||
  fail "the surviving rank did not name the lost rank: $(grep -v '^train' "$dir/train.log" | tail -3)"
for p in "${workers[@]}"; do ! kill -0 "$p" 2>/dev/null || fail "worker $p still runs"; done
last=$(ls "$dir/run/checkpoints" | tail -1)
"$lol" info --model "$dir/run" >/dev/null || fail "the last checkpoint ($last) is not readable"
# The run resumes at the same number of workers and at another; both reach the end.
cp -r "$dir/run" "$dir/run_same"
"$lol" train --resume "$dir/run_same" --nproc 2 >"$dir/resume_same.log" 2>&1 || fail "resume by 2: $(tail -3 "$dir/resume_same.log")"
[ -d "$dir/run_same/checkpoints/step_00000030" ] || fail "the run resumed by 2 workers did not reach step 30"
"$lol" train --resume "$dir/run" --nproc 1 >"$dir/resume.log" 2>&1 || fail "resume by 1: $(tail -3 "$dir/resume.log")"
[ -d "$dir/run/checkpoints/step_00000030" ] || fail "the run resumed by 1 worker did not reach step 30"

# SIGINT to the launcher: it reaches both workers, which checkpoint at one step and exit 130; the
# launcher takes that for a stop, not a lost worker, exits 130 too, and the run resumes to the end.
"$lol" train --preset maze-demo --data task:maze:5 --steps 200 --train-set seq_len=128 \
  --train-set grad_accum=2 --train-set checkpoint_every=1000 --train-set eval_every=0 \
  --train-set log_every=1 --out "$dir/int" --nproc 2 >"$dir/int.log" 2>&1 &
launcher=$!
for _ in $(seq 600); do grep -q "^train 3/200" "$dir/int.log" 2>/dev/null && break; sleep 0.05; done
kill -INT "$launcher"
rc=0
wait "$launcher" || rc=$?
[ "$rc" -eq 130 ] || fail "SIGINT: the launcher exited $rc, not 130: $(tail -3 "$dir/int.log")"
grep -q "^train: interrupted at step" "$dir/int.log" && ! grep -q "^lol: error" "$dir/int.log" ||
  fail "SIGINT: no clean stop: $(grep -v '^train [0-9]' "$dir/int.log" | tail -3)"
"$lol" train --resume "$dir/int" --nproc 2 >"$dir/int_resume.log" 2>&1 || fail "resume after SIGINT: $(tail -3 "$dir/int_resume.log")"
[ -d "$dir/int/checkpoints/step_00000200" ] || fail "the run resumed after SIGINT did not reach step 200"

# A hung worker: with a 3 s process-group timeout, rank 0's next collective fails and names rank 1,
# and the launcher kills the stopped worker (SIGTERM cannot reach it) after its grace period.
LOL_DIST_TIMEOUT_S=3 "$lol" train --preset maze-demo --data task:maze:5 --steps 100000 \
  --train-set seq_len=128 --train-set grad_accum=2 --train-set checkpoint_every=5 \
  --train-set eval_every=0 --out "$dir/hang" --nproc 2 >"$dir/hang.log" 2>&1 &
launcher=$!
for _ in $(seq 600); do [ -d "$dir/hang/checkpoints/step_00000005" ] && break; sleep 0.05; done
[ -d "$dir/hang/checkpoints/step_00000005" ] || fail "hang: no checkpoint appeared: $(tail -3 "$dir/hang.log")"
workers=($(pgrep -P "$launcher"))
[ "${#workers[@]}" -eq 2 ] || fail "hang: expected 2 worker processes, found ${#workers[@]}"
kill -STOP "${workers[1]}"
start=$SECONDS
rc=0
wait "$launcher" || rc=$?
[ "$rc" -ne 0 ] || fail "the run ended with status 0 with a hung worker"
grep -q "^lol: error: rank 0 of 2: a collective failed (.*); lost rank 1 (exited, killed or hung" "$dir/hang.log" ||
  fail "rank 0 did not name the hung rank: $(grep -v '^train' "$dir/hang.log" | tail -3)"
for p in "${workers[@]}"; do ! kill -0 "$p" 2>/dev/null || fail "hung worker $p still exists"; done
"$lol" info --model "$dir/hang" >/dev/null || fail "the hung run's last checkpoint is not readable"
echo "distributed_test: ok (lost rank named by the launcher and rank 0, checkpoint $last intact, resumed by 2 and by 1 worker to step 30; SIGINT stops both workers with status 130 and resumes; hung rank named after $((SECONDS - start)) s)"

#!/usr/bin/env bash
# scripts/park.sh: a run stopped before its last step, parked and unparked into another directory,
# resumes to the very parameters of the run that was never stopped; what cannot be parked or
# unparked is refused with a clear error.
source "$(dirname "$0")/lib.sh"
export PARK_DIR=$tmp/parked
park() { bash "$root/scripts/park.sh" "$@"; }

"$lol" train --preset tiny --steps 6 --train-set checkpoint_every=2 --train-set keep_checkpoints=10 \
  --out "$tmp/straight/run" >"$tmp/log.txt" 2>&1 || { cat "$tmp/log.txt"; fail "training failed"; }
# A run stopped after its step-4 checkpoint: the straight run without its last checkpoint.
cp -r "$tmp/straight" "$tmp/stopped"
rm -rf "$tmp/stopped/run/checkpoints/step_00000006"
park park "$tmp/stopped" demo >"$tmp/park.txt" || fail "park failed"
[ "$(ls "$PARK_DIR/demo/run/checkpoints")" = step_00000004 ] || fail "parked more than the newest checkpoint"
for f in train_config.json metrics.jsonl; do
  [ -f "$PARK_DIR/demo/run/$f" ] || fail "the parked run lacks $f"
done
park unpark demo "$tmp/next" >/dev/null || fail "unpark failed"
"$lol" train --resume "$tmp/next/run" >"$tmp/resume.txt" 2>&1 || { cat "$tmp/resume.txt"; fail "the unparked run does not resume"; }
for f in model.safetensors train_state.safetensors; do
  cmp -s "$tmp/straight/run/checkpoints/step_00000006/$f" "$tmp/next/run/checkpoints/step_00000006/$f" ||
    fail "the unparked run's step-6 $f differs from the straight run's"
done

expect_refused() {  # expect_refused PATTERN ARGS...: park.sh exits non-zero, saying PATTERN
  local pattern=$1
  shift
  if park "$@" 2>"$tmp/err.txt" >/dev/null; then fail "park.sh $* was accepted"; fi
  grep -q "^park.sh: .*$pattern" "$tmp/err.txt" || fail "park.sh $*: no clear error: $(cat "$tmp/err.txt")"
}
expect_refused "exists: unpark into a directory without a run" unpark demo "$tmp/next"
expect_refused "holds no parked run" unpark nothing "$tmp/elsewhere"
expect_refused "has no checkpoints to park" park "$tmp/nowhere" demo
expect_refused "NAME must be letters" park "$tmp/stopped" "a/b"
touch "$tmp/stopped/trained"
expect_refused "finished training" park "$tmp/stopped" demo
expect_refused "the first argument must be park or unpark" move "$tmp/stopped" demo
echo "park: ok"

#!/usr/bin/env bash
# A training run longer than a session crosses to the next one in git, not in runs/ (ignored,
# and gone when the next session starts on a fresh machine). `park` copies what an exact resume
# needs out of a recipe's output directory: the run's top-level files (train_config.json,
# metrics.jsonl, a text run's tokenizer.json) and its newest checkpoint (model, optimizer and
# data state), into parked/NAME, to be committed; `unpark` copies it back, and rerunning the
# same command (the recipe, or `lol train --resume OUT/run`) continues from that checkpoint as
# if never stopped. Older checkpoints stay behind, so a recipe's curve over training has only
# the points of the checkpoints written after the resume (docs/experiments.md).
#   scripts/park.sh park OUT_DIR NAME     OUT_DIR holds run/ (a recipe's output directory)
#   scripts/park.sh unpark NAME OUT_DIR   OUT_DIR must not hold a run yet
# PARK_DIR: where parked runs live (parked/ at the repository's root; tests/park_test.sh sets it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
parked=${PARK_DIR:-$root/parked}
die() { echo "park.sh: $*" >&2; exit 2; }
[ $# -eq 3 ] || die "usage: park.sh park OUT_DIR NAME | park.sh unpark NAME OUT_DIR"

case "$1" in
  park)
    out=$2 name=$3
    [ -d "$out/run/checkpoints" ] || die "$out/run has no checkpoints to park"
    [ -f "$out/trained" ] && die "$out finished training: commit its results, not a checkpoint"
    [[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || die "NAME must be letters, digits, '.', '_' or '-', got '$name'"
    latest=$(ls "$out/run/checkpoints" | grep -E '^step_[0-9]+$' | sort | tail -1)
    [ -n "$latest" ] || die "$out/run/checkpoints holds no finished checkpoint"
    dest=$parked/$name
    tmp=$parked/.$name.tmp
    rm -rf "$tmp"
    mkdir -p "$tmp/run/checkpoints"
    find "$out/run" -maxdepth 1 -type f -exec cp {} "$tmp/run/" \;
    cp -r "$out/run/checkpoints/$latest" "$tmp/run/checkpoints/"
    rm -rf "$dest"
    mv "$tmp" "$dest"  # the previous parking of NAME is replaced only by a complete one
    echo "parked $out at $latest in $dest ($(du -sh "$dest" | cut -f1)); commit it" ;;
  unpark)
    name=$2 out=$3
    src=$parked/$name
    [ -d "$src/run/checkpoints" ] || die "$src holds no parked run"
    [ -e "$out/run" ] && die "$out/run exists: unpark into a directory without a run"
    mkdir -p "$out"
    cp -r "$src/run" "$out/run"
    echo "unparked $src into $out; rerun its command to resume" ;;
  *) die "the first argument must be park or unpark, got '$1'" ;;
esac

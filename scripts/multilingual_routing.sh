#!/usr/bin/env bash
# The multilingual routing experiment of the paper (section 4.1.1) at CPU scale (docs/text.md):
# the built-in corpus of 16 languages from Debian packages, an equal-token training mix, a LoL
# text model, held-out loss per language against the unigram baseline, the routes of held-out
# chunks of every language, a language probe on them with its shuffled control, and the report
# with the language-by-route PCA.
#   scripts/multilingual_routing.sh [OUT_DIR] [STEPS]      (defaults: runs/multilingual, 800)
# Every stage is skipped when its output exists, and training resumes where it stopped, so an
# interrupted run (Ctrl-C saves a checkpoint) continues when the script is run again.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/multilingual}
steps=${2:-800}
lol=${LOL:-build/release/lol}
[ -x "$lol" ] || { echo "multilingual_routing.sh: build first (cmake --preset release && cmake --build --preset release)" >&2; exit 1; }
mkdir -p "$out"

[ -f "$out/text/packages.txt" ] || scripts/corpus/multilingual.sh "$out/text"
# One tokenizer of 8192 tokens trained on 2 MB of every language; 600k training tokens per
# language (the equal-token mix); 2% of documents held out for validation and 2% for test.
[ -f "$out/corpus/corpus.json" ] ||
  "$lol" corpus build --input "$out/text" --out "$out/corpus" --vocab-size 8192 \
    --tokenizer-bytes 2000000 --max-train-tokens 600000
if [ -f "$out/run/train_config.json" ]; then
  "$lol" train --resume "$out/run"
else
  "$lol" train --preset text-cpu --data "corpus:$out/corpus" --steps "$steps" \
    --train-set seq_len=512 --train-set batch_rows=8 --train-set warmup_steps=50 \
    --train-set eval_every=100 --train-set eval_batches=8 --train-set log_every=10 --out "$out/run"
fi
"$lol" eval --model "$out/run" --data "corpus:$out/corpus" --json-out "$out/eval.json"
"$lol" route --model "$out/run" --data "corpus:$out/corpus" --count 40 --out "$out/routes.jsonl"
"$lol" path probe "$out/routes.jsonl" --json "$out/probe.json"
# Do languages that share a script share paths? Mean path similarity within scripts vs across.
"$lol" path stats "$out/routes.jsonl" --json "$out/route_stats.json" \
  --group latin=en,de,fr,es,it,nl,pl,pt,cs,tr --group cyrillic=ru,uk --group greek=el \
  --group han=ja,zh --group hangul=ko | tee "$out/route_stats.txt" | tail -1
"$lol" report "$out/routes.jsonl" --title "LoL text-cpu: routes by language" --out "$out/report.html"
echo "multilingual_routing.sh: $out/report.html"

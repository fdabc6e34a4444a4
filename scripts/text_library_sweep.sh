#!/usr/bin/env bash
# The library-size sweep of the paper (figures 5/6) on text, at CPU scale (docs/text.md): LoL with
# three library sizes, from looped-like (L < D) to MoE-like (L >> D), beside dense, looped and MoE
# cores of the same shape, on the same multilingual corpus and token budget. Every model executes
# the same blocks per token with the same strided-window attention, so executed FLOPs match (the
# router aside); stored parameters differ. Output: each run's held-out loss (lol eval), and
# lol compare's table and plots of held-out loss against FLOPs and against parameters.
#   scripts/text_library_sweep.sh [OUT_DIR] [STEPS] [TEXT_DIR]
#     defaults: runs/library-sweep, 300 steps, OUT_DIR/text (built from Debian packages when absent)
# Environment: LOL (binary); for other sizes (tests/text_test.sh runs it at toy size): SWEEP_VOCAB
# (tokenizer and model vocabulary, 4096), SWEEP_CORPUS (corpus build flags other than the
# vocabulary), SWEEP_SET and SWEEP_TRAIN_SET (extra --set and --train-set overrides, key=value
# separated by spaces, applied after the defaults below).
# Stages whose output exists are skipped and interrupted runs resume, so rerunning continues.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/library-sweep}
steps=${2:-300}
text=${3:-$out/text}
lol=${LOL:-build/release/lol}
[ -x "$lol" ] || { echo "text_library_sweep.sh: build first (cmake --preset release && cmake --build --preset release)" >&2; exit 1; }
mkdir -p "$out"

if [ ! -d "$text" ]; then scripts/corpus/multilingual.sh "$text"; fi
# A 4096-token tokenizer (the embedding and LM head would otherwise dominate this small a model),
# trained on 1 MB per language; 400k training tokens per language; documents cut at 256 tokens.
vocab=${SWEEP_VOCAB:-4096}
read -r -a corpus_flags <<<"${SWEEP_CORPUS:---tokenizer-bytes 1000000 --max-train-tokens 400000 --chunk-tokens 256}"
[ -f "$out/corpus/corpus.json" ] ||
  "$lol" corpus build --input "$text" --out "$out/corpus" --vocab-size "$vocab" "${corpus_flags[@]}"

# One shape for every family: d 128, 1 prelude + 4 core layers + 1 coda, windows of 32 tokens
# with stride 16. Non-LoL cores attend in the same strided windows (core_attention=strided).
shape=(--preset text-cpu --set "vocab_size=$vocab" --set d_model=128 --set n_heads=4 --set n_kv_heads=4
       --set ffn_hidden=352 --set n_prelude=1 --set core_depth=4 --set n_coda=1 --set window=32
       --set stride=16 --set max_seq_len=256)
for s in ${SWEEP_SET:-}; do shape+=(--set "$s"); done
train=(--train-set seq_len=256 --train-set batch_rows=16 --train-set warmup_steps=20
       --train-set eval_every=25 --train-set eval_batches=8 --train-set log_every=25
       --train-set checkpoint_every=100 --train-set lr=3e-3)
for s in ${SWEEP_TRAIN_SET:-}; do train+=(--train-set "$s"); done

runs=(
  "lol-L2:--set family=lol --set library_size=2"
  "lol-L8:--set family=lol --set library_size=8"
  "lol-L32:--set family=lol --set library_size=32"
  "dense:--set family=dense --set core_attention=strided"
  "looped:--set family=looped --set loop_blocks=1 --set core_attention=strided"
  "moe:--set family=moe --set moe_experts=8 --set moe_top_k=1 --set core_attention=strided"
)
dirs=()
for r in "${runs[@]}"; do
  name=${r%%:*}
  read -r -a family <<<"${r#*:}"
  run="$out/$name"
  dirs+=("$run")
  if [ -f "$run/eval.json" ]; then continue; fi
  echo "== $name"
  if [ -f "$run/train_config.json" ]; then
    "$lol" train --resume "$run"
  else
    "$lol" train "${shape[@]}" "${family[@]}" --data "corpus:$out/corpus" --steps "$steps" \
      "${train[@]}" --out "$run"
  fi
  # Written atomically: present only once the evaluation is complete.
  "$lol" eval --model "$run" --data "corpus:$out/corpus" --json-out "$run/eval.json" >"$run/eval.txt"
done
"$lol" compare "${dirs[@]}" --title "Library-size sweep on text: LoL L 2 / 8 / 32 against dense, looped, MoE" \
  --out "$out/compare.html" --json-out "$out/compare.json" | tee "$out/compare.md"
echo "text_library_sweep.sh: $out/compare.html"

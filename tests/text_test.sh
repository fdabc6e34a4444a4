#!/usr/bin/env bash
# Text end to end (docs/text.md): our byte-level BPE against Hugging Face's own tokenizers on
# the fixture texts (our tokenizer.json and the GPT-2, Llama-3 and Qwen2 layouts of it, and
# Unicode normalizers), corpus builds
# that are byte-identical when rerun, and a text model trained on corpus:DIR, evaluated per
# label and prompted with text.
# usage: text_test.sh LOL_BINARY
source "$(dirname "$0")/lib.sh"
node_dir="$root/tests/node"
[ -d "$node_dir/node_modules/tokenizers" ] ||
  { echo "text_test: $node_dir/node_modules is missing: run scripts/setup.sh (npm ci there)" >&2; exit 1; }
text="$root/tests/data/text"

# 1. Encodings agree with the reference, for every fixture document, in twenty-one layouts of
#    one tokenizer.json (ours, GPT-2's, Llama-3's, Qwen2's, a Sequence of normal forms, Nmt, the
#    sentencepiece-style Llama-2, Mistral and one with unknown characters, the pre-tokenizer
#    chains of StarCoder, Falcon, every Split behavior, Whitespace, BertPreTokenizer and
#    CharDelimiterSplit, WordPiece as BERT's uncased files, a cased one with StripAccents and
#    one under Metaspace, and WordLevel under Whitespace and under Metaspace) and in one trained here with a
#    normalizer. The fixtures are in NFC; one more document holds text that the
#    normalizers change: combining marks out of canonical order, Hangul jamo, ligatures,
#    full-width and circled forms, a chat marker next to a combining mark; another leading
#    spaces, sentencepiece's added tokens, "▁" itself and text for added tokens with lstrip, rstrip
#    and single_word.
"$lol" tokenizer train --input "$text" --vocab-size 600 --min-frequency 1 --out "$tmp/tk.json" 2>/dev/null
node "$node_dir/tokenizer_reference.mjs" variants "$tmp/tk.json" "$tmp"
mkdir -p "$tmp/text/forms"
cp -r "$text"/. "$tmp/text/"
printf 'Cafe\xcc\x81 a\xcc\x82\xcc\xa3 \xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8 \xef\xac\x81le \xef\xbc\xa1\xe2\x91\xa0 \xe2\x84\xab \xc4\xb0stanbul \xce\xa3\xce\x91\xce\xa3 \xc7\x84\n<|im_start|>\xcc\x81 <|im_end|>e\xcc\x81<|endoftext|>\xe1\xba\x9b\xcc\xa3\n' \
  > "$tmp/text/forms/a.txt"
printf '  two spaces first <s>after a bos</s> and after an eos </s>\n\tA tab, \xe2\x96\x81 itself, \xf0\x9f\xa6\x80 <unk>\na  <mask> b\xc2\xa0<mask>\xe3\x80\x80<|assistant|>  \n hello word words sword (word). word_ ahi  yo  z x ord\n' \
  > "$tmp/text/forms/b.txt"
# Numbers, punctuation and case for the pre-tokenizers that split on them (Digits, Punctuation,
# Split behaviors, BertPreTokenizer): superscripts and fractions (numeric, and their bytes are
# numeric byte-level characters), other scripts' digits, runs of marks, dashes and dots.
printf 'Version 2.0.12 of the-final--countdown: 1234567 and 3.14159; x\xc2\xb2 + y\xc2\xb3 = z\xc2\xb9 (\xc2\xbd \xc2\xb7 \xc2\xbe)\n\xd9\xa3\xd9\xa4\xd9\xa5 \xe0\xa5\xaa\xe0\xa5\xa8 \xe0\xb3\xa7\xe0\xb3\xa8 \xe0\xb2\xb2\xe0\xb2\xb2 \xc2\xabquoted\xc2\xbb \xe2\x80\x94 wait\xe2\x80\xa6 \xc2\xbfqu\xc3\xa9?! \xc2\xa1s\xc3\xad!!! snake_case CamelCaseWord HTTPServer a,b;c:d e.f...\n  indented\tline -x --y\n' \
  > "$tmp/text/forms/c.txt"
"$lol" tokenizer train --input "$tmp/text" --vocab-size 600 --min-frequency 1 --normalizer nfkc \
  --out "$tmp/nfkc.json" 2>/dev/null
grep -q '"normalizer":{"type":"NFKC"}' "$tmp/nfkc.json" || fail "no NFKC normalizer written"
# The pre-tokens alone (`lol tokenizer pretokenize`, HF's pre_tokenize_str) of every fixture line.
find "$tmp/text" -name '*.txt' -print0 | sort -z | xargs -0 cat > "$tmp/fixture-lines.txt"
for v in tk gpt2 llama3 qwen2 nfkd lowercase nmt nfkc llama2 mistral spm-unk starcoder falcon behaviors \
  whitespace bert chardelim wordpiece wordpiece-cased wordpiece-metaspace wordlevel wordlevel-metaspace; do
  "$lol" tokenizer encode --tokenizer "$tmp/$v.json" --input "$tmp/text" > "$tmp/$v.jsonl"
  node "$node_dir/tokenizer_reference.mjs" compare "$tmp/$v.json" "$tmp/$v.jsonl"
  "$lol" tokenizer pretokenize --tokenizer "$tmp/$v.json" --lines < "$tmp/fixture-lines.txt" \
    > "$tmp/$v.pre"
  node "$node_dir/tokenizer_reference.mjs" pretokenize "$tmp/$v.json" "$tmp/fixture-lines.txt" \
    "$tmp/$v.pre"
done
"$lol" tokenizer info --tokenizer "$tmp/llama2.json" > "$tmp/info.txt"
grep -q "^kind *sentencepiece-style BPE" "$tmp/info.txt" || fail "tokenizer info: $(cat "$tmp/info.txt")"
grep -q "^word cuts *before each run of" "$tmp/info.txt" || fail "tokenizer info: no word cuts"
"$lol" tokenizer info --tokenizer "$tmp/wordpiece-cased.json" > "$tmp/info.txt"
grep -q '^words *continued by "##", unknown past 10 characters' "$tmp/info.txt" ||
  fail "tokenizer info of a WordPiece: $(cat "$tmp/info.txt")"
"$lol" tokenizer info --tokenizer "$tmp/wordlevel.json" > "$tmp/info.txt"
grep -q '^vocabulary .*whole pre-tokens, no merges' "$tmp/info.txt" ||
  fail "tokenizer info of a WordLevel: $(cat "$tmp/info.txt")"
"$lol" tokenizer info --tokenizer "$tmp/qwen2.json" --json |
  node -e 'const d = JSON.parse(require("fs").readFileSync(0, "utf8"));
           if (d.kind !== "byte-level BPE" || d.normalizer.type !== "NFC" || d.cut_before !== null) process.exit(1);' ||
  fail "tokenizer info --json of the Qwen2 layout"
# Unigram: sentencepiece's own trainer (spm_train, deterministic) makes two models of the
# fixtures, converted as HF's converter does: one with sentencepiece's default
# normalization (nmt_nfkc, written as a Precompiled character map) and byte fallback, one with
# none and unknown characters; each also in the older layout of T5's files (WhitespaceSplit).
# Every document must encode and decode as HF's tokenizers do.
command -v spm_train > /dev/null || fail "spm_train is missing: run scripts/setup.sh (Debian's sentencepiece)"
find "$text" -name '*.txt' -print0 | sort -z | xargs -0 cat > "$tmp/spm.txt"
cat "$tmp/spm.txt" "$tmp/spm.txt" "$tmp/spm.txt" > "$tmp/spm-train.txt"
for kind in nmt_nfkc:true identity:false; do
  rule=${kind%:*} fallback=${kind#*:}
  spm_train --input="$tmp/spm-train.txt" --model_prefix="$tmp/unigram-$rule" --vocab_size=800 \
    --hard_vocab_limit=false --model_type=unigram --character_coverage=0.98 \
    --byte_fallback=$fallback --normalization_rule_name=$rule --minloglevel=2 > /dev/null 2>&1 ||
    fail "spm_train failed ($kind)"
  node "$node_dir/tokenizer_reference.mjs" spm "$tmp/unigram-$rule.model" "$tmp/unigram-$rule.json" > /dev/null
  for v in "unigram-$rule" "unigram-$rule-t5"; do
    "$lol" tokenizer encode --tokenizer "$tmp/$v.json" --input "$tmp/text" > "$tmp/$v.jsonl"
    node "$node_dir/tokenizer_reference.mjs" compare "$tmp/$v.json" "$tmp/$v.jsonl"
  done
done
grep -q '"Precompiled"' "$tmp/unigram-nmt_nfkc.json" || fail "the nmt_nfkc model has no Precompiled normalizer"
# Normalizers alone (`lol tokenizer normalize`) against HF's on ~300,000 lines: every code point
# of planes 0-2 alone and in context, and random strings of characters that compose, join into
# grapheme clusters or are spaces and controls (docs/text.md). Not NFKC: HF's tables lack the
# compatibility mappings of characters added since Unicode 12.1 (U+32FF, U+A7F2, U+10780...),
# which utf8proc (Unicode 15) has; those 194 lines differ, by design of the Unicode versions.
node "$node_dir/tokenizer_reference.mjs" normal-lines "$tmp/lines.txt"
for v in unigram-nmt_nfkc qwen2 llama2 nmt; do
  node "$node_dir/tokenizer_reference.mjs" normalize "$tmp/$v.json" "$tmp/lines.txt" > "$tmp/hf-normal.txt"
  "$lol" tokenizer normalize --tokenizer "$tmp/$v.json" --lines < "$tmp/lines.txt" > "$tmp/lol-normal.txt"
  cmp -s "$tmp/hf-normal.txt" "$tmp/lol-normal.txt" ||
    fail "the normalizer of $v.json differs from HF's: $(diff "$tmp/hf-normal.txt" "$tmp/lol-normal.txt" | head -4)"
done
# Lowercase: the same, except at the case pairs Unicode 16 and 17 added (HF's tables are newer
# than utf8proc's Unicode 15): each line that differs must differ only at those characters.
node "$node_dir/tokenizer_reference.mjs" normalize "$tmp/lowercase.json" "$tmp/lines.txt" > "$tmp/hf-normal.txt"
"$lol" tokenizer normalize --tokenizer "$tmp/lowercase.json" --lines < "$tmp/lines.txt" > "$tmp/lol-normal.txt"
node "$node_dir/tokenizer_reference.mjs" normalize-diff "$tmp/lines.txt" "$tmp/hf-normal.txt" \
  "$tmp/lol-normal.txt" || fail "the Lowercase normalizer differs from HF's"

"$lol" tokenizer info --tokenizer "$tmp/unigram-nmt_nfkc.json" > "$tmp/info.txt"
grep -q "^kind *Unigram" "$tmp/info.txt" || fail "tokenizer info of a Unigram: $(cat "$tmp/info.txt")"
ids=$("$lol" tokenizer encode --tokenizer "$tmp/tk.json" --text "Grüße, мир! 東京")
back=$("$lol" tokenizer decode --tokenizer "$tmp/tk.json" --ids "$ids")
[ "$back" = "Grüße, мир! 東京" ] || fail "encode/decode round trip gave '$back'"

# 2. A corpus build is deterministic: byte-identical shards, tables, tokenizer and manifest.
build() {
  "$lol" corpus build --input "$text" --out "$1" --vocab-size 400 --val 0.2 --test 0.1 \
    --chunk-tokens 64 2>/dev/null
}
build "$tmp/c1" > "$tmp/summary.txt"
build "$tmp/c2" > /dev/null
for f in tokenizer.json corpus.json train.shard val.shard test.shard train.docs.tsv val.docs.tsv; do
  cmp -s "$tmp/c1/$f" "$tmp/c2/$f" || fail "rebuilt corpus differs in $f"
done
grep -q "^ru " "$tmp/summary.txt" || fail "no ru row in the corpus summary"
# The bytes a corpus counts are its documents' bytes whatever the tokenizer: the byte-level
# tokenizer and its Llama-2 layout (whose "▁" prepended to each document is no byte of it) agree.
for v in tk llama2; do
  "$lol" corpus build --input "$text" --tokenizer "$tmp/$v.json" --out "$tmp/bytes-$v" \
    --val 0.2 --test 0.1 --chunk-tokens 64 > /dev/null 2>&1 || fail "corpus build with $v.json failed"
done
node -e '
const fs = require("fs");
const bytes = (dir) => JSON.stringify(Object.entries(JSON.parse(fs.readFileSync(dir + "/corpus.json", "utf8")).labels)
  .map(([label, splits]) => [label, Object.entries(splits).map(([split, c]) => [split, c.bytes])]));
const [a, b] = [bytes(process.argv[1]), bytes(process.argv[2])];
if (a !== b) { console.error("corpus bytes differ by tokenizer:\n" + a + "\n" + b); process.exit(1); }
' "$tmp/bytes-tk" "$tmp/bytes-llama2"

# 3. A text model: train on corpus:DIR, the run keeps the tokenizer, eval per label, generate.
"$lol" train --preset tiny --set vocab_size=400 --data "corpus:$tmp/c1" --steps 30 \
  --train-set seq_len=64 --train-set batch_rows=4 --train-set eval_every=30 \
  --train-set lr=3e-3 --out "$tmp/run" > /dev/null 2>&1 || fail "training on corpus:DIR failed"
cmp -s "$tmp/run/tokenizer.json" "$tmp/c1/tokenizer.json" || fail "the run has no copy of the tokenizer"
"$lol" eval --model "$tmp/run" --data "corpus:$tmp/c1" --split train --json-out "$tmp/eval.json" > "$tmp/eval.txt"
cat "$tmp/eval.txt"
node -e '
const e = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
const all = e.all;
if (!(all.tokens > 0 && all.bits_per_byte > 0 && all.loss < Math.log(400))) {
  console.error("eval: loss not below uniform over 400 tokens", all); process.exit(1);
}
if (!(all.unigram_loss > 0 && all.loss < all.unigram_loss)) {
  console.error("eval: loss not below the unigram baseline", all); process.exit(1);
}
if (!e.labels.ru || !e.labels.ja) { console.error("eval: no per-label rows"); process.exit(1); }
' "$tmp/eval.json"
out=$("$lol" generate --model "$tmp/run" --prompt "The router" --max-tokens 8 --echo)
case "$out" in
  "The router"*) ;;
  *) fail "generate --echo did not start with the prompt: '$out'" ;;
esac

# 4. Routes of text: a corpus split by label, and a TSV of label<TAB>text (escapes unfolded).
"$lol" route --model "$tmp/run" --data "corpus:$tmp/c1" --count 5 --out "$tmp/routes.jsonl" 2>/dev/null
[ "$(tail -n +2 "$tmp/routes.jsonl" | wc -l)" -ge 1 ] || fail "no routes from the corpus"
printf 'ru\tПривет, мир\\nвторая строка\nja\t東京の天気\n' > "$tmp/set.tsv"
"$lol" route --model "$tmp/run" --data "$tmp/set.tsv" --out "$tmp/routes_tsv.jsonl" 2>/dev/null
labels=$(tail -n +2 "$tmp/routes_tsv.jsonl" | node -e '
const lines = require("fs").readFileSync(0, "utf8").trim().split("\n").map(JSON.parse);
console.log(lines.map((l) => l.label + ":" + l.length).join(" "));')
expected_ru=$("$lol" tokenizer encode --tokenizer "$tmp/c1/tokenizer.json" --text "$(printf 'Привет, мир\nвторая строка')" | tr ',' '\n' | wc -l)
[ "$labels" = "ru:$expected_ru ja:$("$lol" tokenizer encode --tokenizer "$tmp/c1/tokenizer.json" --text "東京の天気" | tr ',' '\n' | wc -l)" ] ||
  fail "TSV text routes: got '$labels', expected ru:$expected_ru and the ja length"
"$lol" report "$tmp/routes_tsv.jsonl" --folds 2 --out "$tmp/report.html" 2>/dev/null ||
  fail "report on text routes"
# 5. The library-size sweep script at toy size: six families trained, evaluated and compared;
# a rerun finds every stage done and only redraws the comparison.
SWEEP_VOCAB=400 SWEEP_CORPUS="--val 0.2 --test 0.1 --chunk-tokens 64" \
  SWEEP_SET="d_model=32 n_heads=2 n_kv_heads=2 ffn_hidden=64 window=8 stride=4 max_seq_len=64" \
  SWEEP_TRAIN_SET="seq_len=64 batch_rows=2 eval_every=2 eval_batches=1 warmup_steps=1" \
  LOL="$lol" bash "$root/scripts/text_library_sweep.sh" "$tmp/sweep" 4 "$text" > "$tmp/sweep.log" 2>&1 ||
  fail "the sweep script failed: $(tail -3 "$tmp/sweep.log")"
for run in lol-L2 lol-L8 lol-L32 dense looped moe; do
  grep -q "^| $run | .* | eval.json |$" "$tmp/sweep/compare.md" || fail "no compare row for $run"
done
grep -q '^| lol-L32 | lol L=32 |' "$tmp/sweep/compare.md" && grep -q '^| moe | moe E=8/top1 strided |' "$tmp/sweep/compare.md" ||
  fail "compare rows do not name the families: $(cat "$tmp/sweep/compare.md")"
[ "$(grep -c '<svg' "$tmp/sweep/compare.html")" -eq 3 ] || fail "the comparison page does not have its three plots"
LOL="$lol" bash "$root/scripts/text_library_sweep.sh" "$tmp/sweep" 4 "$text" > "$tmp/sweep2.log" 2>&1 ||
  fail "the sweep rerun failed: $(tail -3 "$tmp/sweep2.log")"
! grep -q "^== " "$tmp/sweep2.log" || fail "the rerun trained again: $(grep '^== ' "$tmp/sweep2.log")"
echo "text_test: ok"

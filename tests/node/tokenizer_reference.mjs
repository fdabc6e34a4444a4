// The independent reference for lol's BPE tokenizers: Hugging Face's own `tokenizers` (the
// Rust library, npm binding) loads the same tokenizer.json and must give the same ids for
// every document, and decode them back to the text.
//
//   node tokenizer_reference.mjs variants TOKENIZER_JSON OUT_DIR
//     writes variants of a tokenizer.json in the layouts other models ship: GPT-2's ByteLevel
//     pre-tokenizer (its own regex, a prefix space, merges as "a b"), merges as pairs and
//     ignore_merges (Llama-3), Qwen2's (an NFC normalizer, its own Split pattern before a
//     ByteLevel without regex, chat markers as special tokens, added tokens with lstrip, rstrip
//     and single_word), a Sequence of NFKD and NFC normalizers, NFC then Lowercase, Nmt then NFC, three
//     sentencepiece-style layouts (Llama-2's, Mistral's, one with unknown characters: see
//     sentencepieceLayouts), and pre-tokenizer chains (StarCoder's, Falcon's, every Split
//     behavior, Whitespace, BertPreTokenizer, CharDelimiterSplit: see `layouts`), and two
//     WordPiece layouts, BERT's uncased one, a cased one and one under Metaspace (see
//     wordpieceLayouts), and two
//     WordLevel layouts (wordlevelLayouts).
//   node tokenizer_reference.mjs spm MODEL OUT_JSON
//     converts a sentencepiece Unigram model (spm_train's MODEL.model) into the tokenizer.json
//     that Hugging Face's converter writes for it (see spmToTokenizerJson), and into the older
//     layout of T5's files (OUT-t5.json: WhitespaceSplit before Metaspace).
//   node tokenizer_reference.mjs normal-lines OUT
//     writes lines that exercise a normalizer: every code point of planes 0-2 alone (no
//     surrogates, no newline), every seventh also inside text, after a full-width letter and
//     before a combining mark, and random strings of characters that compose, decompose, join
//     into grapheme clusters or are spaces and controls.
//   node tokenizer_reference.mjs normalize TOKENIZER_JSON LINES
//     HF's normalizer of the tokenizer.json applied to each line of LINES, one line each.
//   node tokenizer_reference.mjs normalize-diff LINES HF_OUT LOL_OUT
//     the lines where two normalizations of LINES differ; fails unless each is explained by
//     case pairs newer than Unicode 15 (for Lowercase: utf8proc has Unicode 15).
//   node tokenizer_reference.mjs pretokenize TOKENIZER_JSON LINES LOL_OUT
//     HF's pre-tokenizer on each line of LINES must give the pieces of `lol tokenizer
//     pretokenize --lines` (LOL_OUT, a JSON list per line).
//   node tokenizer_reference.mjs compare TOKENIZER_JSON DOCS_JSONL
//     DOCS_JSONL: `lol tokenizer encode --input DIR` output, {source, text, ids, decoded} per
//     line: HF's ids must equal ours, HF's decoding our decoding (and the text itself, in the
//     tokenizer's normal form: JavaScript's own String.normalize).
import { readFileSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { createReadStream } from "node:fs";
import { Tokenizer } from "tokenizers";

const [mode, tokenizerPath, target] = process.argv.slice(2);

// The fields of a protocol buffer message: [number, wire type, value] with varints as BigInt
// and everything else as the bytes it spans.
function* protoFields(buf) {
  const varint = (i) => {
    let v = 0n, shift = 0n;
    for (;;) {
      const b = buf[i++];
      v |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return [v, i];
      shift += 7n;
    }
  };
  for (let i = 0; i < buf.length;) {
    const [key, at] = varint(i);
    const field = Number(key >> 3n), wire = Number(key & 7n);
    if (wire === 0) {
      const [v, next] = varint(at);
      yield [field, wire, v];
      i = next;
    } else if (wire === 1 || wire === 5) {
      const n = wire === 1 ? 8 : 4;
      yield [field, wire, buf.subarray(at, at + n)];
      i = at + n;
    } else if (wire === 2) {
      const [len, start] = varint(at);
      yield [field, wire, buf.subarray(start, start + Number(len))];
      i = start + Number(len);
    } else {
      throw new Error(`protobuf wire type ${wire} at byte ${i}`);
    }
  }
}

// A sentencepiece Unigram model (ModelProto: pieces = 1 {piece = 1, score = 2, type = 3},
// normalizer_spec = 3 {precompiled_charsmap = 2}) as Hugging Face's SpmConverter writes it:
// the pieces with their scores, unknown / control / user-defined pieces as added tokens, the
// normalizer [Precompiled if the model has a character map, Strip the right end, Replace
// / {2,}/ by "▁"], a Metaspace pre-tokenizer that always prepends, and Metaspace decoding (or,
// with <0xNN> pieces, byte fallback and the decoder of Llama-2's layout).
function spmToTokenizerJson(buf) {
  const vocab = [], added = [];
  let charsmap = null, unk = null, bytes = false;
  for (const [field, , value] of protoFields(buf)) {
    if (field === 1) {
      let piece = "", score = 0, type = 1;
      for (const [f, , v] of protoFields(value)) {
        if (f === 1) piece = Buffer.from(v).toString("utf8");
        if (f === 2) score = Buffer.from(v).readFloatLE(0);
        if (f === 3) type = Number(v);
      }
      const id = vocab.length;
      vocab.push([piece, score]);
      if (type === 2) unk = id;
      if (type === 6) bytes = true;
      if (type === 2 || type === 3 || type === 4)
        added.push({ id, content: piece, single_word: false, lstrip: false, rstrip: false,
                     normalized: false, special: type !== 4 });
    } else if (field === 3) {
      for (const [f, , v] of protoFields(value))
        if (f === 2 && v.length > 0) charsmap = Buffer.from(v).toString("base64");
    }
  }
  const metaspace = { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true };
  return {
    version: "1.0", truncation: null, padding: null, added_tokens: added,
    normalizer: { type: "Sequence", normalizers: [
      ...(charsmap ? [{ type: "Precompiled", precompiled_charsmap: charsmap }] : []),
      { type: "Strip", strip_left: false, strip_right: true },
      { type: "Replace", pattern: { Regex: " {2,}" }, content: "\u2581" },
    ] },
    pre_tokenizer: metaspace,
    post_processor: null,
    decoder: bytes ? { type: "Sequence", decoders: [
      { type: "Replace", pattern: { String: "\u2581" }, content: " " },
      { type: "ByteFallback" }, { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 0 },
    ] } : metaspace,
    model: { type: "Unigram", unk_id: unk, vocab, byte_fallback: bytes },
  };
}

// Sentencepiece-style layouts of a byte-level tokenizer.json: its tokens that are whole UTF-8
// text become text tokens (a space written "▁"), merges between them keep their order, and
// <unk>, <s>, </s> and the 256 <0xNN> byte tokens come first, as in Llama-2's vocabulary.
//   llama2: Llama-2's layout (normalizer Prepend "▁" and Replace " " by "▁", no pre-tokenizer,
//           byte fallback, decoder Replace, ByteFallback, Fuse, Strip), with flagged added
//           tokens (withFlaggedTokens)
//   mistral: Metaspace pre-tokenizer prepending only at the start (prepend_scheme "first", not
//           split), no normalizer, the same decoder
//   spm-unk: no byte fallback, so characters outside the vocabulary are <unk> (runs fused);
//           Metaspace always prepending and splitting, and its decoder
// Added tokens that take the whitespace beside them (lstrip, rstrip) or match only as a word of
// their own (single_word), one of them normalized (so matched as the normalizer writes it).
function withFlaggedTokens(j) {
  let next = Math.max(...Object.values(j.model.vocab), ...j.added_tokens.map((t) => t.id)) + 1;
  const add = (content, flags) => j.added_tokens.push({ id: next++, content, single_word: false,
    lstrip: false, rstrip: false, normalized: false, special: false, ...flags });
  add("<mask>", { lstrip: true });
  add("<|assistant|>", { rstrip: true });
  add("word", { single_word: true });
  add("ord", {});
  add("yo", { normalized: true, lstrip: true, rstrip: true });
  return j;
}

// The text a byte-level token stands for (GPT-2's byte-level characters back to bytes), or null
// for a token of part of a character.
const byteOfChar = new Map();
for (let b = 0, next = 256; b < 256; ++b) {
  const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  byteOfChar.set(String.fromCodePoint(printable ? b : next++), b);
}
function byteLevelTokenText(visible) {
  try {
    return new TextDecoder("utf-8", { fatal: true })
      .decode(Uint8Array.from([...visible].map((c) => byteOfChar.get(c))));
  } catch {
    return null;
  }
}

function sentencepieceLayouts(base) {
  const textOf = (visible) => byteLevelTokenText(visible)?.replaceAll(" ", "\u2581") ?? null;
  const specials = ["<unk>", "<s>", "</s>"];
  const vocab = {};
  specials.forEach((t, i) => { vocab[t] = i; });
  for (let b = 0; b < 256; ++b) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`] = 3 + b;
  let id = 259;
  const byId = Object.entries(base.model.vocab).sort((x, y) => x[1] - y[1]);
  for (const [visible] of byId) {
    const text = textOf(visible);
    if (text !== null && !(text in vocab)) vocab[text] = id++;
  }
  const merges = [];
  for (const m of base.model.merges) {
    const [l, r] = (typeof m === "string" ? m.split(" ") : m).map(textOf);
    if (l !== null && r !== null && l in vocab && r in vocab && l + r in vocab) merges.push(`${l} ${r}`);
  }
  const added = specials.map((content, i) => ({ id: i, content, single_word: false, lstrip: false,
                                                 rstrip: false, normalized: false, special: true }));
  const model = (byteFallback, fuseUnk) => ({
    type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: fuseUnk, byte_fallback: byteFallback, ignore_merges: false,
    vocab, merges });
  const llamaDecoder = { type: "Sequence", decoders: [
    { type: "Replace", pattern: { String: "\u2581" }, content: " " }, { type: "ByteFallback" },
    { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 0 }] };
  const layout = (normalizer, pre_tokenizer, decoder, byteFallback, fuseUnk) => ({
    version: "1.0", truncation: null, padding: null, added_tokens: added, normalizer, pre_tokenizer,
    post_processor: null, decoder, model: model(byteFallback, fuseUnk) });
  return {
    llama2: withFlaggedTokens(layout({ type: "Sequence", normalizers: [
      { type: "Prepend", prepend: "\u2581" },
      { type: "Replace", pattern: { String: " " }, content: "\u2581" }] }, null, llamaDecoder, true, true)),
    mistral: layout(null, { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false },
                    llamaDecoder, true, true),
    "spm-unk": layout(null, { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true },
                      { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true },
                      false, true),
  };
}

// WordPiece layouts of a byte-level tokenizer.json: each of its tokens that is whole UTF-8 text
// without whitespace is a token that starts a word and, with "##", one that continues it; one
// with a leading space only starts a word. [PAD], [UNK], [CLS], [SEP] and [MASK] come first.
// Characters no token covers make their word [UNK].
//   wordpiece: BERT's uncased layout (BertNormalizer lowercasing, so stripping accents too,
//              BertPreTokenizer, the WordPiece decoder with cleanup, TemplateProcessing)
//   wordpiece-cased: BertNormalizer without lowercase or stripping, then NFKD and StripAccents;
//              WhitespaceSplit, Punctuation and single Digits; words of at most 10 characters;
//              the decoder without cleanup
// A vocabulary of BERT's special tokens and the base tokenizer's tokens as words: each token's
// text without its leading space (lowercased if `lower`), then `forms(word, spaced)` of each
// (spaced: the token had that space).
function wordVocab(base, lower, forms) {
  const vocab = {};
  let id = 0;
  const add = (t) => { if (t && !(t in vocab)) vocab[t] = id++; };
  bertSpecials.forEach(add);
  for (const [visible] of Object.entries(base.model.vocab).sort((x, y) => x[1] - y[1])) {
    let text = byteLevelTokenText(visible);
    if (text === null) continue;  // part of a character
    if (lower) text = text.toLowerCase();
    const word = text.replace(/^ /, "");
    if (/\s/.test(word) || !word) continue;
    forms(word, word !== text).forEach(add);
  }
  return vocab;
}
const bertSpecials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
const bertAdded = (vocab) => bertSpecials.map((content) => ({ id: vocab[content], content,
  single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));

// WordLevel layouts: the words lowercased, the Whitespace pre-tokenizer, no decoder (tokens
// joined with spaces); and the words as they are, each also with "▁" in front, under Metaspace.
function wordlevelLayouts(base) {
  const plain = wordVocab(base, true, (word) => [word]);
  const marked = wordVocab(base, false, (word) => [word, "\u2581" + word]);
  const metaspace = { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true };
  return {
    wordlevel: {
      version: "1.0", truncation: null, padding: null, added_tokens: bertAdded(plain),
      normalizer: { type: "Sequence", normalizers: [{ type: "NFC" }, { type: "Lowercase" }] },
      pre_tokenizer: { type: "Whitespace" }, post_processor: null, decoder: null,
      model: { type: "WordLevel", vocab: plain, unk_token: "[UNK]" },
    },
    "wordlevel-metaspace": {
      version: "1.0", truncation: null, padding: null, added_tokens: bertAdded(marked),
      normalizer: null, pre_tokenizer: metaspace, post_processor: null, decoder: metaspace,
      model: { type: "WordLevel", vocab: marked, unk_token: "[UNK]" },
    },
  };
}

function wordpieceLayouts(base) {
  const make = (lower) => wordVocab(base, lower, (word, spaced) => spaced ? [word] : [word, "##" + word]);
  const added = bertAdded;
  const marked = wordVocab(base, false, (word) => ["\u2581" + word, "##" + word]);
  const metaspace = { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true };
  const bert = (lowercase, strip_accents) =>
    ({ type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents, lowercase });
  const uncased = make(true), cased = make(false);
  return {
    wordpiece: {
      version: "1.0", truncation: null, padding: null, added_tokens: added(uncased),
      normalizer: bert(true, null), pre_tokenizer: { type: "BertPreTokenizer" },
      post_processor: { type: "TemplateProcessing",
        single: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
                 { SpecialToken: { id: "[SEP]", type_id: 0 } }],
        pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
        special_tokens: { "[CLS]": { id: "[CLS]", ids: [uncased["[CLS]"]], tokens: ["[CLS]"] },
                          "[SEP]": { id: "[SEP]", ids: [uncased["[SEP]"]], tokens: ["[SEP]"] } } },
      decoder: { type: "WordPiece", prefix: "##", cleanup: true },
      model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##",
               max_input_chars_per_word: 100, vocab: uncased },
    },
    // Under Metaspace: every word starts with "▁"; no normalizer, a Metaspace decoder.
    "wordpiece-metaspace": {
      version: "1.0", truncation: null, padding: null, added_tokens: added(marked),
      normalizer: null, pre_tokenizer: metaspace, post_processor: null, decoder: metaspace,
      model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##",
               max_input_chars_per_word: 100, vocab: marked },
    },
    "wordpiece-cased": {
      version: "1.0", truncation: null, padding: null, added_tokens: added(cased),
      normalizer: { type: "Sequence", normalizers: [bert(false, false), { type: "NFKD" },
                                                    { type: "StripAccents" }] },
      pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "WhitespaceSplit" },
        { type: "Punctuation", behavior: "Isolated" }, { type: "Digits", individual_digits: true }] },
      post_processor: null,
      decoder: { type: "WordPiece", prefix: "##", cleanup: false },
      model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##",
               max_input_chars_per_word: 10, vocab: cased },
    },
  };
}

if (mode === "variants") {
  const base = JSON.parse(readFileSync(tokenizerPath, "utf8"));
  const gpt2 = structuredClone(base);
  gpt2.pre_tokenizer = { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true };
  const pairs = structuredClone(base);
  pairs.model.merges = base.model.merges.map((m) => m.split(" "));
  pairs.model.ignore_merges = true;
  const qwen2 = structuredClone(base);
  qwen2.normalizer = { type: "NFC" };
  qwen2.pre_tokenizer = {
    type: "Sequence",
    pretokenizers: [
      {
        type: "Split",
        pattern: { Regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" },
        behavior: "Isolated",
        invert: false,
      },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    ],
  };
  qwen2.post_processor = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false };
  let next = Math.max(...Object.values(base.model.vocab), ...base.added_tokens.map((t) => t.id)) + 1;
  for (const content of ["<|im_start|>", "<|im_end|>"])
    qwen2.added_tokens.push({ id: next++, content, single_word: false, lstrip: false, rstrip: false,
                              normalized: false, special: true });
  withFlaggedTokens(qwen2);
  const nfkd = structuredClone(base);
  nfkd.normalizer = { type: "Sequence", normalizers: [{ type: "NFKD" }, { type: "NFC" }] };
  const lowercase = structuredClone(base);
  lowercase.normalizer = { type: "Sequence", normalizers: [{ type: "NFC" }, { type: "Lowercase" }] };
  const nmt = structuredClone(base);
  nmt.normalizer = { type: "Sequence", normalizers: [{ type: "Nmt" }, { type: "NFC" }] };
  // Pre-tokenizers other models chain (each over the same vocabulary and merges): StarCoder's
  // single digits before ByteLevel; Falcon's runs of punctuation, ByteLevel, then digit runs and
  // groups of three digits on the byte-level characters (where the bytes of one character can
  // part); every Split behavior, inverted too, ByteLevel's prefix space on each piece, and a
  // Split on "Ġ" that only the byte-level characters have; two that drop the whitespace
  // (Whitespace, BertPreTokenizer: their decodings lose it), and one that drops every "e"
  // (CharDelimiterSplit), with ByteLevel's prefix space on each piece.
  const preTokenized = (...pretokenizers) => {
    const j = structuredClone(base);
    j.pre_tokenizer = { type: "Sequence", pretokenizers };
    return j;
  };
  const byteLevel = (add_prefix_space, use_regex) =>
    ({ type: "ByteLevel", add_prefix_space, trim_offsets: true, use_regex });
  const split = (pattern, behavior, invert = false) => ({ type: "Split", pattern, behavior, invert });
  const layouts = {
    starcoder: preTokenized({ type: "Digits", individual_digits: true }, byteLevel(false, true)),
    falcon: preTokenized({ type: "Punctuation", behavior: "Contiguous" }, byteLevel(false, true),
                         { type: "Digits", individual_digits: false },
                         split({ Regex: "[0-9][0-9][0-9]" }, "Isolated")),
    behaviors: preTokenized(split({ String: "-" }, "MergedWithNext"),
                            split({ Regex: "\\s+" }, "MergedWithPrevious", true),
                            split({ String: "." }, "MergedWithPrevious"),
                            split({ Regex: "[,;:]" }, "MergedWithNext", true),
                            split({ Regex: "\\p{Lu}" }, "Contiguous"),
                            byteLevel(true, true), split({ String: "Ġ" }, "Contiguous")),
    whitespace: preTokenized({ type: "Whitespace" }, byteLevel(false, false)),
    bert: preTokenized({ type: "BertPreTokenizer" }, byteLevel(false, false)),
    chardelim: preTokenized({ type: "CharDelimiterSplit", delimiter: "e" }, byteLevel(true, true)),
  };
  for (const [name, layout] of Object.entries(layouts))
    writeFileSync(`${target}/${name}.json`, JSON.stringify(layout));
  for (const [name, layout] of Object.entries({ ...sentencepieceLayouts(base), ...wordpieceLayouts(base),
                                                   ...wordlevelLayouts(base) }))
    writeFileSync(`${target}/${name}.json`, JSON.stringify(layout));
  writeFileSync(`${target}/gpt2.json`, JSON.stringify(gpt2));
  writeFileSync(`${target}/llama3.json`, JSON.stringify(pairs));
  writeFileSync(`${target}/qwen2.json`, JSON.stringify(qwen2));
  writeFileSync(`${target}/nfkd.json`, JSON.stringify(nfkd));
  writeFileSync(`${target}/lowercase.json`, JSON.stringify(lowercase));
  writeFileSync(`${target}/nmt.json`, JSON.stringify(nmt));
  console.log("variants: gpt2.json llama3.json qwen2.json nfkd.json lowercase.json nmt.json llama2.json mistral.json " +
              "spm-unk.json wordpiece.json wordpiece-cased.json wordpiece-metaspace.json wordlevel.json wordlevel-metaspace.json " + Object.keys(layouts).map((n) => `${n}.json`).join(" "));
} else if (mode === "spm") {
  const converted = spmToTokenizerJson(readFileSync(tokenizerPath));
  writeFileSync(target, JSON.stringify(converted));
  // The older layout T5's files have: words split at whitespace first, each with "▁" in front
  // (the older add_prefix_space spelling), runs of spaces squeezed to one, no Strip.
  const t5 = structuredClone(converted);
  const metaspace = { type: "Metaspace", replacement: "\u2581", add_prefix_space: true };
  t5.pre_tokenizer = { type: "Sequence", pretokenizers: [{ type: "WhitespaceSplit" }, metaspace] };
  t5.decoder = metaspace;
  t5.normalizer.normalizers = t5.normalizer.normalizers.filter((n) => n.type === "Precompiled")
    .concat([{ type: "Replace", pattern: { Regex: " {2,}" }, content: " " }]);
  writeFileSync(target.replace(/\.json$/, "-t5.json"), JSON.stringify(t5));
  console.log(`spm: ${target}, ${target.replace(/\.json$/, "-t5.json")}`);
} else if (mode === "normal-lines") {
  const lines = [];
  const chars = [];
  for (let cp = 0; cp < 0x30000; ++cp)
    if (!(cp >= 0xd800 && cp <= 0xdfff) && cp !== 0x0a) chars.push(String.fromCodePoint(cp));
  for (const [i, c] of chars.entries()) {
    lines.push(c);
    if (i % 7 === 0) lines.push(`a${c}b`, `\uff21${c}`, `${c}\u0301`);
  }
  const pool = [..."aeAE \t\r\u00a0\u3000\u2028\u0301\u0308\u0323\u0327\u1100\u1161\u11a8\uac00\uff21\uff41" +
    "\u2460\ufb01\u212b\u1e9b\u0958\u0915\u093c\u094d\u200d\u200c\u0000\u0001\u007f\u0085\ufeff" +
    "\u{1f468}\u{1f469}\u{1f1ef}\u{1f1f5}\u{1f3fb}\u0e33\u0e40\u3099\u309a\u304b\uff76\uff9e\u00bd"];
  let seed = 12345;
  const random = (n) => (seed = (seed * 1103515245 + 12345) % 2147483648) % n;
  for (let k = 0; k < 20000; ++k) {
    let line = "";
    for (let n = 1 + random(12); n > 0; --n) line += pool[random(pool.length)];
    lines.push(line);
  }
  writeFileSync(tokenizerPath, lines.join("\n") + "\n");
} else if (mode === "normalize") {
  const normalizer = Tokenizer.fromFile(tokenizerPath).getNormalizer();
  const lines = readFileSync(target, "utf8").split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  process.stdout.write(lines.map((l) => (normalizer ? normalizer.normalizeString(l) : l) + "\n").join(""));
} else if (mode === "normalize-diff") {
  // LINES, HF's normalization of them and lol's (argv: LINES HF LOL): the lines where they
  // differ, and whether every differing character of the input is a case pair that Unicode 16
  // and 17 added (utf8proc 2.8 has Unicode 15; HF's Rust has the newer tables).
  const newer = [[0x1c89, 0x1c8a], [0xa7cb, 0xa7dc], [0x10d50, 0x10d65], [0x16ea0, 0x16eb8]];
  const [hf, lol] = [target, process.argv[5]].map((f) => readFileSync(f, "utf8").split("\n"));
  const input = readFileSync(tokenizerPath, "utf8").split("\n");
  let differ = 0, unexplained = 0;
  for (let i = 0; i < input.length; ++i) {
    if (hf[i] === lol[i]) continue;
    ++differ;
    // Character by character (the same lengths), each difference at such a character.
    const [chars, h, l] = [input[i], hf[i], lol[i]].map((t) => [...t]);
    const explained = h.length === chars.length && l.length === chars.length &&
      chars.every((c, k) => h[k] === l[k] ||
                            newer.some(([a, b]) => c.codePointAt(0) >= a && c.codePointAt(0) <= b));
    if (!explained && ++unexplained <= 3)
      console.error(`line ${i + 1}: ${JSON.stringify(input[i])} -> hf ${JSON.stringify(hf[i])} ` +
                    `lol ${JSON.stringify(lol[i])}`);
  }
  console.log(`${input.length} lines: ${differ} differ, ${differ - unexplained} at case pairs newer ` +
              `than Unicode 15, ${unexplained} otherwise`);
  process.exit(unexplained === 0 && hf.length === lol.length ? 0 : 1);
} else if (mode === "pretokenize") {
  const pre = Tokenizer.fromFile(tokenizerPath).getPreTokenizer();
  const input = readFileSync(target, "utf8").split("\n");
  if (input.at(-1) === "") input.pop();
  const lol = readFileSync(process.argv[5], "utf8").split("\n").filter((l) => l !== "")
    .map((l) => JSON.parse(l));
  let differ = 0, pieces = 0;
  input.forEach((line, i) => {
    const hf = pre ? pre.preTokenizeString(line).map(([p]) => p) : line ? [line] : [];
    pieces += hf.length;
    if (JSON.stringify(hf) !== JSON.stringify(lol[i]) && ++differ <= 3)
      console.error(`line ${i + 1}: ${JSON.stringify(line)} hf ${JSON.stringify(hf)} lol ` +
                    `${JSON.stringify(lol[i])}`);
  });
  console.log(`${tokenizerPath}: ${input.length} lines, ${pieces} pieces, ${differ} lines differ`);
  process.exit(differ === 0 && lol.length === input.length && input.length > 0 ? 0 : 1);
} else if (mode === "compare") {
  const tok = Tokenizer.fromFile(tokenizerPath);
  // GPT-2's layout puts a space before a text (and after an added token) that does not start
  // with one, and decoding keeps it; other layouts decode to the text itself.
  const json = JSON.parse(readFileSync(tokenizerPath, "utf8"));
  const preSteps = json.pre_tokenizer?.type === "Sequence" ? json.pre_tokenizer.pretokenizers
    : [json.pre_tokenizer ?? {}];
  const prefix = json.pre_tokenizer?.add_prefix_space === true ||
    preSteps.some((p) => p.type === "ByteLevel" && p.add_prefix_space === true);
  // Pre-tokenizers that drop text (whitespace, or a Split's matches): decodings lose it.
  // WordPiece decodings put spaces between words, wherever the pre-tokenizer cut.
  const lossy = preSteps.some((p) => ["Whitespace", "BertPreTokenizer", "CharDelimiterSplit"].includes(p.type) ||
    p.behavior === "Removed") || json.model.type === "WordPiece";
  // The text in the tokenizer's normal form(s), by JavaScript's own implementation, and
  // lowercased as HF's Lowercase does: each character alone (no final-sigma rule); Nmt's rule.
  const forms = (!json.normalizer ? [] : json.normalizer.type === "Sequence"
    ? json.normalizer.normalizers.map((n) => n.type) : [json.normalizer.type])
    .filter((f) => f.startsWith("NF") || f === "Lowercase" || f === "Nmt");
  // Nmt: sentencepiece's list of controls that go and of characters that become a space.
  const nmt = (t) => t.replace(/[\u0001-\u0008\u000b\u000e-\u001f\u007f\u008f\u009f]/gu, "")
    .replace(/[\t\n\f\r\u1680\u200b-\u200f\u2028\u2029\u2581\ufeff\ufffd]/gu, " ");
  const normal = (text) => forms.reduce((t, f) => f === "Lowercase"
    ? [...t].map((c) => c.toLowerCase()).join("") : f === "Nmt" ? nmt(t) : t.normalize(f), text);
  // Sentencepiece-style layouts decode to the text itself only where no character was unknown,
  // no added token put a "▁" after it, and no leading space was taken for the prepended one.
  // Nor where an added token took the whitespace beside it (lstrip, rstrip).
  const sentencepiece = json.model.unk_token !== null;
  const special = new Set(json.added_tokens.map((t) => t.id));
  const stripping = new Set(json.added_tokens.filter((t) => t.lstrip || t.rstrip).map((t) => t.id));
  // Nor, with a converted sentencepiece model's normalizer (Strip, Replace by regex), where
  // spaces run or whitespace ends the text.
  const steps = !json.normalizer ? [] : json.normalizer.type === "Sequence" ? json.normalizer.normalizers
    : [json.normalizer];
  // With sentencepiece's character map (Precompiled: NFKC and its own rules for whitespace and
  // control characters), only where NFKC leaves the text and it has no control character
  // (newlines included: the map makes them spaces).
  const squeezes = steps.some((n) => n.type === "Strip" || n.pattern?.Regex !== undefined);
  const charsmap = steps.some((n) => n.type === "Precompiled");
  // Nor where byte tokens stand for characters and the decoder has no ByteFallback (T5's layout).
  const entries = Array.isArray(json.model.vocab) ? json.model.vocab.map(([t], i) => [t, i])
    : Object.entries(json.model.vocab);
  const byteIds = new Set(entries.filter(([t]) => /^<0x[0-9A-F]{2}>$/.test(t)).map(([, i]) => i));
  const rawBytes = !JSON.stringify(json.decoder ?? null).includes("ByteFallback");
  // Nor, after WhitespaceSplit, where whitespace other than single spaces between words was.
  const wordsOnly = JSON.stringify(json.pre_tokenizer ?? null).includes("WhitespaceSplit");
  // Nor where the unknown token stands for text.
  const unkId = json.model.unk_id ?? Object.fromEntries(entries)[json.model.unk_token];
  const exact = (doc) => !(rawBytes && doc.ids.some((i) => byteIds.has(i))) &&
    !doc.ids.includes(unkId) &&
    !(wordsOnly && /[^\S ]| {2,}|^\s|\s$/.test(doc.text)) &&
    !prefix && !lossy && !doc.ids.some((i) => stripping.has(i)) && !(sentencepiece &&
    (doc.ids.some((i) => special.has(i)) || /^\s/.test(doc.text))) &&
    !(squeezes && / {2,}|\s$/.test(doc.text)) &&
    !(charsmap && (doc.text.normalize("NFKC") !== doc.text || /[\x00-\x1f\x7f]/.test(doc.text)));
  let docs = 0, tokens = 0, bytes = 0, mismatches = 0, exactDocs = 0, unknownDocs = 0;
  const lines = createInterface({ input: createReadStream(target), crlfDelay: Infinity });
  for await (const line of lines) {
    if (!line) continue;
    const doc = JSON.parse(line);
    const enc = await tok.encode(doc.text, null, { addSpecialTokens: false });
    const ids = enc.getIds();
    const same = ids.length === doc.ids.length && ids.every((v, i) => v === doc.ids[i]);
    if (!same) {
      if (++mismatches <= 3) {
        let i = 0;
        while (i < ids.length && ids[i] === doc.ids[i]) ++i;
        console.error(`MISMATCH ${doc.source} at token ${i}: hf ${JSON.stringify(ids.slice(i, i + 8))} ` +
                      `lol ${JSON.stringify(doc.ids.slice(i, i + 8))} near ` +
                      JSON.stringify(enc.getTokens().slice(Math.max(0, i - 2), i + 4)));
      }
      continue;
    }
    const text = await tok.decode(doc.ids, false);
    if (text !== doc.decoded || (exact(doc) && text !== normal(doc.text))) {
      let at = 0;
      while (at < text.length && text[at] === doc.decoded[at]) ++at;
      if (++mismatches <= 3)
        console.error(`DECODE MISMATCH ${doc.source} at character ${at}: ` +
                      `hf ${JSON.stringify(text.slice(Math.max(0, at - 20), at + 40))} ` +
                      `lol ${JSON.stringify(doc.decoded.slice(Math.max(0, at - 20), at + 40))}`);
      continue;
    }
    exactDocs += exact(doc);
    unknownDocs += doc.ids.includes(unkId);
    ++docs;
    tokens += ids.length;
    bytes += Buffer.byteLength(doc.text, "utf8");
  }
  console.log(`${tokenizerPath}: ${docs} documents agree (${tokens} tokens, ${bytes} bytes; ` +
              `${exactDocs} decode to their text, ${unknownDocs} hold the unknown token), ` +
              `${mismatches} differ`);
  // Some document must decode to its text, unless none can (a prefix space, a lossy
  // pre-tokenizer, an unknown token in every one).
  process.exit(mismatches === 0 && docs > 0 &&
               (exactDocs > 0 || prefix || lossy || unknownDocs === docs) ? 0 : 1);
} else {
  console.error("usage: tokenizer_reference.mjs variants|spm|normal-lines|normalize|normalize-diff|pretokenize|compare ... (see the header)");
  process.exit(2);
}

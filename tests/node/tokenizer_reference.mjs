// The independent reference for lol's byte-level BPE: Hugging Face's own `tokenizers` (the
// Rust library, npm binding) loads the same tokenizer.json and must give the same ids for
// every document, and decode them back to the text.
//
//   node tokenizer_reference.mjs variants TOKENIZER_JSON OUT_DIR
//     writes variants of a tokenizer.json in the layouts other models ship: GPT-2's ByteLevel
//     pre-tokenizer (its own regex, a prefix space, merges as "a b"), merges as pairs and
//     ignore_merges (Llama-3), Qwen2's (an NFC normalizer, its own Split pattern before a
//     ByteLevel without regex, chat markers as special tokens), and a Sequence of NFKD and NFC
//     normalizers.
//   node tokenizer_reference.mjs compare TOKENIZER_JSON DOCS_JSONL
//     DOCS_JSONL: `lol tokenizer encode --input DIR` output, {source, text, ids, decoded} per
//     line: HF's ids must equal ours, HF's decoding our decoding (and the text itself, in the
//     tokenizer's normal form: JavaScript's own String.normalize).
import { readFileSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { createReadStream } from "node:fs";
import { Tokenizer } from "tokenizers";

const [mode, tokenizerPath, target] = process.argv.slice(2);

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
  const nfkd = structuredClone(base);
  nfkd.normalizer = { type: "Sequence", normalizers: [{ type: "NFKD" }, { type: "NFC" }] };
  writeFileSync(`${target}/gpt2.json`, JSON.stringify(gpt2));
  writeFileSync(`${target}/llama3.json`, JSON.stringify(pairs));
  writeFileSync(`${target}/qwen2.json`, JSON.stringify(qwen2));
  writeFileSync(`${target}/nfkd.json`, JSON.stringify(nfkd));
  console.log("variants: gpt2.json llama3.json qwen2.json nfkd.json");
} else if (mode === "compare") {
  const tok = Tokenizer.fromFile(tokenizerPath);
  // GPT-2's layout puts a space before a text (and after an added token) that does not start
  // with one, and decoding keeps it; other layouts decode to the text itself.
  const json = JSON.parse(readFileSync(tokenizerPath, "utf8"));
  const prefix = json.pre_tokenizer?.add_prefix_space === true;
  // The text in the tokenizer's normal form(s), by JavaScript's own implementation.
  const forms = !json.normalizer ? [] : json.normalizer.type === "Sequence"
    ? json.normalizer.normalizers.map((n) => n.type) : [json.normalizer.type];
  const normal = (text) => forms.reduce((t, f) => t.normalize(f), text);
  let docs = 0, tokens = 0, bytes = 0, mismatches = 0;
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
    if (text !== doc.decoded || (!prefix && text !== normal(doc.text))) {
      if (++mismatches <= 3) console.error(`DECODE MISMATCH ${doc.source}`);
      continue;
    }
    ++docs;
    tokens += ids.length;
    bytes += Buffer.byteLength(doc.text, "utf8");
  }
  console.log(`${tokenizerPath}: ${docs} documents agree (${tokens} tokens, ${bytes} bytes), ` +
              `${mismatches} differ`);
  process.exit(mismatches === 0 && docs > 0 ? 0 : 1);
} else {
  console.error("usage: tokenizer_reference.mjs variants|compare TOKENIZER_JSON OUT_DIR|DOCS_JSONL");
  process.exit(2);
}

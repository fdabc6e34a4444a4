// lol tokenizer train|encode|decode|info and lol corpus build: text in and out of token ids.
#include <functional>
#include <iomanip>
#include <iostream>
#include <iterator>

#include "commands.h"
#include "text/bpe_train.h"
#include "text/corpus.h"
#include "text/subword.h"
#include "text/utf8.h"
#include "util/error.h"
#include "util/files.h"
#include "util/progress.h"

namespace lol::cli {
namespace {

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

void print_summary(const CorpusSummary& s) {
  std::printf("%-8s %9s %12s %12s %9s %9s\n", "label", "documents", "train bytes", "train tokens",
              "val tok", "test tok");
  int64_t bytes = 0, tokens = 0;
  for (const auto& entry : s.counts) {
    const auto& label = entry.first;
    const auto& splits = entry.second;  // captured below: a structured binding cannot be (C++17)
    auto get = [&](const char* split) {
      const auto it = splits.find(split);
      return it == splits.end() ? CorpusCounts{} : it->second;
    };
    const auto train = get("train"), val = get("val"), test = get("test");
    std::printf("%-8s %9lld %12lld %12lld %9lld %9lld\n", label.c_str(),
                static_cast<long long>(train.documents + val.documents + test.documents),
                static_cast<long long>(train.bytes), static_cast<long long>(train.tokens),
                static_cast<long long>(val.tokens), static_cast<long long>(test.tokens));
    bytes += train.bytes;
    tokens += train.tokens;
  }
  std::printf("train: %lld bytes, %lld tokens (%.2f bytes per token)\n",
              static_cast<long long>(bytes), static_cast<long long>(tokens),
              tokens ? static_cast<double>(bytes) / tokens : 0.0);
}

}  // namespace

namespace {

// The text of --text (`given`) or stdin, which must be UTF-8, whole or (`lines`) line by line:
// `emit` sees each part and whether a newline followed it in the text.
void for_each_part(const std::string& given, bool lines,
                   const std::function<void(std::string_view, bool)>& emit) {
  const std::string text = given.empty() ? read_stdin() : given;
  LOL_CHECK(valid_utf8(text), "the text is not valid UTF-8");
  if (!lines) return emit(text, false);
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    emit(std::string_view(text).substr(at, end - at), end < text.size());
    at = end + 1;
  }
}

}  // namespace

void add_tokenizer_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand(
      "tokenizer",
      "train a byte-level BPE; encode, decode, normalize, pre-tokenize with or describe a "
      "tokenizer.json (BPE, byte-level or sentencepiece-style, Unigram, WordPiece or WordLevel)");

  struct TrainOpts {
    std::string input, out, normalizer = "none";
    BpeTrainOptions bpe;
    int64_t bytes_per_label = 4'000'000;
  };
  auto t = std::make_shared<TrainOpts>();
  auto* train = cmd->add_subcommand("train", "learn a byte-level BPE from a text tree");
  train->add_option("--input", t->input, "directory INPUT/<label>/*.txt")->required();
  train->add_option("--vocab-size", t->bpe.vocab_size, "tokens: 256 bytes + merges + specials")
      ->capture_default_str()
      ->check(at_least(258));
  train->add_option("--bytes-per-label", t->bytes_per_label, "training text taken from each label")
      ->capture_default_str()
      ->check(at_least(1));
  train->add_option("--min-frequency", t->bpe.min_frequency, "rarer pairs are not merged")
      ->capture_default_str()
      ->check(at_least(1));
  train
      ->add_option("--normalizer", t->normalizer,
                   "Unicode normal form of the training text and of every text encoded: "
                   "none, nfc, nfd, nfkc or nfkd")
      ->capture_default_str();
  train->add_option("--out", t->out, "tokenizer.json to write")->required();
  commands.emplace_back(train, [t] {
    t->bpe.normalizer = Normalizer::named(t->normalizer);
    CorpusSummary ignored;
    const auto docs = read_text_documents(t->input, false, &ignored);
    std::map<std::string, int64_t> used;
    std::vector<std::string> sample;
    for (const auto& d : docs)
      if (used[d.label] < t->bytes_per_label) {
        used[d.label] += d.text.size();
        sample.push_back(d.text);
      }
    Progress progress("merges", t->bpe.vocab_size - 256);
    const auto tok =
        train_bpe(sample, t->bpe, [&](int64_t done, int64_t) { progress.update(done, ""); });
    progress.finish("");
    tok->save(t->out);
    std::cerr << "wrote " << t->out << ": " << tok->vocab_size() << " tokens, "
              << tok->model().merges.size() << " merges\n";
  });

  struct CodeOpts {
    std::string tokenizer, text, ids, input;
  };
  auto e = std::make_shared<CodeOpts>();
  auto* encode = cmd->add_subcommand("encode", "text (--text or stdin) to ids, comma-separated");
  encode->add_option("--tokenizer", e->tokenizer, "tokenizer.json")->required();
  encode->add_option("--text", e->text, "text to encode (default: stdin)");
  encode->add_option("--input", e->input,
                     "a text tree INPUT/<label>/*.txt: one JSON line per document "
                     "{label, source, text, ids, decoded} (as `lol corpus build` reads it)");
  commands.emplace_back(encode, [e] {
    const auto tok = SubwordTokenizer::load(e->tokenizer);
    if (!e->input.empty()) {
      CorpusSummary ignored;
      for (const auto& doc : read_text_documents(e->input, false, &ignored)) {
        const auto ids = tok->encode(doc.text);
        std::cout << json_text(json{{"label", doc.label},
                                    {"source", doc.source},
                                    {"text", doc.text},
                                    {"ids", ids},
                                    {"decoded", tok->decode(ids)}})
                  << "\n";
      }
      return;
    }
    const auto ids = tok->encode(e->text.empty() ? read_stdin() : e->text);
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
    std::cout << out << "\n";
  });
  auto d = std::make_shared<CodeOpts>();
  auto* decode = cmd->add_subcommand("decode", "ids (--ids or stdin, comma-separated) to text");
  decode->add_option("--tokenizer", d->tokenizer, "tokenizer.json")->required();
  decode->add_option("--ids", d->ids, "ids such as 72,101 (default: stdin)");
  commands.emplace_back(decode, [d] {
    const auto tok = SubwordTokenizer::load(d->tokenizer);
    const auto ids = parse_int_list("--ids", d->ids.empty() ? read_stdin() : d->ids);
    std::cout << tok->decode(ids);
  });
  struct NormalizeOpts {
    std::string tokenizer, text;
    bool lines = false;
  };
  auto n = std::make_shared<NormalizeOpts>();
  auto* normalize = cmd->add_subcommand(
      "normalize", "text (--text or stdin) as the tokenizer's normalizer writes it");
  normalize->add_option("--tokenizer", n->tokenizer, "tokenizer.json")->required();
  normalize->add_option("--text", n->text, "text to normalize (default: stdin)");
  normalize->add_flag(
      "--lines", n->lines,
      "normalize each line of stdin on its own (the newlines are kept as they are)");
  commands.emplace_back(normalize, [n] {
    const auto tok = SubwordTokenizer::load(n->tokenizer);
    const auto& normalizer = tok->model().normalizer;
    for_each_part(n->text, n->lines, [&](std::string_view part, bool newline) {
      std::cout << normalizer.apply(part) << (newline ? "\n" : "");
    });
  });
  struct PreTokenizeOpts {
    std::string tokenizer, text;
    bool lines = false;
  };
  auto pt = std::make_shared<PreTokenizeOpts>();
  auto* pretokenize = cmd->add_subcommand(
      "pretokenize",
      "the pieces the pre-tokenizer cuts a text (--text or stdin) into, as a JSON list (byte-level "
      "pieces in their byte-level characters, as HF's pre_tokenize_str gives them)");
  pretokenize->add_option("--tokenizer", pt->tokenizer, "tokenizer.json")->required();
  pretokenize->add_option("--text", pt->text, "text to cut (default: stdin)");
  pretokenize->add_flag("--lines", pt->lines, "cut each line of stdin on its own: a list per line");
  commands.emplace_back(pretokenize, [pt] {
    const auto tok = SubwordTokenizer::load(pt->tokenizer);
    for_each_part(pt->text, pt->lines, [&](std::string_view part, bool) {
      json pieces = json::array();
      for (const auto& p : tok->pre_tokenize(part))
        pieces.push_back(tok->model().byte_level ? byte_level_text(p) : p);
      std::cout << pieces.dump() << "\n";
    });
  });
  struct InfoOpts {
    std::string tokenizer;
    bool json = false;
  };
  auto i = std::make_shared<InfoOpts>();
  auto* info = cmd->add_subcommand("info", "what a tokenizer.json holds and how it will encode");
  info->add_option("--tokenizer", i->tokenizer, "tokenizer.json")->required();
  info->add_flag("--json", i->json, "one JSON object instead of lines");
  commands.emplace_back(info, [i] {
    const auto desc = SubwordTokenizer::load(i->tokenizer)->describe();
    if (i->json) {
      std::cout << json_text(desc) << "\n";
      return;
    }
    auto line = [](const char* name, const json& value) {
      std::cout << std::left << std::setw(15) << name
                << (value.is_string() ? value.get<std::string>() : json_text(value)) << "\n";
    };
    line("kind", desc["kind"]);
    line("vocabulary", std::to_string(desc["vocab_size"].get<int64_t>()) + " ids: " +
                           std::to_string(desc["model_tokens"].get<int64_t>()) + " model tokens, " +
                           std::to_string(desc["added_tokens"].size()) + " added; " +
                           (desc["kind"] == "Unigram"     ? std::string("scored, no merges")
                            : desc["kind"] == "WordPiece" ? std::string("longest match, no merges")
                            : desc["kind"] == "WordLevel"
                                ? std::string("whole pre-tokens, no merges")
                                : std::to_string(desc["merges"].get<int64_t>()) + " merges"));
    for (const char* part : {"normalizer", "pre_tokenizer", "decoder"}) line(part, desc[part]);
    if (desc["kind"] != "byte-level BPE") {
      line("byte fallback", desc["byte_fallback"].get<bool>() ? "yes" : "no");
      line("unknown token", desc["unknown_token"].is_null()
                                ? std::string("none")
                                : desc["unknown_token"].get<std::string>() +
                                      (desc["fuse_unk"].get<bool>() ? " (runs fused)" : ""));
      if (desc["kind"] == "WordPiece")
        line("words", "continued by \"" + desc["continuing_prefix"].get<std::string>() +
                          "\", unknown past " +
                          std::to_string(desc["max_word_chars"].get<int64_t>()) + " characters");
      if (desc["kind"] == "sentencepiece-style BPE")
        line("word cuts", desc["cut_before"].is_null()
                              ? std::string("none (a token has the space mark after a character)")
                              : "before each run of " + desc["cut_before"].get<std::string>());
    }
    for (const char* special : {"bos", "eos", "pad"}) line(special, desc[special]);
    std::string added;
    for (const auto& token : desc["added_tokens"]) {
      std::string flags;
      for (const char* f : {"special", "normalized", "lstrip", "rstrip", "single_word"})
        if (token[f].get<bool>()) flags += std::string(flags.empty() ? "" : ",") + f;
      added += (added.empty() ? "" : " ") + json_text(token["content"]) + "=" +
               std::to_string(token["id"].get<int64_t>()) +
               (flags.empty() ? "" : "[" + flags + "]");
    }
    line("added tokens", added.empty() ? std::string("none") : added);
  });
  cmd->require_subcommand(1);
}

void add_corpus_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand("corpus", "text corpora as token shards");
  auto o = std::make_shared<CorpusOptions>();
  auto* build = cmd->add_subcommand(
      "build", "INPUT/<label>/*.txt -> OUT/{tokenizer.json,train,val,test shards,labels}");
  build->add_option("--input", o->input, "directory of text, one subdirectory per label")
      ->required();
  build->add_option("--out", o->out, "output directory")->required();
  auto* given = build->add_option("--tokenizer", o->tokenizer,
                                  "use this tokenizer.json (default: train one)");
  build->add_option("--vocab-size", o->vocab_size, "size of the tokenizer trained")
      ->capture_default_str()
      ->check(at_least(258));
  auto normalizer = std::make_shared<std::string>("none");
  build
      ->add_option("--normalizer", *normalizer,
                   "Unicode normal form of the tokenizer trained: none, nfc, nfd, nfkc or nfkd")
      ->capture_default_str()
      ->excludes(given);
  build
      ->add_option("--tokenizer-bytes", o->tokenizer_bytes_per_label,
                   "text per label the tokenizer is trained on")
      ->capture_default_str()
      ->check(at_least(1));
  build->add_option("--val", o->val_fraction, "fraction of documents held out for validation")
      ->capture_default_str();
  build->add_option("--test", o->test_fraction, "fraction of documents held out for test")
      ->capture_default_str();
  build->add_option("--chunk-tokens", o->chunk_tokens, "longest shard document (longer: cut)")
      ->capture_default_str()
      ->check(at_least(2));
  build
      ->add_option("--max-train-tokens", o->max_train_tokens_per_label,
                   "train tokens per label (0 = all; equal values make an equal-token mix)")
      ->capture_default_str()
      ->check(at_least(0));
  build->add_flag("--blocks", o->blocks, "blank-line-separated blocks are the documents");
  commands.emplace_back(build, [o, normalizer] {
    o->normalizer = Normalizer::named(*normalizer);
    const auto summary =
        build_corpus(*o, [](const std::string& line) { std::cerr << "corpus: " << line << "\n"; });
    print_summary(summary);
    std::cerr << "wrote " << o->out << "/{tokenizer.json,corpus.json,train,val,test}\n";
  });
  cmd->require_subcommand(1);
}

}  // namespace lol::cli

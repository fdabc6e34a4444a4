#include "text/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tasks/task.h"
#include "text/subword.h"
#include "util/error.h"
#include "util/json.h"
#include "util/parse.h"

namespace lol {
namespace {

namespace fs = std::filesystem;

// Words of a task vocabulary, separated by single spaces. The prompt window runs through the
// descriptor's "]" and the descriptor is router-only, as in the training documents (SPEC 3.1).
class TaskTokenizer : public Tokenizer {
 public:
  explicit TaskTokenizer(tasks::Kind kind) : kind_(kind), vocab_(tasks::vocabulary(kind)) {}
  std::string name() const override { return std::string("task:") + tasks::kind_name(kind_); }
  int64_t vocab_size() const override { return vocab_.size(); }
  std::vector<int64_t> encode(const std::string& text) const override {
    return vocab_.encode(tasks::split_words(text), "text");
  }
  std::string piece(int64_t id, bool first) const override {
    LOL_CHECK(id >= 0 && id < vocab_.size(), "token id ", id, " is outside the ", name(),
              " vocabulary [0, ", vocab_.size(), ")");
    return (first ? "" : " ") + vocab_.word(id);
  }
  std::optional<int64_t> eos() const override { return vocab_.id("<eos>", name()); }
  std::optional<int64_t> bos() const override { return std::nullopt; }
  std::optional<int64_t> pad() const override { return vocab_.id("<pad>", name()); }
  TokenSequence prompt(std::vector<int64_t> ids) const override {
    TokenSequence p;
    const int64_t open = vocab_.id("[", name()), close = vocab_.id("]", name());
    auto o = std::find(ids.begin(), ids.end(), open);
    auto c = std::find(ids.begin(), ids.end(), close);
    if (o != ids.end() && c != ids.end() && c > o) {
      p.prompt_len = c - ids.begin() + 1;
      for (auto i = o - ids.begin(); i <= c - ids.begin(); ++i) p.router_only.push_back(i);
    }
    p.tokens = std::move(ids);
    return p;
  }

 private:
  tasks::Kind kind_;
  const tasks::Vocabulary& vocab_;
};

// Token ids as decimal numbers separated by commas ("3,1,4", as --tokens takes them; spaces
// are read as separators too): what a model without a text vocabulary reads and writes.
class IdTokenizer : public Tokenizer {
 public:
  explicit IdTokenizer(int64_t vocab_size) : vocab_size_(vocab_size) {}
  std::string name() const override { return "ids"; }
  int64_t vocab_size() const override { return vocab_size_; }
  std::vector<int64_t> encode(const std::string& text) const override {
    std::string spaced = text;
    std::replace(spaced.begin(), spaced.end(), ',', ' ');
    std::vector<int64_t> ids;
    for (const auto& word : tasks::split_words(spaced)) {
      const auto id = parse_int(word);
      LOL_CHECK(id && *id >= 0 && *id < vocab_size_, "'", word, "' is not a token id in [0, ",
                vocab_size_,
                ") (this model has no text vocabulary: write ids separated by commas)");
      ids.push_back(*id);
    }
    return ids;
  }
  std::string piece(int64_t id, bool first) const override {
    LOL_CHECK(id >= 0 && id < vocab_size_, "token id ", id, " is outside the vocabulary [0, ",
              vocab_size_, ")");
    return (first ? "" : ",") + std::to_string(id);
  }
  std::optional<int64_t> eos() const override { return std::nullopt; }
  std::optional<int64_t> bos() const override { return std::nullopt; }
  std::optional<int64_t> pad() const override { return std::nullopt; }

 private:
  int64_t vocab_size_;
};

}  // namespace

TokenSequence Tokenizer::prompt(std::vector<int64_t> ids) const {
  TokenSequence p;
  p.tokens = std::move(ids);
  return p;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) text += piece(ids[i], i == 0);
  return text;
}

std::string Tokenizer::continuation(const std::vector<int64_t>& ids) const {
  std::string text;
  for (auto id : ids) text += piece(id, false);
  return text;
}

size_t find_stop(const std::string& text, const std::vector<std::string>& stops) {
  size_t first = std::string::npos;
  for (const auto& s : stops)
    if (!s.empty()) first = std::min(first, text.find(s));
  return first;
}

std::unique_ptr<Tokenizer> task_tokenizer(const std::string& task) {
  return std::make_unique<TaskTokenizer>(tasks::parse_kind(task));
}

std::unique_ptr<Tokenizer> id_tokenizer(int64_t vocab_size) {
  LOL_CHECK(vocab_size > 0, "a vocabulary needs at least one token");
  return std::make_unique<IdTokenizer>(vocab_size);
}

std::optional<std::string> model_file(const std::string& model_path, const std::string& name) {
  // A run directory, or a checkpoint two levels below one.
  const fs::path path(model_path);
  for (const auto& dir : {path, path / ".." / ".."}) {
    const auto file = dir / name;
    std::error_code ec;
    if (fs::is_regular_file(file, ec)) return file.lexically_normal().string();
  }
  return std::nullopt;
}

std::optional<tasks::TaskData> model_task(const std::string& model_path) {
  const auto file = model_file(model_path, "train_config.json");
  if (!file) return std::nullopt;
  std::ifstream in(*file);
  const json config = json::parse(in, nullptr, /*allow_exceptions=*/false);
  tasks::TaskData data;
  if (config.is_object() && config.contains("data") && config["data"].is_string() &&
      tasks::parse_task_data(config["data"].get<std::string>(), &data))
    return data;
  return std::nullopt;
}

std::unique_ptr<Tokenizer> model_tokenizer(const std::string& model_path, int64_t vocab_size,
                                           const std::string& task) {
  std::unique_ptr<Tokenizer> t;
  if (!task.empty())
    t = task_tokenizer(task);
  else if (auto file = model_file(model_path, "tokenizer.json"))
    t = SubwordTokenizer::load(*file);
  else if (auto data = model_task(model_path))
    t = std::make_unique<TaskTokenizer>(data->kind);
  else
    return id_tokenizer(vocab_size);
  LOL_CHECK(t->vocab_size() <= vocab_size, t->name(), " has ", t->vocab_size(),
            " tokens but the model only ", vocab_size);
  return t;
}

}  // namespace lol

#include "analysis/routes.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "data/shards.h"
#include "infer/generate.h"
#include "tasks/task.h"
#include "text/corpus.h"
#include "util/error.h"
#include "util/parse.h"

namespace lol {
namespace {

class TaskSequences : public LabelledSource {
 public:
  TaskSequences(tasks::Kind kind, int maze_size, int64_t count, uint64_t seed)
      : kind_(kind), source_(kind, maze_size, seed, /*split=*/1), count_(count) {}
  std::optional<LabelledSequence> next() override {
    if (index_ >= 5 * count_) return std::nullopt;
    const int strategy = static_cast<int>(index_ % 5) + 1;
    auto doc = source_.sequence(index_++).document(tasks::vocabulary(kind_));
    return LabelledSequence{tasks::strategy_name(kind_, strategy),
                            prompt_from_document(doc, static_cast<int64_t>(doc.tokens.size()))};
  }
  int64_t size() const override { return 5 * count_; }
  std::string describe() const override {
    return source_.describe() + " held-out, " + std::to_string(count_) + " puzzles x 5 strategies";
  }

 private:
  tasks::Kind kind_;
  tasks::TaskSource source_;
  int64_t count_, index_ = 0;
};

class TsvSequences : public LabelledSource {
 public:
  TsvSequences(const std::string& path, int64_t vocab_size, const Tokenizer* text)
      : path_(path), in_(path), vocab_size_(vocab_size), text_(text) {
    LOL_CHECK(in_.good(), path, ": cannot open");
    std::ifstream counter(path);
    for (std::string line; std::getline(counter, line);) size_ += !blank(line);
  }
  std::optional<LabelledSequence> next() override {
    std::string line;
    while (std::getline(in_, line)) {
      ++line_number_;
      if (!blank(line)) return parse(line);
    }
    return std::nullopt;
  }
  int64_t size() const override { return size_; }
  std::string describe() const override { return path_; }

 private:
  static bool blank(const std::string& line) {
    return line.find_first_not_of(" \t\r") == std::string::npos;
  }
  LabelledSequence parse(const std::string& line) const {
    const std::string where = path_ + " line " + std::to_string(line_number_);
    const auto tab = line.find('\t');
    LOL_CHECK(tab != std::string::npos && tab > 0, where, ": expected label<TAB>ids");
    LabelledSequence out;
    out.label = line.substr(0, tab);
    if (text_) {  // text, with \n, \t and \\ for a newline, a tab and a backslash
      std::string text;
      for (size_t i = tab + 1; i < line.size(); ++i) {
        if (line[i] == '\r' && i + 1 == line.size()) break;
        if (line[i] == '\\' && i + 1 < line.size()) {
          const char c = line[++i];
          text += c == 'n' ? '\n' : c == 't' ? '\t' : c;
        } else {
          text += line[i];
        }
      }
      try {
        out.sequence.tokens = text_->encode(text);
      } catch (const Error& e) {
        fail(where, ": ", e.what());
      }
      LOL_CHECK(!out.sequence.tokens.empty(), where, ": no text");
      return out;
    }
    std::stringstream ids(line.substr(tab + 1));
    for (std::string item; std::getline(ids, item, ',');) {
      const auto first = item.find_first_not_of(" \r");  // "1, 2, 3" and CR LF files too
      const auto id = first == std::string::npos
                          ? std::nullopt
                          : parse_int(std::string_view(item).substr(
                                first, item.find_last_not_of(" \r") + 1 - first));
      LOL_CHECK(id.has_value(), where, ": '", item,
                "' is not a token id (the second column holds comma-separated ids; text needs a "
                "tokenizer)");
      LOL_CHECK(*id >= 0 && *id < vocab_size_, where, ": token id ", *id,
                " is outside the vocabulary [0, ", vocab_size_, ")");
      out.sequence.tokens.push_back(*id);
    }
    LOL_CHECK(!out.sequence.tokens.empty(), where, ": no token ids");
    return out;
  }
  std::string path_;
  std::ifstream in_;
  int64_t vocab_size_, size_ = 0, line_number_ = 0;
  const Tokenizer* text_;
};

// Chunks of a corpus split, at most `per_label` of each label, in shard order.
class CorpusSequences : public LabelledSource {
 public:
  CorpusSequences(const std::string& dir, const std::string& split, int64_t per_label,
                  int64_t vocab_size)
      : describe_(dir + " " + split) {
    const auto table = read_chunk_table(dir + "/" + split + ".docs.tsv");
    int64_t shard_vocab = 0;
    auto docs = read_shard(dir + "/" + split + ".shard", &shard_vocab);
    LOL_CHECK(table.size() == docs.size(), dir, ": ", split, ".docs.tsv has ", table.size(),
              " rows but ", split, ".shard ", docs.size(), " documents");
    LOL_CHECK(shard_vocab <= vocab_size, dir, " uses ", shard_vocab,
              " token ids but the model has ", vocab_size);
    std::map<std::string, int64_t> taken;
    for (size_t i = 0; i < docs.size(); ++i) {
      if (docs[i].tokens.size() < 2 || taken[table[i].label] >= per_label) continue;
      ++taken[table[i].label];
      LabelledSequence s;
      s.label = table[i].label;
      s.sequence.tokens = std::move(docs[i].tokens);
      items_.push_back(std::move(s));
    }
  }
  std::optional<LabelledSequence> next() override {
    if (index_ >= items_.size()) return std::nullopt;
    return std::move(items_[index_++]);
  }
  int64_t size() const override { return static_cast<int64_t>(items_.size()); }
  std::string describe() const override { return describe_; }

 private:
  std::string describe_;
  std::vector<LabelledSequence> items_;
  size_t index_ = 0;
};

int64_t integer_field(const json& object, const char* key, const std::string& where) {
  LOL_CHECK(object.contains(key) && object[key].is_number_integer(), where, ": \"", key,
            "\" must be an integer");
  return object[key].get<int64_t>();
}

}  // namespace

std::unique_ptr<LabelledSource> task_sequences(const std::string& task, int maze_size,
                                               int64_t count, uint64_t seed) {
  LOL_CHECK(count > 0, "the number of puzzles must be > 0, got ", count);
  return std::make_unique<TaskSequences>(tasks::parse_kind(task), maze_size, count, seed);
}

std::unique_ptr<LabelledSource> tsv_sequences(const std::string& path, int64_t vocab_size,
                                              const Tokenizer* text) {
  return std::make_unique<TsvSequences>(path, vocab_size, text);
}

std::unique_ptr<LabelledSource> corpus_sequences(const std::string& dir, const std::string& split,
                                                 int64_t per_label, int64_t vocab_size) {
  LOL_CHECK(per_label > 0, "sequences per label must be > 0, got ", per_label);
  return std::make_unique<CorpusSequences>(dir, split, per_label, vocab_size);
}

json SequenceRoutes::to_json() const {
  json windows_json = json::array();
  for (const auto& w : windows) {
    auto j = w.route.to_json();
    j.erase("sequence");  // the line's
    j["prompt"] = w.prompt;
    j["router_only"] = w.router_only;
    if (w.flipped) j["flipped"] = *w.flipped;
    windows_json.push_back(std::move(j));
  }
  return {{"sequence", sequence},
          {"label", label},
          {"length", length},
          {"prompt_len", prompt_len},
          {"windows", windows_json}};
}

SequenceRoutes SequenceRoutes::from_json(const json& object) {
  LOL_CHECK(object.is_object(), "a sequence's routes must be a JSON object");
  SequenceRoutes s;
  s.sequence = integer_field(object, "sequence", "routes");
  LOL_CHECK(object.contains("label") && object["label"].is_string(),
            "routes: \"label\" must be a string");
  s.label = object["label"].get<std::string>();
  s.length = integer_field(object, "length", "routes");
  s.prompt_len = integer_field(object, "prompt_len", "routes");
  LOL_CHECK(object.contains("windows") && object["windows"].is_array(),
            "routes: \"windows\" must be an array");
  for (const auto& w : object["windows"]) {
    WindowRoute route;
    route.route = RouteRecord::from_json(w);
    route.route.sequence = s.sequence;
    LOL_CHECK(w.contains("prompt") && w["prompt"].is_boolean(),
              "routes: a window's \"prompt\" must be true or false");
    route.prompt = w["prompt"].get<bool>();
    route.router_only = integer_field(w, "router_only", "routes: a window");
    if (w.contains("flipped")) {
      LOL_CHECK(w["flipped"].is_boolean(), "routes: a window's \"flipped\" must be true or false");
      route.flipped = w["flipped"].get<bool>();
    }
    s.windows.push_back(std::move(route));
  }
  return s;
}

json RouteFileHeader::to_json() const {
  json j = {{"lol_routes", 1},
            {"model", model},
            {"source", source},
            {"core_depth", core_depth},
            {"library_size", library_size},
            {"sequences", sequences}};
  if (skip) j["router_skip"] = true;
  if (perturbation > 0) j["perturbation"] = perturbation;
  return j;
}

RouteFileHeader RouteFileHeader::from_json(const json& object) {
  LOL_CHECK(object.is_object() && object.contains("lol_routes") && object["lol_routes"] == 1,
            "not a route file (its first line must be a header with \"lol_routes\": 1)");
  RouteFileHeader h;
  if (object.contains("model") && object["model"].is_string())
    h.model = object["model"].get<std::string>();
  if (object.contains("source") && object["source"].is_string())
    h.source = object["source"].get<std::string>();
  h.core_depth = integer_field(object, "core_depth", "route file header");
  h.library_size = integer_field(object, "library_size", "route file header");
  h.sequences = integer_field(object, "sequences", "route file header");
  LOL_CHECK(h.core_depth > 0 && h.library_size > 0,
            "route file header: core_depth and library_size must be > 0");
  if (object.contains("router_skip")) {
    LOL_CHECK(object["router_skip"].is_boolean(),
              "route file header: \"router_skip\" must be true or false");
    h.skip = object["router_skip"].get<bool>();
  }
  if (object.contains("perturbation")) {
    LOL_CHECK(object["perturbation"].is_number() && object["perturbation"].get<double>() >= 0,
              "route file header: \"perturbation\" must be a number >= 0");
    h.perturbation = object["perturbation"].get<double>();
  }
  return h;
}

namespace {

// Per window of one depth: 1 where routing r + eps * rms(r) * z (unforced, with the balancing
// bias) picks another expert than the router picked for r. Empty when eps is 0.
std::vector<uint8_t> flips(const WindowRouting& routing, const RouteDecisions& decisions,
                           const std::vector<RouteRecord>& records, const ExtractOptions& options,
                           at::Generator& generator) {
  if (options.perturbation <= 0 || records.empty()) return {};
  const auto& r = decisions.router_inputs;
  const auto z = at::normal(0.0, 1.0, r.sizes(), generator).to(r.device(), r.scalar_type());
  const auto rms = r.pow(2).mean(1, /*keepdim=*/true).sqrt();
  std::vector<int64_t> ordinals;
  for (const auto& record : records) ordinals.push_back(record.window);
  const auto moved =
      routing.route(r + options.perturbation * rms * z, decisions.depth, ordinals, nullptr);
  const auto& now = moved.host().router_choice;
  const auto& before = decisions.host().router_choice;
  std::vector<uint8_t> out(records.size());
  for (size_t w = 0; w < records.size(); ++w) out[w] = now[w] != before[w];
  return out;
}

// A sequence longer than the model's context keeps its first max_seq_len tokens (and the
// router-only positions among them). Its routes are those of the whole sequence's windows up
// to there: a window's route depends only on the tokens before it (SPEC 1.4).
bool cut_to_max_seq_len(TokenSequence* s, int64_t max_seq_len) {
  if (static_cast<int64_t>(s->tokens.size()) <= max_seq_len) return false;
  s->tokens.resize(max_seq_len);
  s->prompt_len = std::min(s->prompt_len, max_seq_len);
  auto& ro = s->router_only;
  ro.erase(std::remove_if(ro.begin(), ro.end(), [&](int64_t p) { return p >= max_seq_len; }),
           ro.end());
  return true;
}

}  // namespace

int64_t extract_routes(LanguageModel& model, LabelledSource& source, const ExtractOptions& options,
                       const std::function<void(SequenceRoutes&&)>& sink) {
  const auto* routing = model->core().routing();
  LOL_CHECK(routing, "route extraction needs a core that routes windows (family lol); this is a ",
            enum_name(model->config().family), " model");
  LOL_CHECK(options.batch_size > 0, "the batch size must be > 0, got ", options.batch_size);
  LOL_CHECK(options.perturbation >= 0 && std::isfinite(options.perturbation),
            "the perturbation must be >= 0, got ", options.perturbation);
  torch::NoGradGuard no_grad;
  model->eval();
  const auto device = model->parameters().front().device();
  auto generator = at::detail::createCPUGenerator(options.seed);
  const auto& c = model->config();
  int64_t done = 0, cut = 0;
  for (;;) {
    std::vector<LabelledSequence> batch;
    while (static_cast<int64_t>(batch.size()) < options.batch_size) {
      auto item = source.next();
      if (!item) break;
      cut += cut_to_max_seq_len(&item->sequence, c.max_seq_len);
      batch.push_back(std::move(*item));
    }
    if (batch.empty()) break;
    std::vector<std::vector<TokenSequence>> rows;
    for (const auto& b : batch) rows.push_back({b.sequence});
    Layout layout(Batch::from_documents(rows), c.vocab_size, device);
    const auto result = model->forward(layout);
    std::vector<SequenceRoutes> out(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      out[i].sequence = done + static_cast<int64_t>(i);
      out[i].label = batch[i].label;
      out[i].length = static_cast<int64_t>(batch[i].sequence.tokens.size());
      out[i].prompt_len = layout.documents()[i].prompt_len;
    }
    for (const auto& depth : result.routes) {
      auto records = depth.records(&layout);
      const auto flipped = flips(*routing, depth, records, options, generator);
      for (size_t r = 0; r < records.size(); ++r) {
        auto& record = records[r];
        auto& s = out[static_cast<size_t>(record.sequence)];
        const auto& ro = batch[static_cast<size_t>(record.sequence)].sequence.router_only;
        WindowRoute w;
        w.prompt = s.prompt_len > 0 && record.window == 0;
        for (int64_t p : ro)
          w.router_only += p >= record.position && p < record.position + record.length;
        if (!flipped.empty()) w.flipped = flipped[r] != 0;
        record.sequence = s.sequence;
        w.route = std::move(record);
        s.windows.push_back(std::move(w));
      }
    }
    for (auto& s : out) sink(std::move(s));
    done += static_cast<int64_t>(batch.size());
    if (options.on_progress) options.on_progress(done);
  }
  return cut;
}

RouteReader::RouteReader(std::istream& in, std::string name) : in_(in), name_(std::move(name)) {
  std::string line;
  LOL_CHECK(std::getline(in_, line), name_, ": empty (a route file starts with its header line)");
  try {
    header_ = RouteFileHeader::from_json(json::parse(line, nullptr, false));
  } catch (const Error& e) {
    fail(name_, " line 1: ", e.what());
  }
}

std::optional<SequenceRoutes> RouteReader::next() {
  std::string line;
  while (std::getline(in_, line)) {
    ++line_;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json object = json::parse(line, nullptr, false);
    LOL_CHECK(!object.is_discarded(), name_, " line ", line_, ": not valid JSON");
    try {
      auto s = SequenceRoutes::from_json(object);
      constexpr int64_t kMaxLength = int64_t{1} << 24;  // as a model's max_seq_len
      LOL_CHECK(s.length >= 0 && s.length <= kMaxLength, "length ", s.length, " is outside 0..",
                kMaxLength);
      LOL_CHECK(s.prompt_len >= 0 && s.prompt_len <= s.length, "prompt_len ", s.prompt_len,
                " is outside 0..", s.length);
      for (const auto& w : s.windows) {
        LOL_CHECK(w.route.window >= 0 && w.route.position >= 0 && w.route.length >= -1 &&
                      w.route.position + std::max<int64_t>(w.route.length, 0) <= s.length,
                  "depth ", w.route.depth, " window ", w.route.window,
                  " does not lie within the sequence of ", s.length, " tokens");
        for (double p : w.route.probs)
          LOL_CHECK(std::isfinite(p), "a router probability is not a finite number");
        LOL_CHECK(w.route.depth >= 1 && w.route.depth <= header_.core_depth, "depth ",
                  w.route.depth, " is outside 1..", header_.core_depth);
        LOL_CHECK(static_cast<int64_t>(w.route.probs.size()) == header_.choices(), "a window has ",
                  w.route.probs.size(), " probabilities, the header's library has ",
                  header_.library_size, header_.skip ? " and the skip" : "");
        LOL_CHECK(w.route.expert >= 0 && w.route.expert < header_.choices(), "expert ",
                  w.route.expert, " is outside the library", header_.skip ? " and the skip" : "");
      }
      return s;
    } catch (const Error& e) {
      fail(name_, " line ", line_, ": ", e.what());
    }
  }
  return std::nullopt;
}

}  // namespace lol

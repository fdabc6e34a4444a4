// lol eval: held-out loss, perplexity and bits per byte of a model on a token set, per label
// when the set is a `lol corpus build` split.
#include <cmath>
#include <cstdio>
#include <map>

#include "commands.h"
#include "data/mixture.h"
#include "data/shards.h"
#include "infer/generate.h"
#include "model/checkpoint.h"
#include "model/layout.h"
#include "text/corpus.h"
#include "text/tokenizer.h"
#include "train/sources.h"
#include "util/error.h"
#include "util/files.h"
#include "util/progress.h"

namespace lol::cli {

void add_eval_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand(
      "eval", "loss, perplexity and bits per byte of a model on held-out tokens (per label)");
  struct Opts {
    std::string model, data, split = "val", json_out;
    int64_t batch = 8, max_documents = 0, depth = -1;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "model or checkpoint directory")->required();
  cmd->add_option("--data", o->data, "corpus:DIR (a `lol corpus build` output) or a shard file")
      ->required();
  cmd->add_option("--split", o->split, "split of a corpus: val or test")
      ->capture_default_str()
      ->check(CLI::IsMember({"val", "test", "train"}));
  cmd->add_option("--batch", o->batch, "documents per forward pass")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--max-documents", o->max_documents, "evaluate the first N (0 = all)")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--depth", o->depth, "executed core depth (-1 = the model's)")
      ->capture_default_str();
  cmd->add_option("--json-out", o->json_out, "also write the figures as JSON");
  commands.emplace_back(cmd, [o] {
    // Task streams have no held-out file to read: their held-out figures come from `lol train`
    // (eval_every) and from greedy traces (`lol path curve`, `lol generate | lol task score`).
    if (o->data.rfind("task:", 0) == 0) {
      const auto task = o->data.substr(5), name = task.substr(0, task.find(':'));
      fail("--data ", o->data, ": lol eval reads a corpus:DIR or a shard file; `lol data ", name,
           name == task ? "" : " --size " + task.substr(name.size() + 1),
           " --format shards --out FILE` writes a task's held-out set");
    }
    // A mixture's parts differ in what a figure means (text against a task, one corpus's labels
    // against another's), so each part is evaluated by itself.
    if (is_mixture(o->data)) {
      std::string parts;
      for (const auto& part : parse_mixture(o->data))
        parts += (parts.empty() ? "" : ", ") + part.spec;
      fail("--data ", o->data, ": lol eval reads one corpus:DIR or shard file, not a mixture; ",
           "evaluate its parts one at a time (", parts, ")");
    }
    const auto device = selected_device();
    auto model = load_model(o->model, device);
    model->eval();
    const auto& config = model->config();
    const auto tokenizer = model_tokenizer(o->model, config.vocab_size, "");
    std::string shard = o->data;
    std::vector<ChunkInfo> table;
    // The baseline a model must beat: the unigram distribution of the corpus's training tokens
    // (add-one smoothed), in nats per token.
    std::vector<double> unigram;
    if (o->data.rfind("corpus:", 0) == 0) {
      const auto dir = o->data.substr(7);
      shard = corpus_shard(dir, o->split);
      table = read_chunk_table(dir + "/" + o->split + ".docs.tsv");
      std::vector<double> counts(config.vocab_size, 1.0);
      double total = static_cast<double>(config.vocab_size);
      for (const auto& d : read_shard(corpus_shard(dir, "train")))
        for (size_t i = 1; i < d.tokens.size(); ++i)
          if (d.tokens[i] < config.vocab_size) counts[d.tokens[i]] += 1, total += 1;
      for (auto& c : counts) c = -std::log(c / total);
      unigram = std::move(counts);
    }
    int64_t vocab = 0;
    auto docs = read_shard(shard, &vocab);
    LOL_CHECK(vocab <= config.vocab_size, shard, " uses ", vocab, " token ids but the model has ",
              config.vocab_size);
    LOL_CHECK(table.empty() || table.size() == docs.size(), "the label table has ", table.size(),
              " rows but ", shard, " ", docs.size(), " documents");
    if (o->max_documents > 0 && static_cast<int64_t>(docs.size()) > o->max_documents)
      docs.resize(o->max_documents);
    const int64_t max_len = config.max_seq_len;

    struct Sum {
      double nats = 0, unigram_nats = 0;
      int64_t tokens = 0, bytes = 0;
    };
    std::map<std::string, Sum> by_label;
    Sum all;
    torch::NoGradGuard no_grad;
    ForwardOptions options;
    options.executed_depth = o->depth;
    Progress progress("eval", static_cast<int64_t>(docs.size()));
    for (size_t first = 0; first < docs.size(); first += o->batch) {
      const size_t end = std::min(docs.size(), first + static_cast<size_t>(o->batch));
      std::vector<std::vector<TokenSequence>> rows;
      for (size_t d = first; d < end; ++d) {
        const auto length = static_cast<int64_t>(docs[d].tokens.size());
        LOL_CHECK(length <= max_len, shard, " document ", d, " has ", length,
                  " tokens, more than the model's max_seq_len ", max_len);
        // A task document's prompt window and router-only tokens route as in training.
        rows.push_back({prompt_from_document(docs[d], length)});
      }
      const Layout layout(Batch::from_documents(rows), config.vocab_size, device);
      // Position i of a document predicts its token i + 1 when the loss mask (as training's:
      // a task's targets after its prompt window) says so; the last position predicts nothing.
      std::vector<int64_t> targets(layout.num_tokens(), -100);
      for (size_t d = first; d < end; ++d) {
        const auto& flat = layout.documents()[d - first];
        const auto& mask = docs[d].loss_mask;
        for (int64_t i = 0; i + 1 < flat.length; ++i)
          if (mask.empty() || mask[i + 1]) targets[flat.start + i] = docs[d].tokens[i + 1];
      }
      const auto logits = model->forward(layout, options).logits.to(torch::kFloat32);
      const auto nll =
          torch::nn::functional::cross_entropy(
              logits, torch::tensor(targets, torch::kInt64).to(device),
              torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(
                  torch::kNone))
              .to(torch::kFloat64)
              .cpu();
      const auto n = nll.accessor<double, 1>();
      for (size_t d = first; d < end; ++d) {
        const auto& flat = layout.documents()[d - first];
        Sum s;
        for (int64_t i = 0; i + 1 < flat.length; ++i) {
          const auto next = targets[flat.start + i];
          if (next < 0) continue;
          s.nats += n[flat.start + i];
          if (!unigram.empty()) s.unigram_nats += unigram[next];
          ++s.tokens;
          if (tokenizer->eos() != next) s.bytes += tokenizer->piece(next, false).size();
        }
        auto& l = by_label[table.empty() ? std::string("all") : table[d].label];
        for (Sum* to : {&l, &all}) {
          to->nats += s.nats, to->unigram_nats += s.unigram_nats;
          to->tokens += s.tokens, to->bytes += s.bytes;
        }
      }
      progress.update(end, "");
    }
    progress.finish("");
    LOL_CHECK(all.tokens > 0, shard, " has no token to predict");
    auto figures = [&](const Sum& s) {
      const double tokens = static_cast<double>(std::max<int64_t>(1, s.tokens));
      const double loss = s.nats / tokens;
      json f = {{"loss", loss},
                {"perplexity", std::exp(loss)},
                {"bits_per_byte", s.bytes ? s.nats / std::log(2.0) / s.bytes : 0.0},
                {"tokens", s.tokens},
                {"bytes", s.bytes}};
      if (!unigram.empty()) f["unigram_loss"] = s.unigram_nats / tokens;
      return f;
    };
    std::printf("%-8s %10s %10s %10s %10s %10s\n", "label", "tokens", "loss", "ppl", "bits/byte",
                unigram.empty() ? "" : "unigram");
    json out = {{"model", o->model},
                {"data", o->data},
                {"split", o->split},
                {"tokenizer", tokenizer->name()},
                {"labels", json::object()}};
    auto row = [](const std::string& label, const json& f) {
      std::printf("%-8s %10lld %10.4f %10.2f %10.4f", label.c_str(),
                  static_cast<long long>(f["tokens"].get<int64_t>()), f["loss"].get<double>(),
                  f["perplexity"].get<double>(), f["bits_per_byte"].get<double>());
      if (f.contains("unigram_loss")) std::printf(" %10.4f", f["unigram_loss"].get<double>());
      std::printf("\n");
    };
    for (const auto& [label, s] : by_label) {
      out["labels"][label] = figures(s);
      if (by_label.size() > 1) row(label, out["labels"][label]);
    }
    out["all"] = figures(all);
    row("all", out["all"]);
    if (!o->json_out.empty()) write_file_atomic(o->json_out, out.dump(2) + "\n");
  });
}

}  // namespace lol::cli

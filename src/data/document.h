#pragma once
// Training documents and where they come from. A source is deterministic and seekable: its
// position is a small JSON value that a checkpoint stores, so a resumed run reads exactly the
// documents the uninterrupted run would have read.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lol {

using nlohmann::json;

struct Document {
  std::vector<int64_t> tokens;
  int64_t prompt_len = 0;            // P (SPEC 1.3); 0 for plain text
  std::vector<uint8_t> router_only;  // per token, empty = none (SPEC 1.5)
  std::vector<uint8_t> loss_mask;    // per token: predict this token? empty = all but the first
};

class DocumentSource {
 public:
  virtual ~DocumentSource() = default;
  virtual Document next() = 0;
  virtual json position() const = 0;  // where next() reads from
  virtual void seek(const json& position) = 0;
  virtual int64_t vocab_size() const = 0;  // ids are below this
  virtual std::string describe() const = 0;
};

// "task:copy" (built-in synthetic task) or a shard file path (docs/formats.md). `split`
// selects the training (0) or held-out (1) stream of a task; for shards, held-out data is a
// separate file.
std::unique_ptr<DocumentSource> open_source(const std::string& spec, uint64_t seed, int split);

// The built-in strategy task: "Q : x1 .. xk [ S ] A : y1 .. yk <eos>" with S one of copy,
// reverse, sort and y the digits transformed by S. The descriptor "[ S ]" is router-only and
// ends the prompt window; the loss covers everything after it. It has the shape of the
// paper's tasks (prompt window, router-only strategy, loss mask) and needs no files.
class StrategyTask : public DocumentSource {
 public:
  StrategyTask(uint64_t seed, int split);
  Document next() override;
  json position() const override { return json{{"index", index_}}; }
  void seek(const json& position) override;
  int64_t vocab_size() const override { return 20; }
  std::string describe() const override { return "task:copy (built-in copy/reverse/sort)"; }
  static Document make(uint64_t seed, int split, int64_t index);
  static std::string detokenize(const std::vector<int64_t>& tokens);

 private:
  uint64_t seed_;
  int split_;
  int64_t index_ = 0;
};

}  // namespace lol

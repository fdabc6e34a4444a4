#pragma once
// The built-in strategy task, "task:copy": "Q : x1 .. xk [ S ] A : y1 .. yk <eos>" with S one
// of copy, reverse, sort and y the digits transformed by S. The descriptor "[ S ]" is
// router-only and ends the prompt window; the loss covers everything after it. It has the
// shape of the paper's tasks (prompt window, router-only strategy, loss mask) in a 20-token
// vocabulary and needs no files.
#include <string>
#include <vector>

#include "data/document.h"

namespace lol {

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

#include "tasks/copy_task.h"

#include <algorithm>
#include <random>

#include "util/error.h"

namespace lol {

namespace {
// Token ids of the built-in strategy task.
enum : int64_t {
  kEos = 0,
  kQ = 1,
  kColon = 2,
  kOpen = 3,
  kClose = 4,
  kA = 5,
  kCopy = 6,
  kReverse = 7,
  kSort = 8,
  kDigit0 = 10
};
const char* kWords[] = {"<eos>", "Q", ":", "[", "]", "A", "copy", "reverse", "sort", "?",
                        "0",     "1", "2", "3", "4", "5", "6",    "7",       "8",    "9"};
}  // namespace

StrategyTask::StrategyTask(uint64_t seed, int split) : seed_(seed), split_(split) {}

void StrategyTask::seek(const json& position) {
  index_ = position_field(position, "index");
}

Document StrategyTask::make(uint64_t seed, int split, int64_t index) {
  // One generator per document: any document can be made without the ones before it.
  std::seed_seq seq{seed, static_cast<uint64_t>(split), static_cast<uint64_t>(index)};
  std::mt19937_64 rng(seq);
  const int64_t length = 4 + static_cast<int64_t>(rng() % 9);
  const int64_t strategy = static_cast<int64_t>(rng() % 3);
  std::vector<int64_t> digits(length);
  for (auto& d : digits) d = static_cast<int64_t>(rng() % 10);
  std::vector<int64_t> answer = digits;
  if (strategy == 1) std::reverse(answer.begin(), answer.end());
  if (strategy == 2) std::sort(answer.begin(), answer.end());
  Document doc;
  doc.tokens = {kQ, kColon};
  for (auto d : digits) doc.tokens.push_back(kDigit0 + d);
  const int64_t descriptor = static_cast<int64_t>(doc.tokens.size());
  doc.tokens.insert(doc.tokens.end(), {kOpen, kCopy + strategy, kClose});
  doc.prompt_len = static_cast<int64_t>(doc.tokens.size());
  doc.tokens.insert(doc.tokens.end(), {kA, kColon});
  for (auto d : answer) doc.tokens.push_back(kDigit0 + d);
  doc.tokens.push_back(kEos);
  doc.router_only.assign(doc.tokens.size(), 0);
  for (int64_t i = descriptor; i < descriptor + 3; ++i) doc.router_only[i] = 1;
  doc.loss_mask.assign(doc.tokens.size(), 0);
  for (size_t i = doc.prompt_len; i < doc.tokens.size(); ++i) doc.loss_mask[i] = 1;
  return doc;
}

Document StrategyTask::next() {
  return make(seed_, split_, index_++);
}

std::string StrategyTask::detokenize(const std::vector<int64_t>& tokens) {
  std::string out;
  for (auto t : tokens) {
    if (!out.empty()) out += ' ';
    out += t >= 0 && t < 20 ? kWords[t] : "<" + std::to_string(t) + ">";
  }
  return out;
}

}  // namespace lol

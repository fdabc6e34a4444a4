#pragma once
// Weighted mixtures of document sources: `mix:W*SPEC,W*SPEC,...` as a data spec (maze sizes
// together, several corpora, a task beside text). Documents are dealt by weight, deterministically
// and as evenly as the weights allow (each next document goes to the part furthest behind its
// share, ties to the first: with weights 3 and 1, three of every four documents come from the
// first part), so any window of the stream holds the mixture, not only the whole run. Each part
// keeps its own position; the mixture's position is theirs and the counts dealt, so a resumed run
// continues exactly.
#include <memory>
#include <string>
#include <vector>

#include "data/document.h"

namespace lol {

inline constexpr const char* kMixturePrefix = "mix:";

struct MixturePart {
  double weight = 1;  // > 0; the parts' shares are their weights over the sum
  std::string spec;   // a data spec that is not itself a mixture
};

// Whether `spec` is a mixture (starts with "mix:").
bool is_mixture(const std::string& spec);
// "mix:3*task:maze:5,task:maze:4" -> {3, task:maze:5}, {1, task:maze:4}. A part is
// [WEIGHT*]SPEC, WEIGHT a positive number (1 when left out). Throws, naming the spec, for an
// empty part, a bad weight, a nested mixture or a part given twice.
std::vector<MixturePart> parse_mixture(const std::string& spec);

class MixtureSource : public DocumentSource {
 public:
  MixtureSource(std::vector<double> weights, std::vector<std::unique_ptr<DocumentSource>> parts);
  Document next() override;
  // {"taken": [documents dealt per part], "parts": [each part's position]}
  json position() const override;
  void seek(const json& position) override;
  int64_t vocab_size() const override;  // the largest of the parts'
  std::string describe() const override;
  // The part the next document comes from.
  size_t next_part() const;

 private:
  std::vector<double> shares_;  // weights over their sum
  std::vector<std::unique_ptr<DocumentSource>> parts_;
  std::vector<int64_t> taken_;
};

}  // namespace lol

#pragma once
// Weighted mixtures of document sources: `mix:W*SPEC,W*SPEC,...` as a data spec (maze sizes
// together, several corpora, a task beside text). Documents are dealt by weight, deterministically
// and as evenly as the weights allow (each next document goes to the part furthest behind its
// share, ties to the first: with weights 3 and 1, three of every four documents come from the
// first part), so any window of the stream holds the mixture, not only the whole run. A weight
// may change along the run (a curriculum): `W0..W1@T1..W2@T2` goes linearly from W0 to W1 over
// the first T1 tokens dealt, then to W2 at T2, and stays at the last. Each part keeps its own
// position; the mixture's position is theirs and the counts dealt, so a resumed run continues
// exactly.
#include <memory>
#include <string>
#include <vector>

#include "data/document.h"

namespace lol {

inline constexpr const char* kMixturePrefix = "mix:";

// A part's weight along the run, against the tokens the mixture has dealt (the documents'
// tokens, before packing): points (tokens, weight), linear between them, the last weight after.
class WeightSchedule {
 public:
  explicit WeightSchedule(double constant = 1);
  // "W" or "W0..W1@T1..W2@T2...": weights finite and >= 0 (> 0 for a constant), not all zero;
  // T a count of tokens, with an optional k, M or G suffix, > 0 and non-decreasing (two points
  // at one T make a step). Throws, naming the text, otherwise.
  static WeightSchedule parse(const std::string& text);
  double at(double tokens) const;
  double last() const { return points_.back().second; }
  bool constant() const { return points_.size() == 1; }
  const std::vector<std::pair<double, double>>& points() const { return points_; }

 private:
  std::vector<std::pair<double, double>> points_;  // the first at 0 tokens
};

struct MixturePart {
  WeightSchedule weight;  // the parts' shares are their weights over the sum
  std::string spec;       // a data spec that is not itself a mixture
};

// Whether `spec` is a mixture (starts with "mix:").
bool is_mixture(const std::string& spec);
// "mix:3*task:maze:5,task:maze:4" -> {3, task:maze:5}, {1, task:maze:4}. A part is
// [WEIGHT*]SPEC, WEIGHT a positive number or a schedule (1 when left out). Throws, naming the
// spec, for an empty part, a bad weight, a nested mixture, a part given twice, or weights that
// are all zero at some point of the run.
std::vector<MixturePart> parse_mixture(const std::string& spec);

// Each part's share at `tokens`: its weight over the sum of the weights there.
std::vector<double> mixture_shares(const std::vector<WeightSchedule>& weights, double tokens);

class MixtureSource : public DocumentSource {
 public:
  MixtureSource(std::vector<WeightSchedule> weights,
                std::vector<std::unique_ptr<DocumentSource>> parts);
  Document next() override;
  // {"taken": [documents dealt per part], "tokens": tokens dealt, "parts": [each part's
  // position]}, and with a schedule "owed": [each part's share summed over the documents dealt]
  json position() const override;
  void seek(const json& position) override;
  int64_t vocab_size() const override;  // the largest of the parts'
  std::string describe() const override;
  // The part the next document comes from.
  size_t next_part() const;
  // Each part's share of the next document (its weight over the sum, at the tokens dealt).
  std::vector<double> shares() const;

 private:
  size_t next_part(const std::vector<double>& share) const;  // given shares()

  std::vector<WeightSchedule> weights_;
  bool scheduled_ = false;  // a weight changes along the run
  std::vector<std::unique_ptr<DocumentSource>> parts_;
  std::vector<int64_t> taken_;
  int64_t tokens_ = 0;
  // With a schedule, what each part is owed: its share summed over the documents dealt (with
  // constant weights it is share x documents, computed as such).
  std::vector<double> owed_;
};

}  // namespace lol

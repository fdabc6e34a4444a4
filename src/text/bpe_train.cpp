#include "text/bpe_train.h"

#include <algorithm>
#include <deque>
#include <queue>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "text/utf8.h"
#include "util/error.h"

namespace lol {

std::unique_ptr<SubwordTokenizer> train_bpe(const std::vector<std::string>& documents,
                                            const BpeTrainOptions& options,
                                            const std::function<void(int64_t, int64_t)>& progress) {
  const auto specials = static_cast<int64_t>(options.special_tokens.size());
  LOL_CHECK(options.vocab_size >= 256 + specials,
            "a byte-level BPE needs a vocabulary of at least ", 256 + specials, " (256 bytes and ",
            specials, " special tokens), got ", options.vocab_size);
  LOL_CHECK(options.min_frequency >= 1, "min_frequency must be >= 1");
  const RegexSplitter splitter(options.pattern);

  // Distinct pre-tokens and how often each occurs.
  std::unordered_map<std::string_view, int64_t> counts;
  std::vector<std::string_view> pieces;
  std::deque<std::string> normalized;  // owns the normalized text the counts' keys point into
  for (const auto& d : documents) {
    LOL_CHECK(valid_utf8(d), "a training document is not valid UTF-8");
    // Special tokens in the documents are not learnt from: count the text between them.
    for (size_t plain = 0;;) {
      size_t hit = std::string::npos, cut = 0;
      for (const auto& s : options.special_tokens) {
        const auto at = d.find(s, plain);
        if (at < hit || (at == hit && s.size() > cut)) hit = at, cut = s.size();
      }
      pieces.clear();
      const size_t end = hit == std::string::npos ? d.size() : hit;
      auto text = std::string_view(d).substr(plain, end - plain);
      if (!options.normalizer.identity())
        text = normalized.emplace_back(options.normalizer.apply(text));
      splitter.split(text, &pieces);
      for (auto p : pieces) ++counts[p];
      if (hit == std::string::npos) break;
      plain = hit + cut;
    }
  }
  struct Word {
    std::vector<int32_t> sym;
    int64_t count;
  };
  std::vector<Word> words;
  words.reserve(counts.size());
  {
    std::vector<std::pair<std::string_view, int64_t>> sorted(counts.begin(), counts.end());
    std::sort(sorted.begin(), sorted.end());  // a fixed order, independent of hashing
    for (const auto& [p, c] : sorted) {
      Word w{{}, c};
      for (unsigned char b : p) w.sym.push_back(b);
      words.push_back(std::move(w));
    }
  }

  SubwordTokenizer::Model m;
  m.normalizer = options.normalizer;
  for (int b = 0; b < 256; ++b) m.tokens.emplace_back(1, static_cast<char>(b));
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;
  for (size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w].sym;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const auto k = pair_key(s[i], s[i + 1]);
      pair_count[k] += words[w].count;
      auto& list = where[k];
      if (list.empty() || list.back() != static_cast<int32_t>(w)) list.push_back(w);
    }
  }
  // Max-heap of (count, pair) with lazy updates: counts of existing pairs only fall, so an
  // entry whose count is stale is re-pushed with the current one.
  using Entry = std::pair<int64_t, uint64_t>;
  auto lower = [](const Entry& x, const Entry& y) {
    return x.first != y.first ? x.first < y.first : x.second > y.second;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(lower)> heap(lower);
  for (const auto& [k, c] : pair_count) heap.emplace(c, k);

  const int64_t target_merges = options.vocab_size - 256 - specials;
  std::vector<int32_t> visited(words.size(), -1);
  while (static_cast<int64_t>(m.merges.size()) < target_merges && !heap.empty()) {
    const auto [c, k] = heap.top();
    heap.pop();
    const auto current = pair_count.find(k);
    const int64_t now = current == pair_count.end() ? 0 : current->second;
    if (now != c) {
      if (now > 0) heap.emplace(now, k);
      continue;
    }
    if (c < options.min_frequency) break;
    const auto a = static_cast<int32_t>(k >> 32), b = static_cast<int32_t>(k & 0xFFFFFFFFu);
    const auto merged = static_cast<int32_t>(m.tokens.size());
    m.tokens.push_back(m.tokens[a] + m.tokens[b]);
    m.merges.emplace_back(a, b);
    std::unordered_map<uint64_t, int64_t> delta;
    const auto list = std::move(where[k]);
    where.erase(k);
    const auto rank = static_cast<int32_t>(m.merges.size());
    for (const int32_t w : list) {
      if (visited[w] == rank) continue;
      visited[w] = rank;
      auto& s = words[w].sym;
      const int64_t n = words[w].count;
      bool found = false;
      std::vector<int32_t> out;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          out.push_back(merged);
          ++i;
          found = true;
        } else {
          out.push_back(s[i]);
        }
      }
      if (!found) continue;
      for (size_t i = 0; i + 1 < s.size(); ++i) delta[pair_key(s[i], s[i + 1])] -= n;
      for (size_t i = 0; i + 1 < out.size(); ++i) {
        const auto nk = pair_key(out[i], out[i + 1]);
        delta[nk] += n;
        if (out[i] == merged || out[i + 1] == merged) {
          auto& wl = where[nk];
          if (wl.empty() || wl.back() != w) wl.push_back(w);
        }
      }
      s.swap(out);
    }
    std::vector<std::pair<uint64_t, int64_t>> changes(delta.begin(), delta.end());
    std::sort(changes.begin(), changes.end());
    for (const auto& [dk, dc] : changes) {
      if (dc == 0) continue;
      auto& pc = pair_count[dk];
      pc += dc;
      if (dc > 0) heap.emplace(pc, dk);  // a new pair (it holds the merged token)
      if (pc <= 0) pair_count.erase(dk);
    }
    if (progress && m.merges.size() % 256 == 0) progress(m.merges.size(), target_merges);
  }
  for (const auto& s : options.special_tokens) {
    m.added.push_back({static_cast<int64_t>(m.tokens.size()), s, true});
    m.tokens.emplace_back();
  }
  add_pre_tokenizer({{"type", "Split"},
                     {"pattern", {{"Regex", options.pattern}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    "pattern", &m);
  add_pre_tokenizer({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}},
                    "ByteLevel", &m);
  if (progress) progress(m.merges.size(), target_merges);
  return std::make_unique<SubwordTokenizer>(std::move(m), "bpe");
}

}  // namespace lol

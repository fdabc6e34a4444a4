#include "data/shards.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "util/error.h"
#include "util/files.h"

namespace lol {
namespace {

constexpr uint32_t kHasRouterOnly = 1, kHasLossMask = 2;
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8 + 8 + 4 + 4;

template <typename T>
void put(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    out.push_back(static_cast<char>((static_cast<uint64_t>(value) >> (8 * i)) & 0xff));
}

template <typename T>
T get(const std::string& in, size_t offset) {
  uint64_t value = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    value |= static_cast<uint64_t>(static_cast<unsigned char>(in[offset + i])) << (8 * i);
  return static_cast<T>(value);
}

}  // namespace

void write_shard(const std::string& path, const std::vector<Document>& documents,
                 int64_t vocab_size) {
  LOL_CHECK(vocab_size > 0, "shard vocab size must be > 0");
  const uint32_t width = vocab_size <= 65536 ? 2 : 4;
  uint64_t tokens = 0;
  uint32_t flags = 0;
  for (const auto& d : documents) {
    tokens += d.tokens.size();
    if (!d.router_only.empty()) flags |= kHasRouterOnly;
    if (!d.loss_mask.empty()) flags |= kHasLossMask;
  }
  std::string out(kShardMagic, 8);
  put<uint32_t>(out, kShardVersion);
  put<uint32_t>(out, width);
  put<uint64_t>(out, static_cast<uint64_t>(vocab_size));
  put<uint64_t>(out, documents.size());
  put<uint64_t>(out, tokens);
  put<uint32_t>(out, flags);
  put<uint32_t>(out, 0);
  uint64_t start = 0;
  for (const auto& d : documents) {
    put<uint64_t>(out, start);
    put<uint64_t>(out, d.tokens.size());
    put<uint64_t>(out, static_cast<uint64_t>(d.prompt_len));
    start += d.tokens.size();
  }
  for (const auto& d : documents)
    for (int64_t t : d.tokens) {
      LOL_CHECK(t >= 0 && t < vocab_size, "shard: token id ", t, " outside [0, ", vocab_size, ")");
      width == 2 ? put<uint16_t>(out, static_cast<uint16_t>(t))
                 : put<uint32_t>(out, static_cast<uint32_t>(t));
    }
  auto put_mask = [&](bool router_only) {
    for (const auto& d : documents) {
      const auto& mask = router_only ? d.router_only : d.loss_mask;
      for (size_t i = 0; i < d.tokens.size(); ++i) {
        uint8_t v = mask.empty() ? (router_only ? 0 : (i > 0)) : mask[i];
        out.push_back(static_cast<char>(v ? 1 : 0));
      }
    }
  };
  if (flags & kHasRouterOnly) put_mask(true);
  if (flags & kHasLossMask) put_mask(false);
  write_file_atomic(path, out);
}

std::vector<Document> read_shard(const std::string& path, int64_t* vocab_size_out) {
  return parse_shard(read_text_file(path), path, vocab_size_out);
}

std::vector<Document> parse_shard(const std::string& in, const std::string& path,
                                  int64_t* vocab_size_out) {
  LOL_CHECK(in.size() >= kHeaderBytes, path, ": truncated shard (", in.size(),
            " bytes, header needs ", kHeaderBytes, ")");
  LOL_CHECK(std::memcmp(in.data(), kShardMagic, 8) == 0, path,
            ": not a lol token shard (bad magic)");
  const auto version = get<uint32_t>(in, 8);
  LOL_CHECK(version == kShardVersion, path, ": shard version ", version,
            " is not supported (expected ", kShardVersion, ")");
  const auto width = get<uint32_t>(in, 12);
  LOL_CHECK(width == 2 || width == 4, path, ": token width ", width, " must be 2 or 4 bytes");
  const auto vocab = get<uint64_t>(in, 16);
  const auto docs = get<uint64_t>(in, 24);
  const auto tokens = get<uint64_t>(in, 32);
  const auto flags = get<uint32_t>(in, 40);
  LOL_CHECK(vocab > 0 && vocab <= (1ull << 32), path, ": vocab size ", vocab, " is invalid");
  LOL_CHECK(docs <= in.size() / 24 && tokens <= in.size(), path, ": header counts (", docs,
            " documents, ", tokens, " tokens) exceed the file");
  const uint64_t masks = ((flags & kHasRouterOnly) ? 1 : 0) + ((flags & kHasLossMask) ? 1 : 0);
  const uint64_t expected = kHeaderBytes + docs * 24 + tokens * width + masks * tokens;
  LOL_CHECK(in.size() == expected, path, ": size ", in.size(),
            " bytes does not match the header (expected ", expected, ")");
  std::vector<Document> out(docs);
  const size_t token_base = kHeaderBytes + docs * 24;
  const size_t ro_base = token_base + tokens * width;
  const size_t loss_base = ro_base + ((flags & kHasRouterOnly) ? tokens : 0);
  uint64_t expected_start = 0;
  for (uint64_t d = 0; d < docs; ++d) {
    const size_t row = kHeaderBytes + d * 24;
    const auto start = get<uint64_t>(in, row), length = get<uint64_t>(in, row + 8),
               prompt = get<uint64_t>(in, row + 16);
    LOL_CHECK(start == expected_start && length <= tokens - start, path, ": document ", d,
              " has start ", start, " and length ", length,
              " (expected contiguous documents within ", tokens, " tokens)");
    LOL_CHECK(prompt <= length, path, ": document ", d, " prompt length ", prompt,
              " exceeds its length ", length);
    expected_start = start + length;
    auto& doc = out[d];
    doc.prompt_len = static_cast<int64_t>(prompt);
    doc.tokens.resize(length);
    for (uint64_t i = 0; i < length; ++i) {
      const uint64_t id = width == 2 ? get<uint16_t>(in, token_base + (start + i) * 2)
                                     : get<uint32_t>(in, token_base + (start + i) * 4);
      LOL_CHECK(id < vocab, path, ": document ", d, " token ", i, " has id ", id,
                " outside the vocabulary of ", vocab);
      doc.tokens[i] = static_cast<int64_t>(id);
    }
    if (flags & kHasRouterOnly)
      doc.router_only.assign(in.begin() + ro_base + start, in.begin() + ro_base + start + length);
    if (flags & kHasLossMask)
      doc.loss_mask.assign(in.begin() + loss_base + start, in.begin() + loss_base + start + length);
  }
  LOL_CHECK(expected_start == tokens, path, ": documents cover ", expected_start, " of ", tokens,
            " tokens");
  if (vocab_size_out) *vocab_size_out = static_cast<int64_t>(vocab);
  return out;
}

ShardSource::ShardSource(const std::string& path, uint64_t seed) : path_(path), seed_(seed) {
  documents_ = read_shard(path, &vocab_size_);
  LOL_CHECK(!documents_.empty(), path, ": shard holds no documents");
  shuffle();
}

void ShardSource::shuffle() {
  order_.resize(documents_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int64_t>(i);
  std::mt19937_64 rng(seed_ * 1000003ull + static_cast<uint64_t>(epoch_));
  // Fisher-Yates with our own index draws: the same order with every standard library.
  for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng() % i]);
}

Document ShardSource::next() {
  if (index_ >= static_cast<int64_t>(order_.size())) {
    ++epoch_;
    index_ = 0;
    shuffle();
  }
  return documents_[order_[index_++]];
}

void ShardSource::seek(const json& position) {
  epoch_ = position_field(position, "epoch");
  index_ = position_field(position, "index");
  LOL_CHECK(index_ <= static_cast<int64_t>(documents_.size()), "data position index ", index_,
            " is beyond the ", documents_.size(), " documents of ", path_);
  shuffle();
}

}  // namespace lol

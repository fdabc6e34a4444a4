#pragma once
// Token shards: the on-disk training format (docs/formats.md), shared by `lol data` and
// `lol train`. Little-endian; a fixed header, a document table, the token ids, then the
// optional per-token masks.
#include <string>
#include <vector>

#include "data/document.h"

namespace lol {

constexpr char kShardMagic[8] = {'L', 'O', 'L', 'S', 'H', 'R', 'D', '1'};
constexpr uint32_t kShardVersion = 1;

void write_shard(const std::string& path, const std::vector<Document>& documents,
                 int64_t vocab_size);
// Validates everything (magic, version, sizes, offsets, ids < vocab) and names the problem.
std::vector<Document> read_shard(const std::string& path, int64_t* vocab_size = nullptr);
// The same from the file's bytes; `name` is used in messages (the fuzz target feeds bytes).
std::vector<Document> parse_shard(const std::string& bytes, const std::string& name,
                                  int64_t* vocab_size = nullptr);

// Documents of one shard, visited in a fresh seeded shuffle every epoch.
class ShardSource : public DocumentSource {
 public:
  ShardSource(const std::string& path, uint64_t seed);
  Document next() override;
  json position() const override { return json{{"epoch", epoch_}, {"index", index_}}; }
  void seek(const json& position) override;
  int64_t vocab_size() const override { return vocab_size_; }
  std::string describe() const override { return path_; }

 private:
  void shuffle();
  std::string path_;
  uint64_t seed_;
  int64_t vocab_size_ = 0;
  std::vector<Document> documents_;
  std::vector<int64_t> order_;
  int64_t epoch_ = 0, index_ = 0;
};

}  // namespace lol

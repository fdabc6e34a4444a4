// lol bench --suite tokenizer: byte-level BPE encode and decode throughput on one thread, per
// label of a text tree (docs/text.md), with the bytes per token each label gets.
#include <iostream>
#include <map>

#include "bench_util.h"
#include "suites.h"
#include "text/corpus.h"
#include "text/subword.h"
#include "util/version.h"

namespace lol::bench {

void bench_tokenizer(const TokenizerBenchOptions& o) {
  const auto tok = SubwordTokenizer::load(o.tokenizer);
  CorpusSummary ignored;
  std::map<std::string, std::vector<std::string>> by_label;
  std::map<std::string, int64_t> bytes;
  for (auto& d : read_text_documents(o.input, false, &ignored)) {
    if (bytes[d.label] >= o.bytes_per_label) continue;
    bytes[d.label] += d.text.size();
    by_label[d.label].push_back(std::move(d.text));
  }
  struct Row {
    std::string label;
    int64_t bytes = 0, tokens = 0;
    Spread encode, decode;  // MB/s
  };
  std::vector<Row> rows;
  Row total;
  total.label = "all";
  for (const auto& [label, docs] : by_label) {
    Row r;
    r.label = label;
    std::vector<double> enc, dec;
    for (int rep = 0; rep < o.reps; ++rep) {
      std::vector<std::vector<int64_t>> ids;
      auto t0 = Clock::now();
      for (const auto& d : docs) ids.push_back(tok->encode(d));
      const double te = seconds_since(t0);
      t0 = Clock::now();
      int64_t decoded = 0;
      for (const auto& i : ids) decoded += static_cast<int64_t>(tok->decode(i).size());
      const double td = seconds_since(t0);
      r.bytes = decoded;
      r.tokens = 0;
      for (const auto& i : ids) r.tokens += static_cast<int64_t>(i.size());
      enc.push_back(decoded / te / 1e6);
      dec.push_back(decoded / td / 1e6);
    }
    r.encode = spread(enc), r.decode = spread(dec);
    total.bytes += r.bytes, total.tokens += r.tokens;
    rows.push_back(r);
  }
  // The whole set's rate: total bytes over the summed mean times.
  double te = 0, td = 0;
  for (const auto& r : rows)
    te += r.bytes / (r.encode.mean * 1e6), td += r.bytes / (r.decode.mean * 1e6);
  total.encode = {total.bytes / te / 1e6, 0};
  total.decode = {total.bytes / td / 1e6, 0};
  rows.push_back(total);
  if (o.output == "json") {
    json j = machine_fields(torch::kCPU);
    j.update({{"suite", "tokenizer"},
              {"tokenizer", o.tokenizer},
              {"threads", 1},
              {"rows", json::array()}});
    for (const auto& r : rows)
      j["rows"].push_back({{"label", r.label},
                           {"bytes", r.bytes},
                           {"tokens", r.tokens},
                           {"encode_mb_s", r.encode.mean},
                           {"decode_mb_s", r.decode.mean}});
    std::cout << j.dump(2) << "\n";
    return;
  }
  const bool md = o.output == "md";
  if (md)
    std::cout << machine_lines(torch::kCPU) << "\ntokenizer " << o.tokenizer << " ("
              << tok->vocab_size() << " tokens), one thread, " << o.reps << " reps\n\n";
  Table table(md);
  table.header({"label", "bytes", "tokens", "bytes/token", "encode MB/s", "±", "decode MB/s"}, 1);
  for (const auto& r : rows)
    table.row({r.label, std::to_string(r.bytes), std::to_string(r.tokens),
               fixed(static_cast<double>(r.bytes) / std::max<int64_t>(1, r.tokens), 2),
               fixed(r.encode.mean, 1), fixed(r.encode.stddev, 1), fixed(r.decode.mean, 0)});
}

}  // namespace lol::bench

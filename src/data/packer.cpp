#include "data/packer.h"

#include "util/error.h"

namespace lol {

Packer::Packer(DocumentSource& source, int64_t rows, int64_t seq_len)
    : source_(source), rows_(rows), seq_len_(seq_len) {
  LOL_CHECK(rows > 0 && seq_len > 1, "batch needs rows > 0 and seq_len > 1");
}

json Packer::position() const {
  return pending_ ? pending_position_ : source_.position();
}

void Packer::seek(const json& position) {
  source_.seek(position);
  pending_.reset();
}

Document Packer::take() {
  if (pending_) {
    Document d = std::move(*pending_);
    pending_.reset();
    return d;
  }
  for (;;) {
    Document d = source_.next();
    if (d.tokens.size() >= 2) return d;  // nothing to predict in shorter ones
  }
}

TrainBatch Packer::next() {
  TrainBatch out;
  out.batch.tokens = torch::zeros({rows_, seq_len_}, torch::kInt64);
  out.batch.router_only = torch::zeros({rows_, seq_len_}, torch::kBool);
  out.batch.documents.resize(rows_);
  auto tokens = out.batch.tokens.accessor<int64_t, 2>();
  auto router_only = out.batch.router_only.accessor<bool, 2>();
  std::vector<int64_t> targets;
  for (int64_t r = 0; r < rows_; ++r) {
    int64_t col = 0;
    while (col < seq_len_) {
      json before = source_.position();
      const bool was_pending = pending_.has_value();
      json pending_at = pending_position_;
      Document doc = take();
      if (static_cast<int64_t>(doc.tokens.size()) > seq_len_) {
        ++truncated_;
        doc.tokens.resize(seq_len_);
        if (!doc.router_only.empty()) doc.router_only.resize(seq_len_);
        if (!doc.loss_mask.empty()) doc.loss_mask.resize(seq_len_);
      }
      const int64_t n = static_cast<int64_t>(doc.tokens.size());
      if (col + n > seq_len_) {  // starts the next row
        pending_ = std::move(doc);
        pending_position_ = was_pending ? pending_at : before;
        break;
      }
      for (int64_t i = 0; i < n; ++i) {
        tokens[r][col + i] = doc.tokens[i];
        router_only[r][col + i] = !doc.router_only.empty() && doc.router_only[i];
        const bool predict = i + 1 < n && (doc.loss_mask.empty() || doc.loss_mask[i + 1]);
        targets.push_back(predict ? doc.tokens[i + 1] : -100);
        out.loss_tokens += predict;
      }
      out.batch.documents[r].push_back(DocumentSpan{col, n, std::min(doc.prompt_len, n)});
      out.tokens += n;
      col += n;
    }
  }
  out.targets = torch::tensor(targets, torch::kInt64);
  return out;
}

}  // namespace lol

#pragma once
// Packs documents from a source into fixed-size rows for training: whole documents are placed
// one after another (document-blocked attention keeps them apart); a document that does not
// fit in the rest of a row starts the next row, so none is split or lost. Longer-than-row
// documents are cut to the row length.
#include <torch/torch.h>

#include <optional>

#include "data/document.h"
#include "model/layout.h"

namespace lol {

struct TrainBatch {
  Batch batch;
  torch::Tensor targets;  // (N) next-token ids in the layout's flat order, -100 = no loss
  int64_t loss_tokens = 0;
  int64_t tokens = 0;  // real (non-padding) tokens
};

class Packer {
 public:
  Packer(DocumentSource& source, int64_t rows, int64_t seq_len);
  TrainBatch next();
  json position() const;  // the source position of the first document not yet packed
  void seek(const json& position);
  int64_t truncated() const { return truncated_; }

 private:
  Document take();
  DocumentSource& source_;
  int64_t rows_, seq_len_;
  std::optional<Document> pending_;
  json pending_position_;
  int64_t truncated_ = 0;
};

}  // namespace lol

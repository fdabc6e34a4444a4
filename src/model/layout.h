#pragma once
// The shape of one forward pass: which tokens exist, which documents they form, and how each
// routed depth cuts the documents into windows (SPEC 1.2, 1.3). The model never sees padding:
// the real tokens of a batch are laid out flat, document after document, and every tensor of
// hidden states is (N, d) in that order.
#include <torch/torch.h>

#include <map>
#include <memory>
#include <vector>

#include "model/attention.h"

namespace lol {

// One document inside a row of the batch.
struct DocumentSpan {
  int64_t start = 0;       // first column in the row
  int64_t length = 0;      // tokens
  int64_t prompt_len = 0;  // P: tokens forming window 0 at every depth (0: none)
};

// A document as a caller gives it: its tokens, its prompt window P (SPEC 1.3) and the
// positions of its router-only tokens (SPEC 1.5).
struct TokenSequence {
  std::vector<int64_t> tokens;
  int64_t prompt_len = 0;
  std::vector<int64_t> router_only;
};

// What the caller gives: rows of token ids; each row holds documents, the rest is padding.
struct Batch {
  torch::Tensor tokens;       // (B, T) int64
  torch::Tensor router_only;  // (B, T) bool, or undefined for none (SPEC 1.5)
  std::vector<std::vector<DocumentSpan>> documents;  // per row; empty row list = one document
                                                     // spanning the whole row with P = 0

  // Rows of documents, each row's documents one after another from column 0, every row padded
  // to the longest plus `extra_columns`. Throws naming a router-only position outside its
  // document.
  static Batch from_documents(const std::vector<std::vector<TokenSequence>>& rows,
                              int64_t extra_columns = 0);
  // One sequence as a batch of one row holding one document.
  static Batch single(const std::vector<int64_t>& tokens, int64_t prompt_len = 0,
                      const std::vector<int64_t>& router_only_positions = {});
};

// A window of one routed depth: a contiguous run of one document's tokens.
struct Window {
  int64_t document = 0;  // index into Layout::documents
  int64_t ordinal = 0;   // k within the document (0 = first; the prompt window when P > 0)
  int64_t start = 0;     // first flat token
  int64_t length = 0;
};

// How one window offset delta cuts every document (all depths with the same delta share it).
struct WindowPartition {
  std::vector<Window> windows;        // ordered by document, then ordinal
  std::vector<int64_t> token_window;  // (N) window index of each flat token
  torch::Tensor token_window_t;       // same, on the model device
  AttentionPlan plan;                 // causal attention confined to each window
  // What the router indexes by, per window, on the model device (made once with the
  // partition, so a routed depth copies nothing from the host): its length, its document's
  // first flat token, its ordinal, and its cell and its predecessor's cell in a (documents x
  // max_windows) grid (the first window's predecessor is itself).
  torch::Tensor lengths_t, first_token_t, ordinals_t, slots_t, slot_prev_t;
  int64_t max_windows = 0;
};

struct FlatDocument {
  int64_t start = 0;  // first flat token
  int64_t length = 0;
  int64_t prompt_len = 0;  // clipped to length
  int64_t row = 0;
  int64_t row_start = 0;  // column of its first token in the row
};

class Layout {
 public:
  // Validates the batch (shapes, spans inside rows and not overlapping, ids in vocabulary)
  // and lays its tokens out flat.
  Layout(const Batch& batch, int64_t vocab_size, torch::Device device);

  int64_t num_tokens() const { return static_cast<int64_t>(router_only_.size()); }
  const std::vector<FlatDocument>& documents() const { return documents_; }
  const std::vector<uint8_t>& router_only() const { return router_only_; }
  torch::Device device() const { return device_; }

  torch::Tensor tokens() const { return tokens_; }        // (N) int64
  torch::Tensor positions() const { return positions_; }  // (N) int64, restart per document
  int64_t rows() const { return rows_; }
  int64_t columns() const { return columns_; }

  // Full causal attention within each document (prelude, coda, dense "full").
  const AttentionPlan& document_plan() const;
  // Each token sees itself and the previous band-1 tokens of its document (dense "sliding").
  const AttentionPlan& sliding_plan(int64_t band) const;
  // Windows of width W at offset delta (SPEC 1.3), with their attention plan.
  const WindowPartition& windows(int64_t window, int64_t delta) const;

  // (N, ...) flat rows -> (B, T, ...) with zeros at padding.
  torch::Tensor to_grid(const torch::Tensor& flat) const;

 private:
  torch::Device device_;
  int64_t rows_ = 0, columns_ = 0;
  std::vector<FlatDocument> documents_;
  std::vector<uint8_t> router_only_;
  torch::Tensor tokens_, positions_;
  torch::Tensor grid_index_;  // (N) int64: flat index of each token in the (B, T) grid (to_grid)
  mutable std::unique_ptr<AttentionPlan> document_plan_;
  mutable std::map<int64_t, AttentionPlan> sliding_plans_;
  mutable std::map<std::pair<int64_t, int64_t>, WindowPartition> partitions_;
};

// Window ordinal of position i (0-based within its document) at offset delta (SPEC 1.3).
int64_t window_ordinal(int64_t i, int64_t prompt_len, int64_t window, int64_t delta);

// SPEC 1.3: window offset delta_l of routed depth l (1-based).
inline int64_t window_offset(int64_t depth, int64_t window, int64_t stride) {
  return ((depth - 1) * stride) % window;
}

}  // namespace lol

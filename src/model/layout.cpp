#include "model/layout.h"

#include <algorithm>

#include "util/error.h"
#include "util/tensor.h"

namespace lol {
int64_t window_ordinal(int64_t i, int64_t prompt_len, int64_t window, int64_t delta) {
  if (prompt_len <= 0) return (i + delta) / window;
  if (i < prompt_len) return 0;
  return 1 + (i - prompt_len + delta) / window;
}

Batch Batch::from_documents(const std::vector<std::vector<TokenSequence>>& rows,
                            int64_t extra_columns) {
  int64_t width = 0;
  for (const auto& row : rows) {
    int64_t used = 0;
    for (const auto& doc : row) used += static_cast<int64_t>(doc.tokens.size());
    width = std::max(width, used);
  }
  width += extra_columns;
  const int64_t count = static_cast<int64_t>(rows.size());
  Batch batch;
  batch.tokens = torch::zeros({count, width}, torch::kInt64);
  batch.router_only = torch::zeros({count, width}, torch::kBool);
  batch.documents.resize(rows.size());
  auto tokens = batch.tokens.accessor<int64_t, 2>();
  auto router_only = batch.router_only.accessor<bool, 2>();
  for (int64_t r = 0; r < count; ++r) {
    int64_t column = 0;
    for (const auto& doc : rows[r]) {
      const int64_t n = static_cast<int64_t>(doc.tokens.size());
      for (int64_t i = 0; i < n; ++i) tokens[r][column + i] = doc.tokens[i];
      for (int64_t p : doc.router_only) {
        LOL_CHECK(p >= 0 && p < n, "router-only position ", p, " is outside the sequence of ", n,
                  " tokens");
        router_only[r][column + p] = true;
      }
      batch.documents[r].push_back(DocumentSpan{column, n, doc.prompt_len});
      column += n;
    }
  }
  return batch;
}

Batch Batch::single(const std::vector<int64_t>& tokens, int64_t prompt_len,
                    const std::vector<int64_t>& router_only_positions) {
  return from_documents({{TokenSequence{tokens, prompt_len, router_only_positions}}});
}

Layout::Layout(const Batch& batch, int64_t vocab_size, torch::Device device) : device_(device) {
  LOL_CHECK(batch.tokens.defined() && batch.tokens.dim() == 2,
            "batch tokens must be a (rows, columns) tensor");
  auto tokens = batch.tokens.to(torch::kCPU).to(torch::kInt64).contiguous();
  rows_ = tokens.size(0);
  columns_ = tokens.size(1);
  torch::Tensor router_only;
  if (batch.router_only.defined()) {
    LOL_CHECK(batch.router_only.sizes() == batch.tokens.sizes(),
              "router_only mask must have the shape of the tokens");
    router_only = batch.router_only.to(torch::kCPU).to(torch::kBool).contiguous();
  }
  LOL_CHECK(batch.documents.empty() || static_cast<int64_t>(batch.documents.size()) == rows_,
            "documents must list one entry per row (", rows_, "), got ", batch.documents.size());

  auto token_a = tokens.accessor<int64_t, 2>();
  const bool* router_only_data = router_only.defined() ? router_only.data_ptr<bool>() : nullptr;
  std::vector<int64_t> flat_tokens, positions, grid;
  for (int64_t r = 0; r < rows_; ++r) {
    std::vector<DocumentSpan> spans;
    if (batch.documents.empty() || batch.documents[r].empty())
      spans = {DocumentSpan{0, columns_, 0}};
    else
      spans = batch.documents[r];
    std::sort(spans.begin(), spans.end(),
              [](const DocumentSpan& a, const DocumentSpan& b) { return a.start < b.start; });
    int64_t end_of_previous = 0;
    for (const auto& span : spans) {
      LOL_CHECK(
          span.length > 0 && span.start >= end_of_previous && span.start + span.length <= columns_,
          "row ", r, ": document [", span.start, ", ", span.start + span.length,
          ") is empty, overlaps another or leaves the row of ", columns_, " columns");
      LOL_CHECK(span.prompt_len >= 0, "row ", r, ": prompt length must be >= 0, got ",
                span.prompt_len);
      end_of_previous = span.start + span.length;
      FlatDocument doc;
      doc.start = static_cast<int64_t>(flat_tokens.size());
      doc.length = span.length;
      doc.prompt_len = std::min(span.prompt_len, span.length);
      doc.row = r;
      doc.row_start = span.start;
      documents_.push_back(doc);
      for (int64_t c = span.start; c < span.start + span.length; ++c) {
        const int64_t id = token_a[r][c];
        LOL_CHECK(id >= 0 && id < vocab_size, "token id ", id, " at row ", r, " column ", c,
                  " is outside the vocabulary [0, ", vocab_size, ")");
        flat_tokens.push_back(id);
        positions.push_back(c - span.start);
        grid.push_back(r * columns_ + c);
        router_only_.push_back(router_only_data && router_only_data[r * columns_ + c]);
      }
    }
  }
  tokens_ = int64_tensor(flat_tokens, device_);
  positions_ = int64_tensor(positions, device_);
  grid_index_ = int64_tensor(grid, device_);
}

const AttentionPlan& Layout::document_plan() const {
  if (!document_plan_) {
    std::vector<Segment> segments;
    for (const auto& d : documents_) segments.push_back({d.start, d.length});
    document_plan_ = std::make_unique<AttentionPlan>(
        build_attention_plan(segments, router_only_, num_tokens(), 0, device_));
  }
  return *document_plan_;
}

const AttentionPlan& Layout::sliding_plan(int64_t band) const {
  auto it = sliding_plans_.find(band);
  if (it == sliding_plans_.end()) {
    std::vector<Segment> segments;
    for (const auto& d : documents_) segments.push_back({d.start, d.length});
    it = sliding_plans_
             .emplace(band,
                      build_attention_plan(segments, router_only_, num_tokens(), band, device_))
             .first;
  }
  return it->second;
}

const WindowPartition& Layout::windows(int64_t window, int64_t delta) const {
  auto key = std::make_pair(window, delta);
  auto it = partitions_.find(key);
  if (it != partitions_.end()) return it->second;
  WindowPartition part;
  part.token_window.resize(num_tokens());
  std::vector<Segment> segments;
  for (int64_t d = 0; d < static_cast<int64_t>(documents_.size()); ++d) {
    const auto& doc = documents_[d];
    for (int64_t i = 0; i < doc.length; ++i) {
      const int64_t k = window_ordinal(i, doc.prompt_len, window, delta);
      if (part.windows.empty() || part.windows.back().document != d ||
          part.windows.back().ordinal != k) {
        part.windows.push_back(Window{d, k, doc.start + i, 0});
      }
      part.windows.back().length++;
      part.token_window[doc.start + i] = static_cast<int64_t>(part.windows.size()) - 1;
    }
  }
  for (const auto& w : part.windows) segments.push_back({w.start, w.length});
  part.token_window_t = int64_tensor(part.token_window, device_);
  std::vector<int64_t> lengths, first_token, ordinals, slots, slot_prev;
  for (const auto& w : part.windows) part.max_windows = std::max(part.max_windows, w.ordinal + 1);
  for (const auto& w : part.windows) {
    lengths.push_back(w.length);
    first_token.push_back(documents_[w.document].start);
    slots.push_back(w.document * part.max_windows + w.ordinal);
    slot_prev.push_back(w.document * part.max_windows + std::max<int64_t>(w.ordinal - 1, 0));
    ordinals.push_back(w.ordinal);
  }
  part.lengths_t = int64_tensor(lengths, device_);
  part.first_token_t = int64_tensor(first_token, device_);
  part.ordinals_t = int64_tensor(ordinals, device_);
  part.slots_t = int64_tensor(slots, device_);
  part.slot_prev_t = int64_tensor(slot_prev, device_);
  part.plan = build_attention_plan(segments, router_only_, num_tokens(), 0, device_);
  return partitions_.emplace(key, std::move(part)).first->second;
}

torch::Tensor Layout::to_grid(const torch::Tensor& flat) const {
  std::vector<int64_t> shape = {rows_ * columns_};
  for (int64_t i = 1; i < flat.dim(); ++i) shape.push_back(flat.size(i));
  auto grid = torch::zeros(shape, flat.options()).index_copy(0, grid_index_, flat);
  shape[0] = columns_;
  shape.insert(shape.begin(), rows_);
  return grid.view(shape);
}

}  // namespace lol

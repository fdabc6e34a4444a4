#include "helpers.h"
#include "model/core.h"
#include "model/layout.h"

namespace lol {
namespace {

std::vector<std::vector<int64_t>> windows_of(int64_t n, int64_t W, int64_t S, int64_t P,
                                             int64_t depth) {
  Layout layout(Batch::single(std::vector<int64_t>(n, 0), P), 1, testing::device());
  const auto& part = layout.windows(W, window_offset(depth, W, S));
  std::vector<std::vector<int64_t>> out;
  for (const auto& w : part.windows) {
    out.emplace_back();
    for (int64_t i = 0; i < w.length; ++i) out.back().push_back(w.start + i);
  }
  return out;
}

TEST(Windows, PaperExample) {
  // SPEC 1.3 / paper 3.2.1: n = 8, W = 4, S = 2.
  using V = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(windows_of(8, 4, 2, 0, 1), (V{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(windows_of(8, 4, 2, 0, 2), (V{{0, 1}, {2, 3, 4, 5}, {6, 7}}));
  EXPECT_EQ(windows_of(8, 4, 2, 0, 3), (V{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(Windows, PromptWindowIsWindowZeroAtEveryDepth) {
  using V = std::vector<std::vector<int64_t>>;
  // P = 3: tokens 0..2 form window 0; then windows of W = 4 offset by delta.
  EXPECT_EQ(windows_of(10, 4, 2, 3, 1), (V{{0, 1, 2}, {3, 4, 5, 6}, {7, 8, 9}}));
  EXPECT_EQ(windows_of(10, 4, 2, 3, 2), (V{{0, 1, 2}, {3, 4}, {5, 6, 7, 8}, {9}}));
  // A prompt longer than the document is clipped to it.
  EXPECT_EQ(windows_of(3, 4, 2, 5, 2), (V{{0, 1, 2}}));
}

TEST(Windows, OrdinalsFollowTheFormula) {
  for (int64_t W : {1, 3, 4, 7})
    for (int64_t S : {0, 1, 2, 5})
      for (int64_t P : {0, 1, 6})
        for (int64_t l = 1; l <= 4; ++l) {
          const int64_t delta = window_offset(l, W, S);
          EXPECT_EQ(delta, ((l - 1) * S) % W);
          Layout layout(Batch::single(std::vector<int64_t>(20, 0), P), 1, testing::device());
          const auto& part = layout.windows(W, delta);
          for (int64_t i = 0; i < 20; ++i) {
            const int64_t expected =
                P == 0 ? (i + delta) / W : (i < P ? 0 : 1 + (i - P + delta) / W);
            EXPECT_EQ(part.windows[part.token_window[i]].ordinal, expected);
            EXPECT_LE(part.windows[part.token_window[i]].length, std::max(W, P));
          }
        }
}

TEST(Windows, PackedDocumentsNeverShareAWindow) {
  Batch batch;
  batch.tokens = torch::zeros({1, 12}, torch::kInt64);
  batch.documents = {{DocumentSpan{0, 5, 0}, DocumentSpan{5, 7, 2}}};
  Layout layout(batch, 1, testing::device());
  const auto& part = layout.windows(4, 2);
  for (const auto& w : part.windows) {
    const auto& doc = layout.documents()[w.document];
    EXPECT_GE(w.start, doc.start);
    EXPECT_LE(w.start + w.length, doc.start + doc.length);
  }
  EXPECT_EQ(part.windows.front().ordinal, 0);
  EXPECT_EQ(layout.positions()[5].item<int64_t>(), 0);  // positions restart per document
}

TEST(Windows, BadBatchesAreRejected) {
  Batch batch;
  batch.tokens = torch::zeros({1, 6}, torch::kInt64);
  batch.documents = {{DocumentSpan{0, 4, 0}, DocumentSpan{3, 3, 0}}};
  EXPECT_THROW(Layout(batch, 1, testing::device()), Error);
  batch.documents = {{DocumentSpan{0, 7, 0}}};
  EXPECT_THROW(Layout(batch, 1, testing::device()), Error);
  batch.documents = {{DocumentSpan{0, 6, 0}}};
  batch.tokens[0][2] = 5;
  EXPECT_THROW(Layout(batch, 5, testing::device()), Error);  // id outside the vocabulary
}

}  // namespace
}  // namespace lol

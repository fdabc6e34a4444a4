#include "model/stats.h"

#include <algorithm>

namespace lol {
namespace {

struct BlockCost {
  int64_t params;         // all parameters
  int64_t matmul_active;  // matrix elements one token multiplies
  int64_t params_active;  // parameters one token touches
};

BlockCost block_cost(const ModelConfig& c, bool moe) {
  const int64_t d = c.d_model, dh = c.head_dim();
  const int64_t attn = 2 * d * c.n_heads * dh + 2 * d * c.n_kv_heads * dh;
  const int64_t ffn = 3 * d * c.ffn_hidden;
  if (!moe) return {attn + ffn + 2 * d, attn + ffn, attn + ffn + 2 * d};
  const int64_t router = c.moe_experts * d;
  return {attn + c.moe_experts * ffn + router + 2 * d, attn + c.moe_top_k * ffn + router,
          attn + c.moe_top_k * ffn + router + 2 * d};
}

double mean_keys(const ModelConfig& c, int64_t seq_len, bool windowed, int64_t band) {
  const double T = static_cast<double>(seq_len);
  if (windowed) return (std::min<double>(c.window, T) + 1) / 2;  // windows of W, causal
  if (band > 0) return std::min<double>(band, (T + 1) / 2);
  return (T + 1) / 2;
}

}  // namespace

ModelStats model_stats(const ModelConfig& c, int64_t seq_len, int64_t core_depth) {
  const int64_t D = core_depth < 0 ? c.core_depth : core_depth;
  const int64_t d = c.d_model;
  const int64_t kv_bytes_per_token_layer = 2 * c.n_kv_heads * c.head_dim() * 4;
  const double attn_flops_per_key = 4.0 * c.n_heads * c.head_dim();
  ModelStats s;
  const auto plain = block_cost(c, false);
  const int64_t fixed = c.n_prelude + c.n_coda;
  const int64_t embed = c.vocab_size * d, head = c.tie_embeddings ? 0 : c.vocab_size * d;
  s.stored_params = embed + head + d + fixed * plain.params;
  s.active_params = embed + head + d + fixed * plain.params_active;
  s.executed_matmul_params = fixed * plain.matmul_active + c.vocab_size * d;
  s.executed_blocks = fixed + D;
  s.attention_flops_per_token = fixed * attn_flops_per_key * mean_keys(c, seq_len, false, 0);
  s.fixed_cache_bytes_per_token = fixed * kv_bytes_per_token_layer;

  if (c.family == "lol") {
    const int64_t router =
        (c.router_tied ? 1 : c.core_depth) * c.library_size * d + c.core_depth * d;
    const int64_t film = 4 * c.core_depth * d;
    s.stored_params += c.library_size * plain.params + router + film;
    s.active_params += std::min(D, c.library_size) * plain.params_active + router + film;
    s.executed_matmul_params += D * (plain.matmul_active + c.library_size * d);
    s.attention_flops_per_token += D * attn_flops_per_key * mean_keys(c, seq_len, true, 0);
    // Per depth: K/V of the current window, its running sum, the closed-window sum, route.
    s.core_cache_bytes = D * (c.window * kv_bytes_per_token_layer + 2 * d * 4 + 16);
  } else {
    const bool moe = c.family == "moe";
    const auto block = block_cost(c, moe);
    const int64_t distinct = c.family == "looped" ? c.loop_blocks : c.core_depth;
    s.stored_params += distinct * block.params;
    s.active_params += std::min(D, distinct) * block.params_active;
    s.executed_matmul_params += D * block.matmul_active;
    const bool windowed = c.core_attention == "strided";
    const int64_t band = c.core_attention == "sliding" ? c.window : 0;
    s.attention_flops_per_token += D * attn_flops_per_key * mean_keys(c, seq_len, windowed, band);
    if (windowed || band > 0)
      s.core_cache_bytes = D * c.window * kv_bytes_per_token_layer;
    else
      s.fixed_cache_bytes_per_token += D * kv_bytes_per_token_layer;
  }
  s.forward_flops_per_token = 2.0 * s.executed_matmul_params + s.attention_flops_per_token;
  s.train_flops_per_token = 3.0 * s.forward_flops_per_token;
  return s;
}

}  // namespace lol

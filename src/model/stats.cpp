#include "model/stats.h"

#include <algorithm>

#include "model/core.h"

namespace lol {

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
  if (windowed)
    return (std::min<double>(static_cast<double>(c.window), T) + 1) / 2;  // windows of W, causal
  if (band > 0) return std::min<double>(static_cast<double>(band), (T + 1) / 2);
  return (T + 1) / 2;
}

double attention_flops_per_key(const ModelConfig& c) {
  return 4.0 * static_cast<double>(c.n_heads * c.head_dim());
}

int64_t kv_bytes_per_token_layer(const ModelConfig& c) {
  return 2 * c.n_kv_heads * c.head_dim() * 4;
}

ModelStats model_stats(const ModelConfig& c, int64_t seq_len, int64_t core_depth) {
  const int64_t D = core_depth < 0 ? c.core_depth : core_depth;
  const int64_t d = c.d_model;
  ModelStats s;
  const auto plain = block_cost(c, false);
  const int64_t fixed = c.n_prelude + c.n_coda;
  const int64_t embed = c.vocab_size * d, head = c.tie_embeddings ? 0 : c.vocab_size * d;
  s.stored_params = embed + head + d + fixed * plain.params;
  s.active_params = embed + head + d + fixed * plain.params_active;
  s.executed_matmul_params = fixed * plain.matmul_active + c.vocab_size * d;
  s.executed_blocks = fixed + D;
  s.attention_flops_per_token =
      static_cast<double>(fixed) * attention_flops_per_key(c) * mean_keys(c, seq_len, false, 0);
  s.fixed_cache_bytes_per_token = fixed * kv_bytes_per_token_layer(c);
  add_core_stats(c, seq_len, D, s);
  s.forward_flops_per_token =
      2.0 * static_cast<double>(s.executed_matmul_params) + s.attention_flops_per_token;
  s.train_flops_per_token = 3.0 * s.forward_flops_per_token;
  return s;
}

}  // namespace lol

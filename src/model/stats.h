#pragma once
// Size and cost of a model, computed from its config alone (so `lol info` answers instantly
// even for paper-1b). tests/stats_test checks the counts against a built model.
#include "model/config.h"

namespace lol {

struct ModelStats {
  int64_t stored_params = 0;                // every parameter tensor element
  int64_t active_params = 0;                // distinct parameters one token's forward touches
  int64_t executed_matmul_params = 0;       // weight-matrix elements multiplied per token, repeats
                                            // counted (a library block used twice counts twice)
  int64_t executed_blocks = 0;              // block applications per token
  double attention_flops_per_token = 0;     // QK^T and AV at the given sequence length
  double forward_flops_per_token = 0;       // 2 * executed_matmul_params + attention
  double train_flops_per_token = 0;         // 3 * forward (forward + backward)
  int64_t core_cache_bytes = 0;             // decode state of the core per sequence (fp32)
  int64_t fixed_cache_bytes_per_token = 0;  // prelude + coda (+ non-window core) KV per token
};

// core_depth < 0: the config's full depth.
ModelStats model_stats(const ModelConfig& config, int64_t seq_len, int64_t core_depth = -1);

// The pieces the cores' own counts are made of (core.cpp, add_core_stats).
struct BlockCost {
  int64_t params;         // all parameters
  int64_t matmul_active;  // matrix elements one token multiplies
  int64_t params_active;  // parameters one token touches
};
BlockCost block_cost(const ModelConfig& config, bool moe);
// Mean number of keys a query attends to at length seq_len: windows of W, a band, or causal.
double mean_keys(const ModelConfig& config, int64_t seq_len, bool windowed, int64_t band);
double attention_flops_per_key(const ModelConfig& config);    // QK^T and AV, all heads
int64_t kv_bytes_per_token_layer(const ModelConfig& config);  // fp32 keys and values

}  // namespace lol

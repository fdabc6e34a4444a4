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

}  // namespace lol

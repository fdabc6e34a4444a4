#include "model/config.h"

#include <cmath>
#include <filesystem>

#include "util/files.h"

namespace lol {

const std::vector<Field<ModelConfig>>& ModelConfig::fields() {
  using C = ModelConfig;
  static const std::vector<Field<C>> table = {
      field("family", &C::family, "lol | dense | looped | moe"),
      field("vocab_size", &C::vocab_size, "vocabulary size V"),
      field("d_model", &C::d_model, "residual width d"),
      field("n_heads", &C::n_heads, "query heads H"),
      field("n_kv_heads", &C::n_kv_heads, "key/value heads (GQA when < n_heads)"),
      field("ffn_hidden", &C::ffn_hidden, "SwiGLU hidden size"),
      field("n_prelude", &C::n_prelude, "prelude blocks"),
      field("core_depth", &C::core_depth, "core depth D"),
      field("library_size", &C::library_size, "library experts L (lol)"),
      field("n_coda", &C::n_coda, "coda blocks"),
      field("window", &C::window, "core window W"),
      field("stride", &C::stride, "window stride S between depths"),
      field("router_tied", &C::router_tied, "one router for all depths"),
      field("router_noise_std", &C::router_noise_std, "router logit noise in training"),
      field("balance_rate", &C::balance_rate, "loss-free balancing rate u"),
      field("balance_count", &C::balance_count, "windows | tokens"),
      field("balance_window0", &C::balance_window0, "count window 0 in the load"),
      field("rope_theta", &C::rope_theta, "rotary base"),
      field("norm_eps", &C::norm_eps, "RMSNorm epsilon"),
      field("tie_embeddings", &C::tie_embeddings, "tie LM head to embedding"),
      field("max_seq_len", &C::max_seq_len, "longest document"),
      field("core_attention", &C::core_attention, "full | sliding | strided (non-lol core)"),
      field("loop_blocks", &C::loop_blocks, "distinct blocks in the looped core"),
      field("moe_experts", &C::moe_experts, "FFN experts per MoE layer"),
      field("moe_top_k", &C::moe_top_k, "experts per token (MoE)"),
      field("init_std", &C::init_std, "initialisation std of weight matrices"),
  };
  return table;
}

namespace {
void check_positive(const char* name, int64_t value) {
  LOL_CHECK(value > 0, name, " must be > 0, got ", value);
}
void check_non_negative(const char* name, int64_t value) {
  LOL_CHECK(value >= 0, name, " must be >= 0, got ", value);
}
void check_finite_non_negative(const char* name, double value) {
  LOL_CHECK(std::isfinite(value) && value >= 0, name, " must be a finite number >= 0, got ", value);
}
}  // namespace

void ModelConfig::validate() const {
  LOL_CHECK(family == "lol" || family == "dense" || family == "looped" || family == "moe",
            "family must be one of lol, dense, looped, moe; got '", family, "'");
  check_positive("vocab_size", vocab_size);
  check_positive("d_model", d_model);
  check_positive("n_heads", n_heads);
  check_positive("n_kv_heads", n_kv_heads);
  LOL_CHECK(d_model % n_heads == 0, "d_model (", d_model, ") must be divisible by n_heads (",
            n_heads, ")");
  LOL_CHECK(head_dim() % 2 == 0, "head size d_model / n_heads must be even for rotary, got ",
            head_dim());
  LOL_CHECK(n_kv_heads <= n_heads && n_heads % n_kv_heads == 0, "n_heads (", n_heads,
            ") must be a multiple of n_kv_heads (", n_kv_heads, ")");
  check_positive("ffn_hidden", ffn_hidden);
  check_non_negative("n_prelude", n_prelude);
  check_positive("core_depth", core_depth);
  check_non_negative("n_coda", n_coda);
  check_positive("window", window);
  check_non_negative("stride", stride);
  check_positive("max_seq_len", max_seq_len);
  check_finite_non_negative("router_noise_std", router_noise_std);
  check_finite_non_negative("balance_rate", balance_rate);
  LOL_CHECK(balance_count == "windows" || balance_count == "tokens",
            "balance_count must be 'windows' or 'tokens', got '", balance_count, "'");
  LOL_CHECK(std::isfinite(rope_theta) && rope_theta > 0, "rope_theta must be > 0, got ",
            rope_theta);
  LOL_CHECK(std::isfinite(norm_eps) && norm_eps > 0, "norm_eps must be > 0, got ", norm_eps);
  LOL_CHECK(std::isfinite(init_std) && init_std > 0, "init_std must be > 0, got ", init_std);
  LOL_CHECK(core_attention == "full" || core_attention == "sliding" || core_attention == "strided",
            "core_attention must be one of full, sliding, strided; got '", core_attention, "'");
  if (family == "lol") check_positive("library_size", library_size);
  if (family == "looped") {
    check_positive("loop_blocks", loop_blocks);
    LOL_CHECK(core_depth % loop_blocks == 0, "core_depth (", core_depth,
              ") must be a multiple of loop_blocks (", loop_blocks, ") for family looped");
  }
  if (family == "moe") {
    check_positive("moe_experts", moe_experts);
    LOL_CHECK(moe_top_k >= 1 && moe_top_k <= moe_experts,
              "moe_top_k must be in [1, moe_experts=", moe_experts, "], got ", moe_top_k);
  }
}

json ModelConfig::to_json() const {
  return fields_to_json(fields(), *this);
}

ModelConfig ModelConfig::from_json(const json& object) {
  ModelConfig config;
  fields_from_json(fields(), object, config);
  config.validate();
  return config;
}

std::string find_preset_file(const std::string& name) {
  namespace fs = std::filesystem;
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("LOL_CONFIG_DIR")) roots.emplace_back(env);
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    // build/<preset>/lol -> <source>/configs ; installed bin/lol -> share/lol/configs
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path();
         dir = dir.parent_path()) {
      roots.push_back(dir / "configs");
      roots.push_back(dir / "share" / "lol" / "configs");
    }
  }
  roots.push_back(fs::path(LOL_SOURCE_DIR) / "configs");
  for (const auto& root : roots) {
    fs::path candidate = root / (name + ".json");
    if (fs::exists(candidate, ec)) return candidate.string();
  }
  fail("unknown preset '", name, "' (no ", name, ".json in configs/)");
}

ModelConfig load_model_config(const std::string& preset_or_path,
                              const std::vector<std::string>& overrides) {
  std::string path = preset_or_path;
  if (!std::filesystem::exists(path)) path = find_preset_file(preset_or_path);
  json object = json::parse(read_text_file(path), nullptr, /*allow_exceptions=*/false);
  LOL_CHECK(!object.is_discarded(), path, ": not valid JSON");
  ModelConfig config;
  try {
    fields_from_json(ModelConfig::fields(), object, config);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
  for (const auto& assignment : overrides)
    apply_override(ModelConfig::fields(), assignment, config);
  config.validate();
  return config;
}

}  // namespace lol

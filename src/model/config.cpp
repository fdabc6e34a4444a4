#include "model/config.h"

#include <cmath>
#include <filesystem>

#include "util/files.h"

namespace lol {

template <>
const std::vector<std::pair<Family, const char*>>& enum_names<Family>() {
  static const std::vector<std::pair<Family, const char*>> names = {{Family::kLol, "lol"},
                                                                    {Family::kDense, "dense"},
                                                                    {Family::kLooped, "looped"},
                                                                    {Family::kMoe, "moe"}};
  return names;
}

template <>
const std::vector<std::pair<CoreAttention, const char*>>& enum_names<CoreAttention>() {
  static const std::vector<std::pair<CoreAttention, const char*>> names = {
      {CoreAttention::kFull, "full"},
      {CoreAttention::kSliding, "sliding"},
      {CoreAttention::kStrided, "strided"}};
  return names;
}

template <>
const std::vector<std::pair<BalanceCount, const char*>>& enum_names<BalanceCount>() {
  static const std::vector<std::pair<BalanceCount, const char*>> names = {
      {BalanceCount::kWindows, "windows"},
      {BalanceCount::kTokens, "tokens"},
      {BalanceCount::kGates, "gates"}};
  return names;
}

template <>
const std::vector<std::pair<BalanceSpace, const char*>>& enum_names<BalanceSpace>() {
  static const std::vector<std::pair<BalanceSpace, const char*>> names = {
      {BalanceSpace::kProbs, "probs"}, {BalanceSpace::kLogits, "logits"}};
  return names;
}

const std::vector<Field<ModelConfig>>& ModelConfig::fields() {
  using C = ModelConfig;
  static const std::vector<Field<C>> table = {
      field("family", &C::family, "model family"),
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
      field("balance_count", &C::balance_count, "what a balancing load counts"),
      field("balance_window0", &C::balance_window0, "count window 0 in the load"),
      field("balance_space", &C::balance_space, "where the balancing bias is added"),
      field("balance_per_depth", &C::balance_per_depth, "one balancing bias per routed depth"),
      field("router_skip", &C::router_skip, "a skip choice beside the library (lol)"),
      field("router_skip_renorm", &C::router_skip_renorm,
            "gate among the experts only, p_e / (1 - p_skip) (lol, router_skip)"),
      field("router_skip_head", &C::router_skip_head,
            "skip probability a sigmoid of its own logit, learned on skipped windows (lol, "
            "router_skip)"),
      field("router_skip_share", &C::router_skip_share,
            "share of windows the skip's bias steers toward (lol, router_skip)"),
      field("router_skip_target", &C::router_skip_target,
            "skip head learns to pick the share of windows whose update helps least (lol, "
            "router_skip_head)"),
      field("router_skip_window0", &C::router_skip_window0,
            "window 0 may skip (lol, router_skip; false: windows 1.. only)"),
      field("rope_theta", &C::rope_theta, "rotary base"),
      field("norm_eps", &C::norm_eps, "RMSNorm epsilon"),
      field("tie_embeddings", &C::tie_embeddings, "tie LM head to embedding"),
      field("max_seq_len", &C::max_seq_len, "longest document"),
      field("core_attention", &C::core_attention, "attention of a non-lol core"),
      field("loop_blocks", &C::loop_blocks, "distinct blocks in the looped core"),
      field("moe_experts", &C::moe_experts, "FFN experts per MoE layer"),
      field("moe_top_k", &C::moe_top_k, "experts per token (MoE)"),
      field("init_std", &C::init_std, "initialisation std of weight matrices"),
  };
  return table;
}

namespace {
// Upper bounds keep every count derived from a config (parameters, FLOPs, cache bytes) far
// inside int64 whatever the combination, and far above any model this engine is meant for.
constexpr int64_t kMaxWidth = int64_t{1} << 16;   // d_model
constexpr int64_t kMaxHidden = int64_t{1} << 20;  // ffn_hidden
constexpr int64_t kMaxVocab = int64_t{1} << 24;   // vocab_size
constexpr int64_t kMaxCount = int64_t{1} << 10;   // heads, blocks, depths, experts
constexpr int64_t kMaxLength = int64_t{1} << 24;  // window, stride, max_seq_len

void check_range(const char* name, int64_t value, int64_t low, int64_t high) {
  if (low == 1) LOL_CHECK(value >= low, name, " must be > 0, got ", value);
  LOL_CHECK(value >= low, name, " must be >= ", low, ", got ", value);
  LOL_CHECK(value <= high, name, " must be <= ", high, ", got ", value);
}
void check_finite_non_negative(const char* name, double value) {
  LOL_CHECK(std::isfinite(value) && value >= 0, name, " must be a finite number >= 0, got ", value);
}
void check_finite_positive(const char* name, double value) {
  LOL_CHECK(std::isfinite(value) && value > 0, name, " must be > 0, got ", value);
}
}  // namespace

void ModelConfig::validate() const {
  check_range("vocab_size", vocab_size, 1, kMaxVocab);
  check_range("d_model", d_model, 1, kMaxWidth);
  check_range("n_heads", n_heads, 1, kMaxCount);
  check_range("n_kv_heads", n_kv_heads, 1, kMaxCount);
  LOL_CHECK(d_model % n_heads == 0, "d_model (", d_model, ") must be divisible by n_heads (",
            n_heads, ")");
  LOL_CHECK(head_dim() % 2 == 0, "head size d_model / n_heads must be even for rotary, got ",
            head_dim());
  LOL_CHECK(n_kv_heads <= n_heads && n_heads % n_kv_heads == 0, "n_heads (", n_heads,
            ") must be a multiple of n_kv_heads (", n_kv_heads, ")");
  check_range("ffn_hidden", ffn_hidden, 1, kMaxHidden);
  check_range("n_prelude", n_prelude, 0, kMaxCount);
  check_range("core_depth", core_depth, 1, kMaxCount);
  check_range("n_coda", n_coda, 0, kMaxCount);
  check_range("window", window, 1, kMaxLength);
  check_range("stride", stride, 0, kMaxLength);
  check_range("max_seq_len", max_seq_len, 1, kMaxLength);
  check_finite_non_negative("router_noise_std", router_noise_std);
  check_finite_non_negative("balance_rate", balance_rate);
  check_finite_positive("rope_theta", rope_theta);
  check_finite_positive("norm_eps", norm_eps);
  check_finite_positive("init_std", init_std);
  // What each family reads besides the shared fields.
  switch (family) {
    case Family::kLol:
      check_range("library_size", library_size, 1, kMaxCount);
      LOL_CHECK(std::isfinite(router_skip_share) && router_skip_share >= 0 && router_skip_share < 1,
                "router_skip_share must be in [0, 1), got ", router_skip_share);
      LOL_CHECK(router_skip_share == 0 || router_skip,
                "router_skip_share needs router_skip=true (a skip choice to steer)");
      LOL_CHECK(
          !router_skip_renorm || router_skip,
          "router_skip_renorm needs router_skip=true (a skip choice to leave out of the gate)");
      LOL_CHECK(!router_skip_head || router_skip,
                "router_skip_head needs router_skip=true (a skip choice to score)");
      LOL_CHECK(!router_skip_target || (router_skip_head && router_skip_renorm),
                "router_skip_target needs router_skip_head=true and router_skip_renorm=true (a "
                "skip head to train, and gates that leave it out)");
      LOL_CHECK(!router_skip_target || router_skip_share > 0,
                "router_skip_target needs a router_skip_share (the share of windows to pick)");
      LOL_CHECK(router_skip_window0 || router_skip,
                "router_skip_window0=false needs router_skip=true (a skip choice to withhold)");
      break;
    case Family::kDense:
      break;
    case Family::kLooped:
      check_range("loop_blocks", loop_blocks, 1, kMaxCount);
      LOL_CHECK(core_depth % loop_blocks == 0, "core_depth (", core_depth,
                ") must be a multiple of loop_blocks (", loop_blocks, ") for family looped");
      break;
    case Family::kMoe:
      check_range("moe_experts", moe_experts, 1, kMaxCount);
      LOL_CHECK(moe_top_k >= 1 && moe_top_k <= moe_experts,
                "moe_top_k must be in [1, moe_experts=", moe_experts, "], got ", moe_top_k);
      break;
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
  ModelConfig config = read_json_file(path, [](const json& object) {
    ModelConfig c;
    fields_from_json(ModelConfig::fields(), object, c);
    return c;
  });
  for (const auto& assignment : overrides)
    apply_override(ModelConfig::fields(), assignment, config);
  config.validate();
  return config;
}

}  // namespace lol

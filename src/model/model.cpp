#include "model/model.h"

#include <cmath>

namespace lol {

LanguageModelImpl::LanguageModelImpl(const ModelConfig& config) : config_(config) {
  config_.validate();
  embed = register_module("embed", torch::nn::Embedding(config.vocab_size, config.d_model));
  prelude = register_module("prelude", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_prelude; ++i) prelude->push_back(Block(config));
  core_ = make_core(config, *this);
  coda = register_module("coda", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_coda; ++i) coda->push_back(Block(config));
  norm = register_module("norm", RMSNorm(config.d_model, config.norm_eps));
  if (!config.tie_embeddings)
    lm_head = register_module(
        "lm_head",
        torch::nn::Linear(torch::nn::LinearOptions(config.d_model, config.vocab_size).bias(false)));
}

std::vector<Block> LanguageModelImpl::all_blocks() const {
  std::vector<Block> out;
  for (size_t i = 0; i < prelude->size(); ++i) out.emplace_back(prelude->ptr<BlockImpl>(i));
  for (auto& b : core_->blocks()) out.push_back(b);
  for (size_t i = 0; i < coda->size(); ++i) out.emplace_back(coda->ptr<BlockImpl>(i));
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> LanguageModelImpl::named_state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : named_parameters(/*recurse=*/true))
    out.emplace_back(item.key(), item.value());
  for (const auto& item : named_buffers(/*recurse=*/true))
    out.emplace_back(item.key(), item.value());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

void LanguageModelImpl::initialize(uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto generator = at::detail::createCPUGenerator(seed);
  const double std_dev = config_.init_std;
  const double blocks =
      static_cast<double>(config_.n_prelude + config_.core_depth + config_.n_coda);
  const double residual_std = std_dev / std::sqrt(2.0 * blocks);
  // Draw on the CPU with our own generator so every device gets the same weights.
  auto normal_ = [&](torch::Tensor& t, double s) {
    auto values =
        at::normal(0.0, s, t.sizes(), generator, torch::TensorOptions().dtype(torch::kFloat32));
    t.copy_(values);
  };
  for (auto& [name, tensor] : named_state()) {
    const bool is_matrix = tensor.dim() >= 2 && name.find("film") == std::string::npos;
    const bool residual_out = name.find(".attn.o.weight") != std::string::npos ||
                              name.find(".down.weight") != std::string::npos;
    if (name.find("balance_bias") != std::string::npos || name.find(".beta") != std::string::npos) {
      tensor.zero_();
    } else if (name.find("norm.weight") != std::string::npos ||
               name.find(".gamma") != std::string::npos) {
      tensor.fill_(1.0);
    } else if (is_matrix || name == "router.depth_vectors") {
      normal_(tensor, residual_out ? residual_std : std_dev);
    }
  }
}

ForwardResult LanguageModelImpl::forward(const Layout& layout, const ForwardOptions& options) {
  ForwardResult result;
  auto rotary = Rotary::at_positions(layout.positions(), config_.head_dim(), config_.rope_theta);
  const int64_t n = layout.num_tokens();
  auto x = embed->forward(layout.tokens());  // (N, d)
  const auto& full = layout.document_plan();
  for (size_t i = 0; i < prelude->size(); ++i) {
    if (options.hook) options.hook("prelude_in", static_cast<int64_t>(i), x);
    x = run_blocks(x, {{Block(prelude->ptr<BlockImpl>(i)), 0, n}}, rotary, full, nullptr);
  }
  if (options.hook) options.hook("prelude_out", 0, x);
  x = core_->forward(x, layout, rotary, options, &result.routes);
  if (options.hook) options.hook("core_out", 0, x);
  for (size_t i = 0; i < coda->size(); ++i) {
    if (options.hook) options.hook("coda_in", static_cast<int64_t>(i), x);
    x = run_blocks(x, {{Block(coda->ptr<BlockImpl>(i)), 0, n}}, rotary, full, nullptr);
  }
  x = norm->forward(x);
  result.logits = torch::nn::functional::linear(x, lm_head ? lm_head->weight : embed->weight);
  return result;
}

}  // namespace lol

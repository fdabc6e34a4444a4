#include "model/model.h"

#include <unistd.h>

#include <cmath>

#include "model/stats.h"
#include "util/op_profile.h"

namespace lol {

namespace {
// Physical memory of this machine in bytes (0 when the system does not say).
double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}
}  // namespace

LanguageModelImpl::LanguageModelImpl(const ModelConfig& config) : config_(config) {
  config_.validate();
  // Parameters are made in fp32 on the CPU first (then moved): refuse what cannot fit there
  // with a message, rather than being killed by the kernel halfway through the allocation.
  const double bytes =
      4.0 * static_cast<double>(model_stats(config_, config_.max_seq_len).stored_params);
  const double memory = physical_memory_bytes();
  LOL_CHECK(memory <= 0 || bytes <= memory, "the config describes a model of ", bytes / 1e9,
            " GB of fp32 parameters, more than this machine's ", memory / 1e9, " GB of memory");
  embed = register_module("embed", torch::nn::Embedding(config.vocab_size, config.d_model));
  roles_.set("embed.weight", ParamRole::kEmbedding);
  prelude = register_module("prelude", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_prelude; ++i) {
    Block block(config);
    prelude->push_back(block);
    roles_.add("prelude." + std::to_string(i), block->roles);
  }
  core_ = make_core(config, *this, roles_);
  coda = register_module("coda", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_coda; ++i) {
    Block block(config);
    coda->push_back(block);
    roles_.add("coda." + std::to_string(i), block->roles);
  }
  norm = register_module("norm", RMSNorm(config.d_model, config.norm_eps));
  roles_.add("norm", norm->roles);
  if (!config.tie_embeddings) {
    lm_head = register_module(
        "lm_head",
        torch::nn::Linear(torch::nn::LinearOptions(config.d_model, config.vocab_size).bias(false)));
    roles_.set("lm_head.weight", ParamRole::kHead);
  }
  // Every parameter has a role, and every role a parameter: a module that registers a tensor
  // without saying what it is fails here, in every test that builds a model.
  const auto parameters = named_parameters(/*recurse=*/true);
  for (const auto& item : parameters)
    LOL_CHECK(roles_.all().count(item.key()), "parameter '", item.key(),
              "' has no role (model/param_role.h)");
  LOL_CHECK(roles_.all().size() == parameters.size(), "roles name ", roles_.all().size(),
            " parameters but the model has ", parameters.size());
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
  // Draw on the CPU with our own generator so every device gets the same weights; tensors in
  // name order, so the draws do not depend on registration order.
  auto normal_ = [&](torch::Tensor& t, double s) {
    t.copy_(
        at::normal(0.0, s, t.sizes(), generator, torch::TensorOptions().dtype(torch::kFloat32)));
  };
  for (auto& [name, tensor] : named_state()) {
    auto role = roles_.all().find(name);
    if (role == roles_.all().end()) {  // buffers: the balancing biases
      tensor.zero_();
      continue;
    }
    switch (role_traits(role->second).init) {
      case Init::kNormal:
        normal_(tensor, std_dev);
        break;
      case Init::kNormalResidual:
        normal_(tensor, std_dev / std::sqrt(2.0 * blocks));
        break;
      case Init::kOnes:
        tensor.fill_(1.0);
        break;
      case Init::kZeros:
        tensor.zero_();
        break;
    }
  }
}

ForwardResult LanguageModelImpl::forward(const Layout& layout, const ForwardOptions& options) {
  ForwardResult result;
  torch::Tensor x;
  Rotary rotary;
  const int64_t n = layout.num_tokens();
  {
    ProfileScope scope("embed");
    rotary = Rotary::at_positions(layout.positions(), config_.head_dim(), config_.rope_theta);
    x = embed->forward(layout.tokens());  // (N, d)
  }
  const auto& full = layout.document_plan();
  {
    ProfileScope scope("prelude");
    for (size_t i = 0; i < prelude->size(); ++i) {
      if (options.hook) options.hook("prelude_in", static_cast<int64_t>(i), x);
      x = run_blocks(x, {{Block(prelude->ptr<BlockImpl>(i)), 0, n}}, rotary, full, nullptr);
    }
  }
  if (options.hook) options.hook("prelude_out", 0, x);
  {
    ProfileScope scope("core");
    x = core_->forward(x, layout, rotary, options, &result.routes);
  }
  if (options.hook) options.hook("core_out", 0, x);
  {
    ProfileScope scope("coda");
    for (size_t i = 0; i < coda->size(); ++i) {
      if (options.hook) options.hook("coda_in", static_cast<int64_t>(i), x);
      x = run_blocks(x, {{Block(coda->ptr<BlockImpl>(i)), 0, n}}, rotary, full, nullptr);
    }
  }
  ProfileScope scope("head");
  x = norm->forward(x);
  result.logits = torch::nn::functional::linear(x, lm_head ? lm_head->weight : embed->weight);
  return result;
}

}  // namespace lol

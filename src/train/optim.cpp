#include "train/optim.h"

#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "util/error.h"
#include "util/op_profile.h"

namespace lol {

torch::Tensor newton_schulz(const torch::Tensor& g, int steps) {
  TORCH_CHECK(g.dim() == 2 || g.dim() == 3, "newton_schulz expects a matrix or a batch of them");
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  auto x = g.to(torch::kFloat32);
  if (g.dim() == 2) x = x.unsqueeze(0);
  const bool tall = x.size(1) > x.size(2);
  if (tall) x = x.transpose(1, 2);
  // Each matrix over its own Frobenius norm.
  x = x / x.flatten(1).norm(2, {1}, /*keepdim=*/true).clamp_min(1e-7).unsqueeze(2);
  for (int i = 0; i < steps; ++i) {
    auto gram = torch::bmm(x, x.transpose(1, 2));
    auto poly = torch::baddbmm(gram, gram, gram, /*beta=*/b, /*alpha=*/c);  // b A + c A^2
    x = torch::baddbmm(x, poly, x, /*beta=*/a);                             // a X + (bA + cA^2) X
  }
  if (tall) x = x.transpose(1, 2).contiguous();
  return g.dim() == 2 ? x.squeeze(0) : x;
}

AdamW::AdamW(NamedTensors params, std::vector<bool> decay, AdamWOptions options)
    : params_(std::move(params)), decay_(std::move(decay)), options_(options) {
  for (auto& [name, p] : params_) {
    m_.push_back(torch::zeros_like(p));
    v_.push_back(torch::zeros_like(p));
  }
  lr_scale_.resize(params_.size());
}

void AdamW::set_lr_scale(const std::string& name, const torch::Tensor& scale) {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].first != name) continue;
    const auto& p = params_[i].second;
    bool fits = scale.dim() <= p.dim();
    for (int64_t d = 1; fits && d <= scale.dim(); ++d)
      fits = scale.size(-d) == 1 || scale.size(-d) == p.size(-d);
    LOL_CHECK(fits, "AdamW: the lr scale of '", name, "' does not broadcast to its shape");
    lr_scale_[i] = scale.to(p.options());  // broadcast by the update's ops
    return;
  }
  fail("AdamW: no parameter named '", name, "' to scale the lr of");
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++step_;
  const double bc1 = 1 - std::pow(options_.beta1, static_cast<double>(step_));
  const double bc2 = 1 - std::pow(options_.beta2, static_cast<double>(step_));
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i].second;
    if (!p.grad().defined()) continue;
    auto g = p.grad();
    m_[i].mul_(options_.beta1).add_(g, 1 - options_.beta1);
    v_[i].mul_(options_.beta2).addcmul_(g, g, 1 - options_.beta2);
    const auto& scale = lr_scale_[i];
    if (decay_[i] && options_.weight_decay > 0) {
      if (scale.defined())
        p.mul_(scale * (-lr * options_.weight_decay) + 1);
      else
        p.mul_(1 - lr * options_.weight_decay);
    }
    auto denom = (v_[i] / bc2).sqrt_().add_(options_.eps);
    // m scale, not (m / denom) scale: exactly the plain update where the scale is 1.
    p.addcdiv_(scale.defined() ? m_[i] * scale : m_[i], denom, -lr / bc1);
  }
}

void AdamW::save_state(std::map<std::string, torch::Tensor>& out, const std::string& prefix) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    out[prefix + "m." + params_[i].first] = m_[i];
    out[prefix + "v." + params_[i].first] = v_[i];
  }
  out[prefix + "step"] = torch::tensor({step_}, torch::kInt64);
}

namespace {
void restore(torch::Tensor& target, const std::map<std::string, torch::Tensor>& in,
             const std::string& name) {
  auto it = in.find(name);
  LOL_CHECK(it != in.end(), "training state: missing tensor '", name, "'");
  LOL_CHECK(it->second.sizes() == target.sizes(), "training state: tensor '", name,
            "' has the wrong shape");
  target.copy_(it->second.to(target.scalar_type()));
}
}  // namespace

void AdamW::load_state(const std::map<std::string, torch::Tensor>& in, const std::string& prefix) {
  for (size_t i = 0; i < params_.size(); ++i) {
    restore(m_[i], in, prefix + "m." + params_[i].first);
    restore(v_[i], in, prefix + "v." + params_[i].first);
  }
  auto it = in.find(prefix + "step");
  LOL_CHECK(it != in.end(), "training state: missing tensor '", prefix, "step'");
  step_ = it->second.to(torch::kInt64).item<int64_t>();
}

Muon::Muon(NamedTensors params, MuonOptions options)
    : params_(std::move(params)), options_(options) {
  for (auto& [name, p] : params_) {
    LOL_CHECK(p.dim() == 2, "Muon takes matrices only; '", name, "' has ", p.dim(), " dims");
    momentum_.push_back(torch::zeros_like(p));
  }
}

double Muon::lr_scale(const torch::Tensor& param) {
  return 0.2 * std::sqrt(static_cast<double>(std::max(param.size(0), param.size(1))));
}

void Muon::step(double lr) {
  torch::NoGradGuard no_grad;
  const double mu = options_.momentum;
  // The updates, grouped by the shape Newton-Schulz works on (a tall matrix as its transpose),
  // dtype and device: one batched orthogonalisation per group (the library's experts, the
  // prelude's and coda's blocks share a few shapes), so the iterations are a few batched
  // products instead of three products per matrix each.
  std::map<std::tuple<int64_t, int64_t, int, std::string>, std::vector<size_t>> groups;
  std::vector<torch::Tensor> updates(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i].second;
    if (!p.grad().defined()) continue;
    auto g = p.grad();
    momentum_[i].lerp_(g, 1 - mu);
    updates[i] = options_.nesterov ? g.lerp(momentum_[i], mu) : momentum_[i];
    const bool tall = p.size(0) > p.size(1);
    groups[{tall ? p.size(1) : p.size(0), tall ? p.size(0) : p.size(1),
            static_cast<int>(p.scalar_type()), p.device().str()}]
        .push_back(i);
  }
  for (const auto& [shape, members] : groups) {
    std::vector<torch::Tensor> wide;  // each update as the wide matrix Newton-Schulz takes
    for (auto i : members) {
      const auto& u = updates[i];
      wide.push_back(u.size(0) > u.size(1) ? u.t() : u);
    }
    torch::Tensor ortho;
    {
      ProfileScope part("newton_schulz");
      ortho = newton_schulz(torch::stack(wide), options_.ns_steps);
    }
    for (size_t j = 0; j < members.size(); ++j) {
      auto& p = params_[members[j]].second;
      auto o = ortho[static_cast<int64_t>(j)];
      if (p.size(0) > p.size(1)) o = o.t();
      if (options_.weight_decay > 0) p.mul_(1 - lr * options_.weight_decay);
      p.add_(o.to(p.scalar_type()), -lr * lr_scale(p));
    }
  }
}

void Muon::save_state(std::map<std::string, torch::Tensor>& out, const std::string& prefix) const {
  for (size_t i = 0; i < params_.size(); ++i)
    out[prefix + "momentum." + params_[i].first] = momentum_[i];
}

void Muon::load_state(const std::map<std::string, torch::Tensor>& in, const std::string& prefix) {
  for (size_t i = 0; i < params_.size(); ++i)
    restore(momentum_[i], in, prefix + "momentum." + params_[i].first);
}

}  // namespace lol

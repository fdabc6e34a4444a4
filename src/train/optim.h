#pragma once
// Optimizers written against the published algorithms, with their state exposed as named
// tensors so a checkpoint can hold it and a resumed run continues bit for bit.
//
// Muon (Jordan et al. 2024; torch.optim.Muon with adjust_lr_fn="match_rms_adamw"):
//   B <- mu B + (1 - mu) G ;  U <- Nesterov ? lerp(G, B, mu) : B
//   O <- NewtonSchulz5(U / ||U||_F) with (a, b, c) = (3.4445, -4.7750, 2.0315), on the
//        transpose when rows > cols; the matrices of one shape orthogonalised as one batch
//   W <- W (1 - lr wd) - lr * 0.2 sqrt(max(rows, cols)) O
// AdamW (Loshchilov & Hutter): bias-corrected moments, decoupled decay W <- W (1 - lr wd).
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

namespace lol {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Newton-Schulz quintic orthogonalisation (fp32), `steps` iterations, of a matrix (rows,
// cols) or of each matrix of a batch (B, rows, cols) at once (batched products).
torch::Tensor newton_schulz(const torch::Tensor& g, int steps = 5);

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
};

struct MuonOptions {
  double momentum = 0.95, weight_decay = 0.0;
  bool nesterov = true;
  int ns_steps = 5;
};

class AdamW {
 public:
  // decay[i]: whether params[i] gets weight decay.
  AdamW(NamedTensors params, std::vector<bool> decay, AdamWOptions options);
  // An lr multiplier per element of parameter `name` (`scale` broadcasts to its shape): the
  // update and the decay of element x become lr scale[x] times what they were. Per tensor is
  // the rule elsewhere; a part of a tensor with a role of its own (the skip's row of the lol
  // router) needs this.
  void set_lr_scale(const std::string& name, const torch::Tensor& scale);
  void step(double lr);
  void save_state(std::map<std::string, torch::Tensor>& out, const std::string& prefix) const;
  void load_state(const std::map<std::string, torch::Tensor>& in, const std::string& prefix);
  int64_t steps() const { return step_; }

 private:
  NamedTensors params_;
  std::vector<bool> decay_;
  AdamWOptions options_;
  std::vector<torch::Tensor> m_, v_;
  std::vector<torch::Tensor> lr_scale_;  // undefined: 1
  int64_t step_ = 0;
};

class Muon {
 public:
  explicit Muon(NamedTensors params, MuonOptions options);
  void step(double lr);
  void save_state(std::map<std::string, torch::Tensor>& out, const std::string& prefix) const;
  void load_state(const std::map<std::string, torch::Tensor>& in, const std::string& prefix);
  // lr multiplier that matches AdamW's update RMS: 0.2 * sqrt(max(rows, cols)).
  static double lr_scale(const torch::Tensor& param);

 private:
  NamedTensors params_;
  MuonOptions options_;
  std::vector<torch::Tensor> momentum_;
};

}  // namespace lol

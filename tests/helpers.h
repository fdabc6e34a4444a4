#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>

#include "model/checkpoint.h"
#include "model/model.h"
#include "reference.h"
#include "util/error.h"
#include "util/files.h"
#include "util/runtime.h"

namespace lol::testing {

// The message of the lol::Error that `run()` throws, or "no error": tests of bad input check that
// it names the problem.
template <class F>
std::string error_message(F&& run) {
  try {
    run();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// An empty scratch directory for this process (removed first if a run left one), created.
inline std::string temp_dir(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/lol_test_" +
                          std::to_string(::getpid()) + "_" + name;
  remove_tree(dir);
  make_directories(dir);
  return dir;
}

// The JSON objects of a metrics.jsonl file (or any JSON-lines file), one per non-empty line.
inline std::vector<json> metrics_lines(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(read_text_file(path));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(json::parse(line));
  return out;
}

// The device the engine runs on in tests: LOL_TEST_DEVICE (cpu, cuda, cuda:N), default cpu.
// Reference paths (float64 forward, recomputing decoder) stay on the CPU; equivalence tests
// compare the engine on this device against them. Exact-identity tests (resume, determinism)
// pin the CPU, where the spec promises bit equality.
inline torch::Device device() {
  const char* name = std::getenv("LOL_TEST_DEVICE");
  torch::Device d(name && *name ? name : "cpu");
  if (d.is_cuda() && !torch::cuda::is_available()) {
    ADD_FAILURE() << "LOL_TEST_DEVICE=" << name << " but CUDA is not available";
    return torch::kCPU;
  }
  return d;
}

// Every family, for tests that must cover each (a new family is covered without editing them).
inline std::vector<Family> all_families() {
  return enum_values<Family>();
}
// Test-name suffix of a family parameter.
inline std::string family_test_name(const ::testing::TestParamInfo<Family>& info) {
  return enum_name(info.param);
}

inline ModelConfig tiny_config(Family family = Family::kLol) {
  ModelConfig c;
  c.family = family;
  c.vocab_size = 32;
  c.d_model = 16;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 24;
  c.n_prelude = 1;
  c.core_depth = 3;
  c.library_size = 3;
  c.n_coda = 1;
  c.window = 4;
  c.stride = 2;
  c.loop_blocks = 1;
  c.moe_experts = 3;
  c.moe_top_k = 2;
  c.max_seq_len = 64;
  return c;
}

// A model whose router is sharp enough that routes are decided by clear margins.
inline LanguageModel make_model(const ModelConfig& c, uint64_t seed, double router_scale = 30.0) {
  LanguageModel model(c);
  model->initialize(seed);
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : model->named_state()) {
    auto role = model->roles().all().find(name);
    if (role == model->roles().all().end()) continue;  // buffers
    switch (role->second) {
      case ParamRole::kRouter:
        t.mul_(router_scale);
        break;
      case ParamRole::kDepthVector:
        t.mul_(20.0);
        break;
      case ParamRole::kNormWeight:
      case ParamRole::kFilmScale:
      case ParamRole::kFilmShift: {
        // Move FiLM and norms off their identity start so tests see them act.
        auto gen = at::detail::createCPUGenerator(seed + 7);
        t.add_(at::normal(0.0, 0.2, t.sizes(), gen));
        break;
      }
      default:
        break;
    }
  }
  model->to(device());
  return model;
}

// A random small config of `family`: window, stride, library, depth, tying, GQA, stacks.
inline ModelConfig random_config(std::mt19937& rng, Family family) {
  auto pick = [&](std::vector<int64_t> options) {
    return options[std::uniform_int_distribution<size_t>(0, options.size() - 1)(rng)];
  };
  ModelConfig c = tiny_config(family);
  c.window = pick({2, 3, 4, 5});
  c.stride = pick({0, 1, 2, 3});
  c.library_size = pick({1, 2, 3, 4});
  c.core_depth = pick({1, 2, 3, 4});
  c.router_tied = pick({0, 1}) == 1;
  c.n_kv_heads = pick({1, 2, 4});
  c.tie_embeddings = pick({0, 1}) == 1;
  c.n_prelude = pick({0, 1});
  c.n_coda = pick({0, 1});
  if (family != Family::kLol) c.core_attention = enum_values<CoreAttention>()[pick({0, 1, 2})];
  if (family == Family::kLooped) {
    c.loop_blocks = pick({1, 2});
    c.core_depth = c.loop_blocks * pick({1, 2});
  }
  if (family == Family::kLol) c.router_skip = pick({0, 1}) == 1;
  if (c.router_skip && pick({0, 1}) == 1) c.router_skip_share = 0.25;
  if (c.router_skip) c.router_skip_renorm = pick({0, 1}) == 1;
  if (c.router_skip) c.router_skip_head = pick({0, 1}) == 1;
  if (c.router_skip_head && c.router_skip_renorm && c.router_skip_share > 0)
    c.router_skip_target = pick({0, 1}) == 1;
  if (c.router_skip) c.router_skip_window0 = pick({0, 1}) == 1;
  return c;
}

// `base` with `depth` routed depths over a library of `library` and the skip head: a skip choice
// left out of the gate whose probability is its own sigmoid (router_skip, _renorm, _head).
inline ModelConfig skip_head_config(ModelConfig base, int64_t depth, int64_t library) {
  base.core_depth = depth;
  base.library_size = library;
  base.router_skip = base.router_skip_renorm = base.router_skip_head = true;
  return base;
}

inline TensorMap weights_of(const LanguageModel& model) {
  TensorMap out;
  for (auto& [name, t] : model->named_state()) out[name] = t.detach().to(torch::kCPU).clone();
  return out;
}

inline std::vector<int64_t> random_tokens(std::mt19937& rng, int64_t n, int64_t vocab) {
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> out(n);
  for (auto& t : out) t = dist(rng);
  return out;
}

// `count` random documents of 1 to 13 tokens, two in three with a prompt window (sometimes
// longer than the document), about one token in six router-only.
inline std::vector<TokenSequence> random_documents(std::mt19937& rng, const ModelConfig& c,
                                                   int count) {
  std::vector<TokenSequence> docs;
  for (int i = 0; i < count; ++i) {
    TokenSequence d;
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 13)(rng);
    d.tokens = random_tokens(rng, n, c.vocab_size);
    d.prompt_len = std::uniform_int_distribution<int64_t>(0, 2)(rng) == 0
                       ? 0
                       : std::uniform_int_distribution<int64_t>(1, n + 1)(rng);
    for (int64_t p = 0; p < n; ++p)
      if (std::uniform_int_distribution<int>(0, 5)(rng) == 0) d.router_only.push_back(p);
    docs.push_back(d);
  }
  return docs;
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kCPU, torch::kFloat64) - b.to(torch::kCPU, torch::kFloat64))
      .abs()
      .max()
      .item<double>();
}

// For gradient tests: every input cast to `dtype` as a fresh leaf requiring gradients, then
// {f(leaves), d sum(f(leaves) * upstream) / d leaf for each leaf (zeros where none reached it)},
// on `threads` threads when given (the runtime's count is restored after).
inline std::vector<torch::Tensor> output_and_gradients(
    const std::vector<torch::Tensor>& inputs, torch::ScalarType dtype,
    const torch::Tensor& upstream,
    const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& f, int threads = 0) {
  std::vector<torch::Tensor> leaves;
  for (const auto& t : inputs) leaves.push_back(t.to(dtype).detach().clone().requires_grad_(true));
  const int before = at::get_num_threads();
  if (threads > 0) configure_runtime(threads);
  auto out = f(leaves);
  (out * upstream.to(dtype)).sum().backward();
  if (threads > 0) configure_runtime(before);
  std::vector<torch::Tensor> result{out.detach()};
  for (const auto& leaf : leaves)
    result.push_back(leaf.grad().defined() ? leaf.grad() : torch::zeros_like(leaf));
  return result;
}

}  // namespace lol::testing

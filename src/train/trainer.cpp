#include "train/trainer.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>

#include "model/checkpoint.h"
#include "model/router.h"
#include "model/stats.h"
#include "train/precision.h"
#include "train/sources.h"
#include "util/files.h"
#include "util/hash.h"
#include "util/op_profile.h"

namespace lol {

namespace fs = std::filesystem;

namespace {
// splitmix64 of (seed, step, micro-batch): unrelated streams for nearby arguments.
uint64_t noise_seed(uint64_t seed, int64_t step, int64_t micro) {
  return mix64(seed ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(step + 1)) ^
               (0xD1B54A32D192ED03ULL * static_cast<uint64_t>(micro + 1)));
}
}  // namespace

Trainer::Trainer(LanguageModel model, TrainConfig config, std::string run_dir, torch::Device device,
                 std::shared_ptr<Distributed> dist)
    : model_(std::move(model)),
      config_(std::move(config)),
      run_dir_(std::move(run_dir)),
      device_(device),
      dist_(std::move(dist)) {
  config_.validate();
  config_.validate_for(model_->config());
  LOL_CHECK(config_.grad_accum % world() == 0, "grad_accum (", config_.grad_accum,
            ", micro-batches per step over all workers) must be a multiple of the number of "
            "workers, ",
            world());
  model_->to(device_);
  if (dist_) {  // every rank starts from rank 0's parameters and balance biases
    std::vector<torch::Tensor> state;
    for (auto& [name, t] : model_->named_state()) state.push_back(t.detach());
    torch::NoGradGuard no_grad;
    dist_->broadcast(state);
    grad_sync_ = std::make_unique<GradientSync>(
        *dist_, model_->parameters(), static_cast<int64_t>(config_.bucket_mb * (1 << 20)));
  }
  // The run's randomness (router noise) comes from the CPU generator, which LibTorch seeds
  // differently in every process: seed it from the config so the same command gives the same
  // run (a resume then restores the saved state over this).
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_current_seed(config_.seed);
  }
  source_ = open_source(config_.data, config_.seed, 0);
  check_source_vocab(*source_, config_.data, model_->config().vocab_size);
  packer_ = std::make_unique<Packer>(*source_, config_.batch_rows, config_.seq_len);
  build_optimizers();
  if (writes()) {
    make_directories(run_dir_);
    write_file_atomic(run_dir_ + "/train_config.json", config_.to_json().dump(2) + "\n");
    // A text corpus's tokenizer goes with the run, so that its checkpoints read and write text.
    if (const auto tokenizer = data_tokenizer_file(config_.data))
      write_file_atomic(run_dir_ + "/tokenizer.json", read_text_file(*tokenizer));
  }
}

void Trainer::build_optimizers() {
  // Each parameter's role (tagged where its module registered it) says which optimizer takes
  // it and whether it decays.
  NamedTensors muon_params, adam_params;
  std::vector<bool> decay;
  const auto& roles = model_->roles().all();
  for (const auto& item : model_->named_parameters(true)) {
    const auto traits = role_traits(roles.at(item.key()));
    if (config_.optimizer == Optimizer::kMuon && traits.muon) {
      muon_params.emplace_back(item.key(), item.value());
    } else {
      adam_params.emplace_back(item.key(), item.value());
      decay.push_back(traits.decay);
    }
  }
  adamw_ = std::make_unique<AdamW>(
      adam_params, decay,
      AdamWOptions{config_.beta1, config_.beta2, config_.adam_eps, config_.weight_decay});
  if (config_.skip_lr_scale != 1.0)
    adamw_->set_lr_scale("router.weight", skip_row_scale(model_->config(), config_.skip_lr_scale));
  if (!muon_params.empty())
    muon_ = std::make_unique<Muon>(
        muon_params, MuonOptions{config_.muon_momentum, config_.weight_decay, true, 5});
}

StepMetrics Trainer::train_step() {
  const auto t0 = std::chrono::steady_clock::now();
  StepMetrics m;
  const double comm_seconds0 = dist_ ? dist_->seconds() : 0;
  const int64_t comm_bytes0 = dist_ ? dist_->bytes() : 0;
  const auto& mc = model_->config();
  m.depth = grown_depth(config_, mc.core_depth, step_);
  m.lr = learning_rate(config_, step_);
  model_->train();
  // Read every micro-batch first so the loss is a mean over all of the step's target tokens.
  // Every rank packs the whole stream and keeps micro-batches i with i % world == rank, so the
  // data position is one number for the run, whatever its world size.
  std::vector<TrainBatch> micro;
  std::vector<int64_t> micro_index;
  int64_t loss_tokens = 0, tokens = 0;
  std::optional<ProfileScope> scope(std::in_place, "data");
  for (int64_t i = 0; i < config_.grad_accum; ++i) {
    auto b = packer_->next();
    if (i % world() != rank()) continue;
    loss_tokens += b.loss_tokens;
    tokens += b.tokens;
    micro.push_back(std::move(b));
    micro_index.push_back(i);
  }
  if (dist_) {
    const auto total = dist_->sum({static_cast<double>(loss_tokens), static_cast<double>(tokens)});
    loss_tokens = static_cast<int64_t>(total[0]);
    tokens = static_cast<int64_t>(total[1]);
  }
  // Gradients are reset to none, not to zero: a parameter the step does not reach (an expert no
  // window chose, FiLM rows beyond the grown depth) then has no gradient, and the optimizers
  // leave it and its moments alone. Zeroed gradients would make that depend on whether the
  // parameter was reached at some earlier step of this process, which a resumed process cannot
  // know (LibTorch 1.13 zeroes by default, 2.x sets to none).
  scope.emplace("zero_grad");
  model_->zero_grad(/*set_to_none=*/true);
  scope.reset();
  BalanceLoads loads;
  double loss_sum = 0;
  ForwardOptions options;
  options.executed_depth = m.depth;
  options.router_noise = true;
  for (size_t k = 0; k < micro.size(); ++k) {
    auto& b = micro[k];
    // Router noise of micro-batch i of step s comes from a generator seeded by (seed, s, i):
    // the same draws whichever rank runs it.
    {
      auto generator = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_current_seed(noise_seed(config_.seed, step_, micro_index[k]));
    }
    scope.emplace("data");
    Layout layout(b.batch, mc.vocab_size, device_);
    scope.reset();
    ForwardResult result;
    {
      AutocastGuard autocast(device_, uses_bf16_autocast(config_.precision, device_));
      result = model_->forward(layout, options);
    }
    scope.emplace("loss");
    auto loss = torch::nn::functional::cross_entropy(
        result.logits.to(torch::kFloat32), b.targets.to(device_),
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum));
    loss_sum += loss.item<double>();
    scope.emplace("backward");
    // The last micro-batch's backward pass starts the all-reduce of each bucket of gradients as
    // soon as it is complete.
    if (grad_sync_ && k + 1 == micro.size()) grad_sync_->arm();
    // router_skip_target: each routed depth's carrier (value 0) brings the skip head's target
    // into the backward pass, scaled as the loss is.
    auto objective = loss;
    for (const auto& route : result.routes)
      if (route.target_carrier.defined()) objective = objective + route.target_carrier;
    (objective / static_cast<double>(std::max<int64_t>(1, loss_tokens))).backward();
    scope.emplace("balance");
    model_->core().count_loads(result.routes, loads);
    scope.reset();
  }
  if (dist_) {
    scope.emplace("comm");
    grad_sync_->finish();
    loss_sum = dist_->sum({loss_sum})[0];
    // Balance loads and router agreement over every rank's windows (SPEC 1.7).
    std::vector<double> flat;
    for (const auto& l : loads.loads) flat.insert(flat.end(), l.begin(), l.end());
    flat.insert(flat.end(), loads.counted.begin(), loads.counted.end());
    flat.insert(flat.end(), loads.skipped.begin(), loads.skipped.end());
    flat.push_back(static_cast<double>(loads.agreements));
    flat.push_back(static_cast<double>(loads.decisions));
    flat = dist_->sum(flat);
    size_t at = 0;
    for (auto& l : loads.loads)
      for (auto& x : l) x = flat[at++];
    for (auto& x : loads.counted) x = flat[at++];
    for (auto& x : loads.skipped) x = flat[at++];
    loads.agreements = static_cast<int64_t>(flat[at++]);
    loads.decisions = static_cast<int64_t>(flat[at++]);
  }
  m.loss = loss_sum / static_cast<double>(std::max<int64_t>(1, loss_tokens));
  scope.emplace("optimizer");
  std::vector<torch::Tensor> params;
  for (auto& p : model_->parameters())
    if (p.grad().defined()) params.push_back(p);
  {
    ProfileScope part("clip");
    m.grad_norm = torch::nn::utils::clip_grad_norm_(
        params,
        config_.grad_clip > 0 ? config_.grad_clip : std::numeric_limits<double>::infinity());
  }
  {
    ProfileScope part("adamw");
    adamw_->step(m.lr);
  }
  if (muon_) {
    ProfileScope part("muon");  // its Newton-Schulz iterations are a part of their own
    muon_->step(m.lr);
  }
  scope.emplace("balance");
  apply_balance(model_->core(), loads, mc.balance_rate, mc.router_skip_share);
  ++step_;
  m.step = step_;
  total_flops_ +=
      model_stats(mc, config_.seq_len, m.depth).train_flops_per_token * static_cast<double>(tokens);
  m.total_flops = total_flops_;
  if (!loads.loads.empty()) {
    auto summary = summarize_loads(loads);
    m.load = std::move(summary.shares);
    m.load_entropy = summary.entropy;
    m.load_counts_by_router = std::move(summary.by_router);
    m.load_entropy_min = summary.entropy_min;
    auto biases = torch::cat(model_->core().balance_biases()).to(torch::kCPU);
    m.bias_min = biases.min().item<double>();
    m.bias_max = biases.max().item<double>();
    m.agreement = loads.decisions
                      ? static_cast<double>(loads.agreements) / static_cast<double>(loads.decisions)
                      : 1.0;
    if (!loads.counted.empty()) m.skip_share = skip_share(loads);
    const auto skips = model_->core().skip_biases();
    if (!skips.empty()) {
      auto values = torch::cat(skips).to(torch::kCPU, torch::kFloat64).contiguous();
      m.skip_bias.assign(values.data_ptr<double>(), values.data_ptr<double>() + values.numel());
    }
  }
  scope.reset();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.tokens = tokens;
  m.seconds = seconds;
  m.tokens_per_s = static_cast<double>(tokens) / seconds;
  if (dist_) {
    m.comm_seconds = dist_->seconds() - comm_seconds0;
    m.comm_bytes = dist_->bytes() - comm_bytes0;
    m.comm_buckets = grad_sync_->buckets();
    m.comm_overlapped = grad_sync_->overlapped();
  }
  return m;
}

EvalResult Trainer::evaluate() {
  torch::NoGradGuard no_grad;
  model_->eval();
  // A fresh held-out stream each time: every evaluation sees the same documents.
  auto source = config_.eval_data.empty() ? open_source(config_.data, config_.seed, 1)
                                          : open_source(config_.eval_data, config_.seed, 1);
  Packer packer(*source, config_.batch_rows, config_.seq_len);
  double loss_sum = 0;
  int64_t count = 0, correct = 0;
  const auto& mc = model_->config();
  ForwardOptions options;
  options.executed_depth = grown_depth(config_, mc.core_depth, std::max<int64_t>(0, step_ - 1));
  BalanceLoads loads;  // for the skip's share
  for (int64_t i = 0; i < config_.eval_batches; ++i) {
    auto b = packer.next();
    Layout layout(b.batch, mc.vocab_size, device_);
    torch::Tensor logits;
    {
      AutocastGuard autocast(device_, uses_bf16_autocast(config_.precision, device_));
      auto result = model_->forward(layout, options);
      logits = result.logits.to(torch::kFloat32);
      if (mc.router_skip) model_->core().count_loads(result.routes, loads);
    }
    auto targets = b.targets.to(device_);
    loss_sum += torch::nn::functional::cross_entropy(
                    logits, targets,
                    torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(
                        torch::kSum))
                    .item<double>();
    correct +=
        (logits.argmax(-1) == targets).sum().item<int64_t>();  // ignored targets (-100) never match
    count += b.loss_tokens;
  }
  model_->train();
  const double n = static_cast<double>(std::max<int64_t>(1, count));
  EvalResult out{loss_sum / n, static_cast<double>(correct) / n, std::nullopt};
  if (!loads.counted.empty()) out.skip_share = skip_share(loads);
  return out;
}

void Trainer::run(const std::function<bool()>& should_stop,
                  const std::function<void(const StepMetrics&)>& on_step) {
  const std::string metrics_path = run_dir_ + "/metrics.jsonl";
  std::ofstream metrics;
  if (writes()) {
    metrics.open(metrics_path, std::ios::app);
    LOL_CHECK(metrics.good(), "cannot open ", metrics_path);
  }
  // A line of metrics.jsonl every log_every steps, and one ending at every evaluation and every
  // checkpoint, so a resumed run's metrics are cut exactly at its checkpoint's step.
  MetricsWindow window;
  while (step_ < config_.steps) {
    auto m = train_step();
    const bool last = step_ == config_.steps;
    const bool eval = (config_.eval_every > 0 && step_ % config_.eval_every == 0) || last;
    if (writes() && eval) {
      const auto result = evaluate();
      m.eval_loss = result.loss;
      m.eval_accuracy = result.accuracy;
      m.eval_skip_share = result.skip_share;
    }
    if (on_step) on_step(m);
    // Every rank stops at the same step when any was asked to.
    bool stop = should_stop && should_stop();
    if (dist_) stop = dist_->sum({stop ? 1.0 : 0.0})[0] > 0;
    const bool save =
        (config_.checkpoint_every > 0 && step_ % config_.checkpoint_every == 0) || last || stop;
    if (writes()) {
      window.add(m);
      if (step_ % config_.log_every == 0 || eval || save)
        metrics << window.take().to_json().dump() << "\n" << std::flush;
    }
    if (save) save_checkpoint();
    if (stop) break;
  }
}

std::string Trainer::save_checkpoint() {
  const std::string root = run_dir_ + "/checkpoints";
  const std::string final_dir = root + "/" + checkpoint_name(step_);
  if (!writes()) return final_dir;  // rank 0 writes it
  const std::string tmp_dir = final_dir + ".tmp";
  remove_tree(tmp_dir);
  save_model(model_, tmp_dir);
  TensorMap state;
  adamw_->save_state(state, "adamw.");
  if (muon_) muon_->save_state(state, "muon.");
  state["rng.cpu"] = at::detail::getDefaultCPUGenerator().get_state();
  write_safetensors(tmp_dir + "/train_state.safetensors", state);
  const TrainState meta{step_, packer_->position(), total_flops_, config_};
  write_file_atomic(tmp_dir + "/train_state.json", meta.to_json().dump(2) + "\n");
  // The whole directory appears at once: a reader sees the old checkpoint or the new one.
  remove_tree(final_dir);
  fs::rename(tmp_dir, final_dir);
  // Keep the newest keep_checkpoints.
  const auto existing = checkpoint_names(run_dir_);
  for (size_t i = 0; i + config_.keep_checkpoints < existing.size(); ++i)
    remove_tree(root + "/" + existing[i]);
  return final_dir;
}

json TrainState::to_json() const {
  return {{"step", step},
          {"data_position", data_position},
          {"total_flops", total_flops},
          {"train_config", config.to_json()}};
}

TrainState TrainState::from_json(const json& object) {
  LOL_CHECK(object.is_object(), "a training state must be a JSON object");
  for (const char* key : {"step", "data_position", "train_config"})
    LOL_CHECK(object.contains(key), "the training state has no \"", key, "\"");
  TrainState state;
  const auto& step = object["step"];
  LOL_CHECK(step.is_number_integer() && step.get<int64_t>() >= 0,
            "\"step\" must be an integer >= 0, got ", json_text(step));
  state.step = step.get<int64_t>();
  state.data_position = object["data_position"];
  if (object.contains("total_flops")) {
    LOL_CHECK(object["total_flops"].is_number(), "\"total_flops\" must be a number, got ",
              json_text(object["total_flops"]));
    state.total_flops = object["total_flops"].get<double>();
  }
  state.config = TrainConfig::from_json(object["train_config"]);
  return state;
}

namespace {
TrainState read_train_state(const std::string& dir) {
  const std::string path = dir + "/train_state.json";
  LOL_CHECK(path_exists(path), dir,
            ": no train_state.json (a model directory, not a training checkpoint?)");
  return read_json_file(path, TrainState::from_json);
}
}  // namespace

std::unique_ptr<Trainer> Trainer::resume(const std::string& run_dir, torch::Device device,
                                         std::shared_ptr<Distributed> dist) {
  const std::string dir = latest_checkpoint(run_dir);
  const auto meta = read_train_state(dir);
  auto model = load_model(dir, device);
  auto trainer = std::make_unique<Trainer>(model, meta.config, run_dir, device, std::move(dist));
  trainer->load_checkpoint(dir, meta);
  return trainer;
}

void Trainer::load_checkpoint(const std::string& dir, const TrainState& meta) {
  auto state = read_safetensors(dir + "/train_state.safetensors");
  adamw_->load_state(state, "adamw.");
  if (muon_) muon_->load_state(state, "muon.");
  auto rng = state.find("rng.cpu");
  LOL_CHECK(rng != state.end(), dir, ": training state has no RNG state");
  auto generator = at::detail::getDefaultCPUGenerator();
  const auto current = generator.get_state();
  LOL_CHECK(
      rng->second.scalar_type() == current.scalar_type() && rng->second.sizes() == current.sizes(),
      dir, ": the saved RNG state has the wrong dtype or size");
  generator.set_state(rng->second);
  step_ = meta.step;
  total_flops_ = meta.total_flops;
  try {
    packer_->seek(meta.data_position);
  } catch (const Error& e) {
    fail(dir, "/train_state.json: ", e.what());
  }
  // Metrics past this checkpoint belong to a run that is being replaced.
  const std::string metrics_path = run_dir_ + "/metrics.jsonl";
  if (writes() && path_exists(metrics_path)) {
    std::ifstream in(metrics_path);
    std::string line, kept;
    while (std::getline(in, line)) {
      json j = json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
          j["step"].get<int64_t>() <= step_)
        kept += line + "\n";
    }
    write_file_atomic(metrics_path, kept);
  }
}

}  // namespace lol

#include "peer.h"

#include <unistd.h>

#include <algorithm>

#include "bench_util.h"
#include "util/error.h"
#include "util/fields.h"
#include "util/files.h"

namespace lol::bench {
namespace {

// The model shape in the peer's terms (its bench_shape.json): the keys it reads, with this
// engine's values, and the batch.
json peer_shape(const ModelConfig& config, int64_t batch, int64_t seq) {
  const json c = config.to_json();
  json shape = json::object();
  for (const char* key :
       {"vocab_size", "d_model", "n_heads", "n_kv_heads", "ffn_hidden", "n_prelude", "core_depth",
        "library_size", "n_coda", "window", "stride", "router_tied", "rope_theta", "norm_eps",
        "tie_embeddings", "router_noise_std", "balance_rate"})
    shape[key] = c.at(key);
  shape["batch"] = batch;
  shape["seq"] = seq;
  return shape;
}

}  // namespace

std::vector<std::string> peer_families(const std::vector<std::string>& families) {
  std::vector<std::string> out;
  for (const auto& f : families)
    if ((f == "lol" || f == "dense") && std::find(out.begin(), out.end(), f) == out.end())
      out.push_back(f);
  return out;
}

PeerRun run_peer(const PeerOptions& o, const ModelConfig& config,
                 const std::vector<std::string>& families, int64_t batch, int64_t seq, int warmup,
                 int steps, int threads) {
  LOL_CHECK(path_exists(o.script) && !is_directory(o.script), "--peer: no such file '", o.script,
            "' (the PyTorch peer is ../shared/peer/lol_torch.py)");
  const std::string dir = "/tmp/lol-bench-peer-" + std::to_string(::getpid());
  make_directories(dir);
  const std::string shape_path = dir + "/shape.json", result_path = dir + "/result.json";
  write_file_atomic(shape_path, peer_shape(config, batch, seq).dump(1));
  std::string names;
  for (const auto& f : families) names += (names.empty() ? "" : ",") + f;
  const std::string command =
      shell_quote(o.python) + " " + shell_quote(o.script) + " --bench --env tuned_malloc" +
      " --threads " + std::to_string(threads) + " --config " + shell_quote(shape_path) +
      " --batch " + std::to_string(batch) + " --seq " + std::to_string(seq) + " --warmup " +
      std::to_string(warmup) + " --steps " + std::to_string(steps) + " --families " + names +
      " --json " + shell_quote(result_path) + " 1>&2";
  const int rc = run_command(command);
  if (rc != 0) {
    remove_tree(dir);
    LOL_CHECK(run_command(shell_quote(o.python) + " -c 'import torch' >/dev/null 2>&1") == 0,
              "--peer: ", o.python,
              " cannot import torch (Debian: bash scripts/setup.sh --peer, which installs "
              "python3-torch; or name another interpreter with --peer-python)");
    fail("--peer: ", o.script, " failed (exit status ", rc, "); its output is above");
  }
  json result;
  try {
    result = json::parse(read_text_file(result_path));
    remove_tree(dir);
  } catch (const std::exception& e) {
    remove_tree(dir);
    fail("--peer: ", o.script, " wrote no readable result: ", e.what());
  }
  PeerRun run;
  try {
    const json& r = result.at("runs").at(0);
    for (const auto& f : families) {
      auto seconds = r.at("families").at(f).at("times").get<std::vector<double>>();
      LOL_CHECK(!seconds.empty() && *std::min_element(seconds.begin(), seconds.end()) > 0,
                "--peer: ", o.script, " timed no step of ", f);
      run.seconds[f] = std::move(seconds);
    }
  } catch (const json::exception& e) {
    fail("--peer: ", o.script, "'s result lacks a field the bench reads: ", e.what());
  }
  return run;
}

}  // namespace lol::bench

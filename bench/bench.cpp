// lol bench: llama-bench style measurements, separate from the tests. Comma-separated options
// expand into all combinations; each is repeated and reported with its spread, and the header
// stamps the commit, the BLAS, the thread counts (and, for the model suite, the machine's
// measured matmul peak in the precision used). Suites: model (training), decode (inference), tasks
// (data), analysis (routes), serve (HTTP).
#include "../tools/commands.h"
#include "against.h"
#include "bench_util.h"
#include "suites.h"
#include "train/precision.h"
#include "util/error.h"
#include "util/runtime.h"
#ifdef LOL_HAVE_HTTPLIB
#include "serve/engine.h"
#endif

namespace lol::cli {
namespace {

std::vector<int64_t> positive_list(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  for (const auto& item : bench::split(text)) {
    const int64_t v = parse_int_list(flag, item)[0];
    LOL_CHECK(v > 0, flag, ": ", v, " is not a positive number");
    out.push_back(v);
  }
  LOL_CHECK(!out.empty(), flag, ": give at least one value");
  return out;
}

}  // namespace

void add_bench_command(CLI::App& app, std::vector<std::pair<CLI::App*, Runner>>& commands) {
  auto* cmd = app.add_subcommand("bench", "throughput, latency and FLOPs utilisation (not a test)");
  struct Opts {
    std::string suite = "model", preset = "maze-cpu", families = "dense,lol", seq_lens = "512",
                modes = "train,step";
    std::string contexts = "128,512,1024,4096", batches = "1,8,32", output = "md",
                precision = "auto";
    std::vector<std::string> overrides;
    int64_t batch = 8, puzzles = 200, requests = 64, prompt_len = 32, max_tokens = 32,
            parallel = 16;
    std::string clients = "1,4,16", workers = "1,2,4", tokenizer, input, peer,
                peer_python = bench::PeerOptions{}.python, against;
    int reps = 5, warmup = 1, steps = 16, rounds = 1;
    bool profile = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--suite", o->suite,
                  "model (training throughput), decode (inference), tasks (data generation), "
                  "analysis (route extraction), serve (HTTP server under load) or dp "
                  "(data-parallel training), tokenizer (BPE encode/decode)")
      ->capture_default_str()
      ->check(CLI::IsMember({"model", "decode", "tasks", "analysis", "serve", "dp", "tokenizer"}));
  cmd->add_option("--preset", o->preset, "model shape (preset name or config file)")
      ->capture_default_str();
  cmd->add_option("--set", o->overrides, "override a config key of the preset");
  cmd->add_option("--families", o->families,
                  "comma list: lol, dense, dense-sliding, dense-strided, looped, moe")
      ->capture_default_str();
  cmd->add_option("--seq-len", o->seq_lens, "model: comma list of sequence lengths")
      ->capture_default_str();
  cmd->add_option(
         "--mode", o->modes,
         "model: comma list of train (forward+backward), step (whole optimizer step), forward")
      ->capture_default_str();
  cmd->add_option("--batch", o->batch, "model: sequences per step; analysis: per forward pass")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--contexts", o->contexts, "decode: comma list of context lengths")
      ->capture_default_str();
  cmd->add_option("--batches", o->batches, "decode: comma list of batch sizes")
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "decode: timed steps per measurement")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--puzzles", o->puzzles,
                  "tasks: puzzles per repetition; analysis: puzzles (default 20, x5 strategies)")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--clients", o->clients, "serve: comma list of concurrent clients")
      ->capture_default_str();
  cmd->add_option("--requests", o->requests, "serve: requests per measurement")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--prompt-len", o->prompt_len, "serve: prompt tokens per request")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--max-tokens", o->max_tokens, "serve: tokens generated per request")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--parallel", o->parallel, "serve: the server's --parallel")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--workers", o->workers, "dp: comma list of local worker counts")
      ->capture_default_str();
  cmd->add_option("--tokenizer", o->tokenizer, "tokenizer: the tokenizer.json measured");
  cmd->add_option("--input", o->input, "tokenizer: text tree INPUT/<label>/*.txt");
  cmd->add_option("--reps", o->reps, "timed repetitions")
      ->capture_default_str()
      ->check(at_least(1));
  cmd->add_option("--warmup", o->warmup, "untimed repetitions first")
      ->capture_default_str()
      ->check(at_least(0));
  cmd->add_option("--precision", o->precision,
                  "model: auto (bf16 autocast on CUDA, fp32 elsewhere), fp32 or bf16")
      ->capture_default_str();
  cmd->add_option("-o,--output", o->output, "md | csv | json")
      ->capture_default_str()
      ->check(CLI::IsMember({"md", "csv", "json"}));
  cmd->add_flag("--profile", o->profile,
                "model: then where each row's step goes, by phase and part, forward and backward "
                "(--reps more repetitions under LibTorch's operator observers); decode: the same "
                "for each batch row's step (--steps more steps)");
  cmd->add_option("--rounds", o->rounds,
                  "model: measure every row this many times, one round after another (2 with "
                  "--peer); decode: the batch rows, each round with its own bandwidth for the "
                  "floor, then medians over the rounds; --against: rounds of the two builds (4)")
      ->check(at_least(1));
  cmd->add_option("--against", o->against,
                  "another build's lol: run this suite with both, alternating over --rounds, and "
                  "print each row's median tokens/s from each and their ratio (an A/B in one "
                  "sitting)");
  cmd->add_option("--peer", o->peer,
                  "model: after each round, time the PyTorch peer (../shared/peer/lol_torch.py) "
                  "on the same shape, threads and batch; rows gain 'x peer'");
  cmd->add_option("--peer-python", o->peer_python, "model: the interpreter that runs --peer")
      ->capture_default_str();
  commands.emplace_back(cmd, [o, cmd] {
    LOL_CHECK(!o->profile || o->suite == "model" || o->suite == "decode",
              "--profile: only the model and decode suites have a profile, not --suite ", o->suite);
    LOL_CHECK(o->peer.empty() || o->suite == "model",
              "--peer: only the model suite runs the peer, not --suite ", o->suite);
    if (!o->against.empty()) {
      LOL_CHECK(o->peer.empty() && !o->profile,
                "--against: one comparison at a time, without --peer or --profile");
      LOL_CHECK(o->suite != "tasks" && o->suite != "tokenizer", "--against: --suite ", o->suite,
                " has no tokens/s rows to compare");
      bench::bench_against({o->against, cmd->count("--rounds") ? o->rounds : 4, o->output});
      return;
    }
    LOL_CHECK(cmd->count("--rounds") == 0 || o->suite == "model" || o->suite == "decode",
              "--rounds: only the model and decode suites (or --against) have rounds, not --suite ",
              o->suite);
    if (o->suite == "tasks") {
      bench::bench_tasks(o->puzzles, o->reps, o->output);
      return;
    }
    if (o->suite == "tokenizer") {
      LOL_CHECK(!o->tokenizer.empty() && !o->input.empty(),
                "--suite tokenizer needs --tokenizer FILE and --input DIR");
      bench::TokenizerBenchOptions t;
      t.tokenizer = o->tokenizer;
      t.input = o->input;
      t.reps = o->reps;
      t.output = o->output;
      bench::bench_tokenizer(t);
      return;
    }
    if (o->suite == "dp") {
      bench::DpBenchOptions d;
      d.preset = o->preset;
      d.overrides = o->overrides;
      d.workers = positive_list("--workers", o->workers);
      d.steps = std::max(3, o->steps / 4);
      d.seq_len = positive_list("--seq-len", o->seq_lens).front();
      d.batch = std::max<int64_t>(1, o->batch / 2);
      d.grad_accum = 4;
      for (auto w : d.workers)
        LOL_CHECK(d.grad_accum % w == 0, "--workers: ", w, " does not divide the ", d.grad_accum,
                  " micro-batches of a step");
      d.threads_per_worker = global_options().threads;  // lol --threads N bench: N per worker
      d.output = o->output;
      bench::bench_dp(d);
      return;
    }
    auto base = load_model_config(o->preset, o->overrides);
    auto families = bench::split(o->families);
    LOL_CHECK(!families.empty(), "--families: give at least one family");
    for (const auto& f : families) bench::family_config(base, f);  // reject bad names before timing
    if (o->suite == "analysis") {
      bench::AnalysisBenchOptions a;
      a.base = base;
      a.puzzles = cmd->count("--puzzles") ? o->puzzles : 20;  // five sequences each
      a.batch = o->batch;
      a.reps = o->reps;
      a.warmup = o->warmup;
      a.output = o->output;
      a.device = selected_device();
      bench::bench_analysis(a);
      return;
    }
    if (o->suite == "serve") {
#ifdef LOL_HAVE_HTTPLIB
      bench::ServeBenchOptions sv;
      sv.base = base;
      sv.clients = positive_list("--clients", o->clients);
      sv.requests = o->requests;
      sv.prompt_len = o->prompt_len;
      sv.max_tokens = o->max_tokens;
      sv.parallel = o->parallel;
      sv.output = o->output;
      sv.device = selected_device();
      // Both the server and generate() run with the threads `lol serve` takes by default.
      if (global_options().threads == 0)
        configure_runtime(serve::default_serving_threads(sv.device));
      bench::bench_serve(sv);
      return;
#else
      fail("--suite serve: this build has no HTTP server (cpp-httplib was not found)");
#endif
    }
    if (o->suite == "decode") {
      bench::DecodeBenchOptions d;
      d.base = base;
      d.families = families;
      d.contexts = positive_list("--contexts", o->contexts);
      d.batches = positive_list("--batches", o->batches);
      d.steps = o->steps;
      d.reps = std::max(1, std::min(o->reps, 3));
      d.output = o->output;
      d.device = selected_device();
      d.profile = o->profile;
      d.rounds = o->rounds;
      bench::bench_decode(d);
      return;
    }
    bench::ModelBenchOptions m;
    m.base = base;
    m.preset_name = o->preset;
    m.families = families;
    m.modes = bench::split(o->modes);
    for (const auto& mode : m.modes)
      LOL_CHECK(mode == "train" || mode == "forward" || mode == "step", "--mode: unknown mode '",
                mode, "'");
    LOL_CHECK(!m.modes.empty(), "--mode: give at least one mode");
    m.seq_lens = positive_list("--seq-len", o->seq_lens);
    m.batch = o->batch;
    m.reps = o->reps;
    m.warmup = o->warmup;
    m.output = o->output;
    m.profile = o->profile;
    if (!o->peer.empty()) {
      m.peer = bench::PeerOptions{o->peer, o->peer_python};
      LOL_CHECK(!bench::peer_families(families).empty(),
                "--peer: the peer implements lol and dense; --families has neither");
    }
    m.rounds = cmd->count("--rounds") ? o->rounds : (m.peer ? 2 : 1);
    m.precision = parse_enum<Precision>(o->precision, "--precision");
    m.device = selected_device();
    bench::bench_model(m);
  });
}

}  // namespace lol::cli

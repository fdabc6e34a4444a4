// Data parallelism end to end through the lol binary: N workers over a FileStore give the
// parameters one worker gives with the same global batch, and a run resumes at another number
// of workers exactly where it stood.
#include "train/distributed.h"

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "helpers.h"
#include "util/files.h"
#include "util/json.h"

namespace lol {
namespace {

// Runs `lol ARGS` (quiet); the exit status.
int lol_command(const std::string& args) {
  const std::string command = std::string(LOL_BINARY) + " " + args + " >/dev/null 2>&1";
  return std::system(command.c_str());
}

double max_param_diff(const std::string& a, const std::string& b) {
  auto ma = load_model(a), mb = load_model(b);
  auto wa = testing::weights_of(ma), wb = testing::weights_of(mb);
  double worst = 0;
  for (const auto& [name, t] : wa) worst = std::max(worst, testing::max_abs_diff(t, wb.at(name)));
  return worst;
}

struct Family {
  const char* name;
  std::string flags;
};

// Float tolerance: the ranks' gradients are summed in another order than one worker's
// micro-batches; after a few steps parameters differ by ~1e-7 (measured 6e-8).
constexpr double kTolerance = 1e-5;

TEST(Distributed, TwoWorkersEqualOneWithTheSameGlobalBatch) {
  const std::string dir = testing::temp_dir("dp");
  const std::vector<Family> families = {
      // lol with balancing (the skip's too: its counts are summed over ranks), router noise and
      // depth growing
      {"lol",
       "--preset tiny --set vocab_size=160 --set router_skip=true --set router_skip_share=0.25 "
       "--train-set grow_start_depth=2 --train-set grow_fraction=0.5"},
      {"dense", "--preset tiny --set vocab_size=160 --set family=dense"}};
  for (const auto& f : families) {
    const std::string common = "train " + f.flags +
                               " --data task:maze:5 --steps 6 --train-set seq_len=128 "
                               "--train-set grad_accum=2 --train-set checkpoint_every=3 "
                               "--train-set log_every=1";
    const std::string one = dir + "/" + f.name + "_1", two = dir + "/" + f.name + "_2";
    ASSERT_EQ(lol_command(common + " --out " + one), 0) << f.name;
    // Small buckets: several per step, most started during the backward pass (the rest, those
    // holding parameters the last micro-batch did not reach, after it).
    ASSERT_EQ(lol_command(common + " --train-set bucket_mb=0.02 --out " + two + " --nproc 2"), 0)
        << f.name;
    EXPECT_LT(max_param_diff(one, two), kTolerance) << f.name;
    int64_t lines = 0;
    for (const auto& m : testing::metrics_lines(two + "/metrics.jsonl")) {
      ++lines;
      EXPECT_GE(m["comm_buckets"].get<int64_t>(), 4) << f.name;
      EXPECT_GE(m["comm_overlapped"].get<int64_t>(), 1) << f.name;
      EXPECT_LE(m["comm_overlapped"].get<int64_t>(), m["comm_buckets"].get<int64_t>()) << f.name;
    }
    EXPECT_EQ(lines, 6) << f.name;
    // The comparison can tell runs apart: half the global batch ends elsewhere.
    const std::string half = dir + "/" + f.name + "_half";
    ASSERT_EQ(lol_command(common + " --train-set grad_accum=1 --out " + half), 0) << f.name;
    EXPECT_GT(max_param_diff(one, half), 1e-3) << f.name;
    // Resuming at another number of workers continues exactly: each run's step-3 checkpoint,
    // resumed by the other world size, ends where the straight runs did.
    for (const auto& [from, workers, reference] :
         {std::tuple<std::string, int, std::string>{two, 1, one}, {one, 2, two}}) {
      const std::string resumed = from + "_resumed_by_" + std::to_string(workers);
      std::filesystem::copy(from, resumed, std::filesystem::copy_options::recursive);
      remove_tree(resumed + "/checkpoints/step_00000006");
      ASSERT_EQ(lol_command("train --resume " + resumed + " --nproc " + std::to_string(workers)), 0)
          << f.name;
      EXPECT_LT(max_param_diff(resumed, reference), kTolerance)
          << f.name << " resumed by " << workers;
    }
  }
  remove_tree(dir);
}

// Sets environment variables for one scope and restores what was there.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::string>> vars) {
    for (auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (auto& [name, old] : saved_) {
      if (old) {
        ::setenv(name.c_str(), old->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(Distributed, TheEnvironmentPlacesTheWorker) {
  {
    ScopedEnv env({{"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", "29511"},
                   {"WORLD_SIZE", "8"},
                   {"RANK", "5"},
                   {"LOCAL_WORLD_SIZE", "4"},
                   {"LOCAL_RANK", "1"}});
    const auto c = distributed_from_env();
    EXPECT_EQ(c.world, 8);
    EXPECT_EQ(c.rank, 5);
    EXPECT_EQ(c.local_world, 4);
    EXPECT_EQ(c.local_rank, 1);
    EXPECT_EQ(c.master_port, 29511);
  }
  {
    // By hand, one worker per machine: the local variables may be left out.
    ScopedEnv env({{"MASTER_ADDR", "h"}, {"WORLD_SIZE", "2"}, {"RANK", "1"}});
    ::unsetenv("LOCAL_RANK");
    ::unsetenv("LOCAL_WORLD_SIZE");
    const auto c = distributed_from_env();
    EXPECT_EQ(c.local_world, 1);
    EXPECT_EQ(c.local_rank, 0);
  }
  // Each malformed variable is refused by name, a number with anything around it included.
  const std::vector<std::pair<std::string, std::string>> bad = {{"RANK", "2"},
                                                                {"RANK", " 1"},
                                                                {"RANK", "1x"},
                                                                {"WORLD_SIZE", "0"},
                                                                {"WORLD_SIZE", "+2"},
                                                                {"LOCAL_RANK", "2"},
                                                                {"LOCAL_RANK", "-1"},
                                                                {"LOCAL_WORLD_SIZE", "3"},
                                                                {"MASTER_PORT", "70000"},
                                                                {"MASTER_PORT", "29500 "}};
  for (const auto& [name, value] : bad) {
    ScopedEnv base({{"MASTER_ADDR", "h"},
                    {"WORLD_SIZE", "2"},
                    {"RANK", "1"},
                    {"LOCAL_WORLD_SIZE", "2"},
                    {"LOCAL_RANK", "1"},
                    {"MASTER_PORT", "29500"}});
    ScopedEnv env({{name, value}});
    const auto error = testing::error_message([] { distributed_from_env(); });
    EXPECT_NE(error.find(name), std::string::npos) << name << "=" << value << ": " << error;
  }
}

TEST(Distributed, EachLocalWorkerHasAGpuOfItsOwn) {
  DistributedConfig c;
  c.world = 4;
  c.rank = 3;
  c.local_world = 2;
  c.local_rank = 1;
  // The CPU and an explicit GPU stay as asked; a bare cuda becomes cuda:LOCAL_RANK.
  EXPECT_EQ(worker_device(torch::Device("cpu"), c, 0), torch::Device("cpu"));
  EXPECT_EQ(worker_device(torch::Device("cuda:0"), c, 2), torch::Device("cuda:0"));
  EXPECT_EQ(worker_device(torch::Device("cuda"), c, 2), torch::Device("cuda:1"));
  c.local_rank = 0;
  EXPECT_EQ(worker_device(torch::Device("cuda"), c, 2), torch::Device("cuda:0"));
  // More local workers than GPUs: the one without a GPU says so.
  c.local_rank = 2;
  const auto error = testing::error_message([&] { worker_device(torch::Device("cuda"), c, 2); });
  EXPECT_NE(error.find("LOCAL_RANK 2) has no GPU"), std::string::npos) << error;
}

}  // namespace
}  // namespace lol

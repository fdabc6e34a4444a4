// lol bench --suite dp: data-parallel training with 1, 2, 4... local workers (docs/distributed.md):
// tokens/s, seconds each rank spent in collectives per step, bytes all-reduced per step. Each
// measurement is a short `lol train --nproc N` run whose metrics it reads. Workers split this
// machine's cores (what `lol train --nproc` does) unless `lol --threads T bench` gives each T.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <thread>

#include "bench_util.h"
#include "suites.h"
#include "util/error.h"
#include "util/files.h"

namespace lol::bench {

void bench_dp(const DpBenchOptions& o) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  LOL_CHECK(n > 0, "bench dp: cannot find this program's path");
  const std::string program(self, static_cast<size_t>(n));
  const std::string dir = "/tmp/lol_bench_dp_" + std::to_string(::getpid());
  struct Row {
    int64_t workers = 0, threads = 0;
    double tokens_per_s = 0, comm_s = 0, step_s = 0, buckets = 0, overlapped = 0;
    int64_t bytes = 0;
  };
  std::vector<Row> rows;
  for (int64_t workers : o.workers) {
    const std::string out = dir + "/w" + std::to_string(workers);
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int threads = o.threads_per_worker > 0 ? o.threads_per_worker
                                                 : std::max(1, cores / static_cast<int>(workers));
    std::string command =
        program + " --threads " + std::to_string(threads) + " train --preset " + o.preset;
    for (const auto& s : o.overrides) command += " --set " + s;
    command +=
        " --data " + o.data + " --steps " + std::to_string(o.steps) +
        " --train-set seq_len=" + std::to_string(o.seq_len) +
        " --train-set batch_rows=" + std::to_string(o.batch) +
        " --train-set grad_accum=" + std::to_string(o.grad_accum) +
        " --train-set eval_every=0 --train-set checkpoint_every=0 --train-set log_every=1 --out " +
        out + " --nproc " + std::to_string(workers) + " >" + out + ".log 2>&1";
    make_directories(dir);
    if (std::system(command.c_str()) != 0) {
      // The run's own error says what is wrong (a setting, the data); the log keeps the rest.
      std::ifstream log(out + ".log");
      std::string error;
      for (std::string line; std::getline(log, line);)
        if (const auto at = line.find("error: "); at != std::string::npos)
          error = line.substr(at + 7);
      fail("bench dp: the run with ", workers, " workers failed",
           error.empty() ? std::string() : ": " + error, " (", out, ".log)");
    }
    std::ifstream in(out + "/metrics.jsonl");
    std::vector<double> tps, comm, step_s, bytes, buckets, overlapped;
    for (std::string line; std::getline(in, line);) {
      const json j = json::parse(line, nullptr, false);
      if (!j.is_object() || j.value("step", 0) <= 1) continue;  // the first step warms up
      tps.push_back(j.value("tokens_per_s", 0.0));
      comm.push_back(j.value("comm_seconds", 0.0));
      bytes.push_back(j.value("comm_bytes", 0.0));
      buckets.push_back(j.value("comm_buckets", 0.0));
      overlapped.push_back(j.value("comm_overlapped", 0.0));
    }
    LOL_CHECK(!tps.empty(), "bench dp: no metrics in ", out);
    Row r;
    r.workers = workers;
    r.threads = threads;
    r.tokens_per_s = percentile(tps, 0.5);
    r.comm_s = percentile(comm, 0.5);
    r.bytes = static_cast<int64_t>(percentile(bytes, 0.5));
    r.buckets = percentile(buckets, 0.5);
    r.overlapped = percentile(overlapped, 0.5);
    r.step_s = static_cast<double>(o.batch * o.seq_len * o.grad_accum) / r.tokens_per_s;
    rows.push_back(r);
  }
  remove_tree(dir);
  if (o.output == "json") {
    json j = machine_fields(torch::kCPU);
    j.update({{"suite", "dp"}, {"preset", o.preset}, {"rows", json::array()}});
    for (const auto& r : rows)
      j["rows"].push_back({{"workers", r.workers},
                           {"threads_per_worker", r.threads},
                           {"tokens_per_s", r.tokens_per_s},
                           {"step_seconds", r.step_s},
                           {"comm_seconds_per_step", r.comm_s},
                           {"comm_bytes_per_step", r.bytes},
                           {"buckets_per_step", r.buckets},
                           {"buckets_started_in_backward", r.overlapped}});
    std::cout << j.dump(2) << "\n";
    return;
  }
  const bool md = o.output == "md";
  if (md)
    std::cout << machine_lines(torch::kCPU) << " | " << o.preset << ", " << o.grad_accum
              << " micro-batches of " << o.batch << " x " << o.seq_len
              << " per step, median of steps 2.." << o.steps
              << (o.threads_per_worker > 0 ? " | threads per worker set by --threads"
                                           : " | workers split this machine's cores")
              << "\n\n";
  Table table(md);
  table.header({"workers", "threads each", "tokens/s", "step s", "all-reduce wait s/step", "share",
                "MB/step", "buckets in backward"},
               1);
  for (const auto& r : rows)
    table.row({std::to_string(r.workers), std::to_string(r.threads), fixed(r.tokens_per_s, 0),
               fixed(r.step_s, 2), fixed(r.comm_s, 3), fixed(100 * r.comm_s / r.step_s, 1) + "%",
               fixed(static_cast<double>(r.bytes) / 1e6, 1),
               r.workers > 1 ? fixed(r.overlapped, 0) + " / " + fixed(r.buckets, 0) : "-"});
}

}  // namespace lol::bench

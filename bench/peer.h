#pragma once
// The PyTorch peer of `lol bench --peer PATH`: ../shared/peer/lol_torch.py (or any script with
// its command line) run as a child process on the engine's model shape, so the engine and a
// plain PyTorch implementation of the same training step are timed in one sitting, their
// rounds interleaved. The peer times zero_grad + forward + loss + backward + AdamW + the balance
// update on fixed rows of random tokens, lol and dense interleaved step by step, in a fresh
// process with its best measured thread settings (`--env tuned_malloc`: passive OpenMP waiting,
// OpenBLAS workers that sleep, glibc keeping freed memory).
#include <map>
#include <string>
#include <vector>

#include "model/config.h"

namespace lol::bench {

struct PeerOptions {
  std::string script;                       // the peer's lol_torch.py
  std::string python = "/usr/bin/python3";  // Debian's, where python3-torch installs
};

struct PeerRun {
  std::map<std::string, std::vector<double>> seconds;  // per timed step of "lol", "dense"
};

// The families the peer implements among `families` (lol and dense), in their order.
std::vector<std::string> peer_families(const std::vector<std::string>& families);

// Runs the peer once: `threads` threads, `batch` rows of `seq` tokens, `warmup` untimed and
// `steps` timed steps of each family. Its progress goes to stderr. Fails with one message
// naming the cause: no such script, an interpreter without torch, or the peer's exit status.
PeerRun run_peer(const PeerOptions& options, const ModelConfig& config,
                 const std::vector<std::string>& families, int64_t batch, int64_t seq, int warmup,
                 int steps, int threads);

}  // namespace lol::bench

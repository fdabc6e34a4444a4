// lol: the command users run. It sets the environment the OpenMP and OpenBLAS runtimes read
// when they load (they read it once, in their constructors), then executes the engine,
// lol-engine, from the same directory. It links no LibTorch, so LibTorch's 288 shared
// libraries are loaded and relocated once per command, not twice as when the engine
// re-executed itself to get the variables in place (docs/performance.md).
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int, char** argv) {
  // OpenMP workers spin ~3000 rounds (tens of microseconds) after a parallel region, then
  // sleep: back-to-back regions (a decode step's few-row products) find them awake, and they
  // do not spin against OpenBLAS's threads for long. Measured against OMP_WAIT_POLICY=PASSIVE
  // (docs/performance.md). A caller's OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) ::setenv("GOMP_SPINCOUNT", "3000", 0);
  ::setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);

  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    std::fprintf(stderr, "lol: error: cannot find this program's path (/proc/self/exe): %s\n",
                 std::strerror(errno));
    return 1;
  }
  std::string engine(self, static_cast<size_t>(n));
  engine = engine.substr(0, engine.rfind('/') + 1) + "lol-engine";
  ::execv(engine.c_str(), argv);
  std::fprintf(stderr, "lol: error: cannot run %s: %s (build the lol target, which builds both)\n",
               engine.c_str(), std::strerror(errno));
  return 1;
}

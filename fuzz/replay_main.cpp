// Replays saved inputs through a fuzz target without libFuzzer: `fuzz_NAME FILE_OR_DIR...`.
// The normal build links every target with this, so CI replays the committed corpora
// (fuzz/corpus/NAME) in seconds and a parser regression fails the build.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "util/files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
int64_t replay(const std::string& path) {
  if (lol::is_directory(path)) {
    int64_t count = 0;
    for (const auto& name : lol::list_directory(path)) count += replay(path + "/" + name);
    return count;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) {
    std::cerr << "replay: cannot open " << path << "\n";
    std::exit(2);
  }
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: " << argv[0] << " FILE_OR_DIR...\n";
    return 2;
  }
  int64_t count = 0;
  for (int i = 1; i < argc; ++i) count += replay(argv[i]);
  if (count == 0) {
    std::cerr << "replay: no inputs found\n";
    return 2;
  }
  std::cout << "replayed " << count << " inputs\n";
  return 0;
}

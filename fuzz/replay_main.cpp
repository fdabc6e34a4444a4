// Replays saved inputs through a fuzz target without libFuzzer: `fuzz_NAME PATH...`, each path
// a file, a directory (every file below it) or a tar archive (`*.tar`, every member: how the
// corpora are committed, fuzz/corpus/NAME.tar). The normal build links every target with this,
// so CI replays the committed corpora in seconds and a parser regression fails the build.
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "util/files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

[[noreturn]] void die(const std::string& message) {
  std::cerr << "replay: " << message << "\n";
  std::exit(2);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) die("cannot open " + path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void run(const std::string& bytes) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// The regular files of a ustar archive: 512-byte headers (name, size in octal at 124, type at
// 156), data padded to 512 bytes, two zero blocks at the end.
int64_t replay_tar(const std::string& path) {
  const std::string tar = read_all(path);
  int64_t count = 0;
  for (size_t at = 0; at + 512 <= tar.size();) {
    const char* header = tar.data() + at;
    if (header[0] == '\0') break;  // end of archive
    const uint64_t size = std::strtoull(std::string(header + 124, 12).c_str(), nullptr, 8);
    const char type = header[156];
    at += 512;
    if (at + size > tar.size()) die(path + ": truncated archive");
    if (type == '0' || type == '\0') {
      run(tar.substr(at, size));
      ++count;
    }
    at += (size + 511) / 512 * 512;
  }
  return count;
}

int64_t replay(const std::string& path) {
  if (lol::is_directory(path)) {
    int64_t count = 0;
    for (const auto& name : lol::list_directory(path)) count += replay(path + "/" + name);
    return count;
  }
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".tar") == 0) return replay_tar(path);
  run(read_all(path));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) die(std::string("usage: ") + argv[0] + " FILE_DIR_OR_TAR...");
  int64_t count = 0;
  for (int i = 1; i < argc; ++i) count += replay(argv[i]);
  if (count == 0) die("no inputs found");
  std::cout << "replayed " << count << " inputs\n";
  return 0;
}

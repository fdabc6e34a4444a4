#pragma once
// Whole-file reads and atomic writes. A write goes to a temporary file beside the target,
// is flushed to disk, then renamed over it, so a reader (or a crash) never sees half a file.
#include <cstdint>
#include <string>
#include <vector>

namespace lol {

std::string read_text_file(const std::string& path);
void write_file_atomic(const std::string& path, const void* data, size_t size);
void write_file_atomic(const std::string& path, const std::string& text);
// Writes several byte ranges in sequence into one file atomically (header + tensor data).
void write_file_atomic(const std::string& path,
                       const std::vector<std::pair<const void*, size_t>>& pieces);
// A file written piece by piece (streamed output) that appears whole at commit(): the pieces go
// to a temporary beside it, flushed to disk and renamed over the target. Destroyed without
// commit() (an error, an interrupt), it removes the temporary and leaves the old file alone.
class AtomicWriter {
 public:
  explicit AtomicWriter(std::string path);
  ~AtomicWriter();
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;
  void write(const void* data, size_t size);
  void write(const std::string& text) { write(text.data(), text.size()); }
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

void make_directories(const std::string& path);
bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
// Names of a directory's entries (no "." or ".."), sorted.
std::vector<std::string> list_directory(const std::string& path);
// Removes a file or a directory tree; nothing to do when it does not exist.
// These two walk directories with POSIX calls rather than std::filesystem: pip's LibTorch 2.x
// exports an older copy of libstdc++'s directory iterators (pytorch/pytorch#133437), and a
// binary built by a newer GCC that binds to it crashes in remove_all and directory_iterator.
void remove_tree(const std::string& path);

}  // namespace lol

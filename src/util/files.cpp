#include "util/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace lol {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOL_CHECK(in.good(), "cannot open ", path, ": ", std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

AtomicWriter::AtomicWriter(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  LOL_CHECK(fd_ >= 0, "cannot create ", tmp_, ": ", std::strerror(errno));
}

AtomicWriter::~AtomicWriter() {
  if (fd_ < 0) return;  // committed
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicWriter::write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    LOL_CHECK(n > 0, "cannot write ", tmp_, ": ", std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicWriter::commit() {
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp_.c_str());
    fail("cannot flush ", tmp_, ": ", std::strerror(err));
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp_.c_str());
    fail("cannot rename ", tmp_, " to ", path_, ": ", std::strerror(err));
  }
}

void write_file_atomic(const std::string& path,
                       const std::vector<std::pair<const void*, size_t>>& pieces) {
  AtomicWriter out(path);
  for (const auto& [data, size] : pieces) out.write(data, size);
  out.commit();
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  write_file_atomic(path, {{data, size}});
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
}

void make_directories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  LOL_CHECK(!ec, "cannot create directory ", path, ": ", ec.message());
}

bool path_exists(const std::string& path) {
  return std::filesystem::exists(path);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> list_directory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  LOL_CHECK(dir != nullptr, "cannot list directory ", path, ": ", std::strerror(errno));
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

void remove_tree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // already gone
  // Children before their directory (FTW_DEPTH); links are removed, never followed (FTW_PHYS).
  auto remove_one = [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); };
  LOL_CHECK(::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0, "cannot remove ", path,
            ": ", std::strerror(errno));
}

}  // namespace lol

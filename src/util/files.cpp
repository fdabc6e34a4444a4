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

void write_file_atomic(const std::string& path,
                       const std::vector<std::pair<const void*, size_t>>& pieces) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  LOL_CHECK(fd >= 0, "cannot create ", tmp, ": ", std::strerror(errno));
  for (const auto& [data, size] : pieces) {
    const char* p = static_cast<const char*>(data);
    size_t left = size;
    while (left > 0) {
      ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        fail("cannot write ", tmp, ": ", std::strerror(err));
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot flush ", tmp, ": ", std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot rename ", tmp, " to ", path, ": ", std::strerror(err));
  }
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

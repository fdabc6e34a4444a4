#pragma once
// One exception type for every user-facing failure: bad config, bad checkpoint, bad flag.
// Tools catch it in main, print its message on one line and exit non-zero.
#include <sstream>
#include <stdexcept>
#include <string>

namespace lol {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& out, const T& first, const Rest&... rest) {
  out << first;
  append(out, rest...);
}
}  // namespace detail

// Builds a message from its parts: fail("window must be > 0, got ", w).
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream out;
  detail::append(out, parts...);
  throw Error(out.str());
}

#define LOL_CHECK(cond, ...)               \
  do {                                     \
    if (!(cond)) ::lol::fail(__VA_ARGS__); \
  } while (0)

}  // namespace lol

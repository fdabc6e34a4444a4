#include "util/version.h"

#include "git_commit.h"  // generated at build time
namespace lol {
const char* git_commit() {
  return LOL_GIT_COMMIT;
}
const char* version() {
  return LOL_VERSION;
}
}  // namespace lol

#include "util/version.h"
namespace lol {
const char* git_commit() { return LOL_GIT_COMMIT; }
const char* version() { return LOL_VERSION; }
}  // namespace lol

#pragma once
namespace lol {
const char* git_commit();  // short hash of the commit the binary was configured from
const char* version();
}  // namespace lol

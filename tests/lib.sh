# Sourced first by the shell tests that take the lol binary as their first argument:
#   source "$(dirname "$0")/lib.sh"
# It gives them strict mode; $lol, that binary as an absolute path; $root, the source tree; $tmp,
# a scratch directory removed at exit (after the test's own cleanup function, if it defines one);
# and fail MESSAGE, one line on stderr naming the test, then exit 1.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 LOL_BINARY" >&2; exit 2; }
lol=$(realpath "$1")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
test_name=$(basename "$0" .sh)
tmp=$(mktemp -d)
lib_at_exit() {
  local rc=$?
  if declare -F cleanup >/dev/null; then cleanup || true; fi
  rm -rf "$tmp"
  exit "$rc"
}
trap lib_at_exit EXIT
fail() { echo "$test_name: FAIL: $*" >&2; exit 1; }

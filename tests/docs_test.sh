#!/usr/bin/env bash
# Every docs/<name>.md that the code, scripts, README or docs point a reader to exists.
#   tests/docs_test.sh SOURCE_DIR
set -uo pipefail
cd "$1"
missing=0
while read -r ref; do
  if [ ! -f "$ref" ]; then
    echo "FAILED: $ref is referenced but does not exist:"
    grep -rn --include='*.cpp' --include='*.h' --include='*.sh' --include='*.md' --include='*.txt' -F "$ref" \
      src tools bench tests fuzz scripts docs README.md CMakeLists.txt | head -3
    missing=$((missing + 1))
  fi
done < <(grep -rhoE --include='*.cpp' --include='*.h' --include='*.sh' --include='*.md' --include='*.txt' \
           'docs/[A-Za-z0-9_.-]+\.md' src tools bench tests fuzz scripts docs README.md CMakeLists.txt | sort -u)
[ "$missing" -eq 0 ] && echo "every referenced docs/*.md exists" || exit 1

#!/usr/bin/env bash
# Installs everything lol needs to build and test on Debian 12. Idempotent: packages already
# present are left alone, so a second run costs one dpkg query.
set -euo pipefail

packages=(
  build-essential cmake ninja-build git pkg-config
  libtorch-dev            # LibTorch 1.13 (tensors, autograd, nn modules)
  libopenblas-dev         # fast BLAS: Debian's default reference BLAS is ~30x slower
  nlohmann-json3-dev      # config, checkpoint headers, CLI JSON output
  libcli11-dev            # command-line parsing of the lol tool
  libpcre2-dev            # the tokenizers' pre-tokenizer regular expressions (Unicode, JIT)
  libutf8proc-dev         # Unicode normal forms (NFC...) of a tokenizer.json's normalizer
  sentencepiece           # spm_train: the Unigram models tests/text_test.sh converts and compares
  groff-base python3      # the built-in text corpus: man pages rendered, text extracted
  libgtest-dev libgmock-dev  # test suite
  clang-format            # the format check of scripts/test.sh (.clang-format)
  clang-14                # scripts/clang_check.sh: every source through a second compiler
  qemu-user               # tests/isa_test.sh: the kernels on emulated AVX2 and baseline CPUs
  libcpp-httplib-dev      # HTTP server of `lol serve` (shared library; flags from pkg-config)
  libgloo-dev             # Gloo headers that LibTorch's c10d ProcessGroupGloo.hpp includes
  curl                    # the server tests drive it with curl
  chromium                # headless browser for the explorer page test (tests/node)
)
# `setup.sh --peer` adds Debian's PyTorch, which runs the speed reference beside the engine
# (`lol bench --peer ../shared/peer/lol_torch.py`, docs/performance.md); nothing else needs it.
[ "${1:-}" = "--peer" ] && packages+=(python3-torch)
# Node.js and npm run the real-client server tests (openai, playwright-core); a machine that
# already has Node (e.g. from NodeSource) keeps it.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The server tests' clients, pinned by tests/node/package-lock.json; reinstalled only when the
# lock file changed since the last install.
node_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/node"
if [ ! -f "$node_dir/node_modules/.package-lock.json" ] ||
   [ "$node_dir/package-lock.json" -nt "$node_dir/node_modules/.package-lock.json" ]; then
  echo "setup: npm ci in tests/node"
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi

# LibTorch must resolve BLAS to OpenBLAS, not the reference implementation.
blas=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | awk '/^Value:/ {print $2}')
case "$blas" in
  *openblas*) ;;
  *)
    cand=$(update-alternatives --list libblas.so.3-x86_64-linux-gnu 2>/dev/null | grep openblas | head -1 || true)
    if [ -n "$cand" ]; then
      ${SUDO:-} update-alternatives --set libblas.so.3-x86_64-linux-gnu "$cand"
    fi
    ;;
esac
echo "setup: ok (BLAS: $(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | awk '/^Value:/ {print $2}'))"

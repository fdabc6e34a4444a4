#!/usr/bin/env bash
# The kernels' other instruction sets, on emulated CPUs. The hot loops are compiled three times
# (src/util/cpu_clones.h) and the packed GEMM has 16-column AVX-512 and 8-column AVX2 kernels;
# a machine runs one of each, and the ones CI's machines (AVX-512) pick are not the ones an
# AVX2 laptop or an old server picks. qemu-user emulates those CPUs (TCG: AVX2 and FMA since
# QEMU 7.2, no AVX-512), so the kernel, decoding and gradient checks run here on
#   Haswell: AVX2 + FMA, no AVX-512 -> the x86-64-v3 clones, 8-column panels
#   qemu64:  baseline x86-64 (SSE3)  -> the default clones, BLAS for the projections
# and a run that did not get the clone it was meant to test fails (LOL_EXPECT_CPU_CLONE).
# usage: isa_test.sh LOL_TESTS_BINARY
set -euo pipefail
tests=$(realpath "$1")
command -v qemu-x86_64 >/dev/null ||
  { echo "isa_test: qemu-x86_64 is missing: run scripts/setup.sh (qemu-user)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "isa_test: FAIL: $*" >&2; exit 1; }

# The kernels against their generic paths and float64 references, decoding against
# recomputation, expert tiles, the fused training loops: the suites whose code has clones or
# dispatches on the CPU (the rest is the same code on any CPU).
filter='Runtime.ReportsTheCloneTheLoaderPicked:Golden*:*/Golden*:CpuAutograd*'
filter+=':PackedGemm*:SegmentAttention*:Decode*:ExpertTiles*'

# run NAME QEMU_CPU OPENBLAS_CORE CLONES: the suites on one emulated CPU. OpenBLAS 0.3.21 picks
# its Haswell kernels under qemu-user whatever CPU is emulated (an illegal instruction on
# qemu64), so each run names the OpenBLAS core that CPU has.
run() {
  local name=$1 cpu=$2 core=$3 clones=$4
  local log="$work/$name.log"
  local start=$SECONDS
  if ! LOL_EXPECT_CPU_CLONE=$clones OPENBLAS_CORETYPE=$core \
       qemu-x86_64 -cpu "$cpu" "$tests" --gtest_filter="$filter" > "$log" 2>&1; then
    grep -v "TCG doesn't support" "$log" | tail -40 >&2
    fail "$name ($cpu): the suites failed"
  fi
  grep -q "PASSED" "$log" || fail "$name: no test ran"
  echo "isa_test: $name ($cpu, clones $clones): $(grep -o '[0-9]* tests\? from [0-9]* test suites\? ran' "$log"), $((SECONDS - start)) s"
}
# skipped NAME TEST yes|no: whether TEST was skipped in run NAME (it skips without the ISA).
skipped() {
  local name=$1 test=$2 want=$3 got=no
  grep -q "^\[  SKIPPED \] $test " "$work/$name.log" && got=yes
  [ "$got" = "$want" ] || fail "$name: $test skipped: $got, expected $want"
}

run avx2 Haswell-v4 Haswell "x86-64-v3|fma"
skipped avx2 PackedGemm.SplittingOverThreadsGivesTheSameBits no        # 8-column kernels ran
skipped avx2 PackedGemm.SixteenColumnPanelsGiveTheBitsOfEightColumnOnes yes
run baseline qemu64 Prescott "x86-64|default"
skipped baseline PackedGemm.SplittingOverThreadsGivesTheSameBits yes   # BLAS instead
echo "isa_test: ok"

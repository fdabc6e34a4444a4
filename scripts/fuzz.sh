#!/usr/bin/env bash
# Fuzzes one parser (docs/reliability.md): builds the fuzz preset (clang-14, libFuzzer, ASan +
# UBSan), runs fuzz_TARGET from its committed corpus for SECONDS (or -runs=N in the extra
# arguments), then merges what found new coverage back into the corpus, minimised.
#   scripts/fuzz.sh TARGET [SECONDS] [libFuzzer flags...]
#   targets: safetensors config forced_path shard task_text routes completion_request tokenizer
# A corpus is committed as one tar archive, fuzz/corpus/TARGET.tar (what the tests replay).
# Crashes, hangs (-timeout) and leaks stop the run; the input is written to runs/fuzz/TARGET/.
# The last lines printed are libFuzzer's final stats (executions, rate, peak memory).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh TARGET [SECONDS] [libFuzzer flags]}
seconds=${2:-600}
shift $(($# >= 2 ? 2 : 1))
corpus=fuzz/corpus/$target.tar
[ -f "$corpus" ] || { echo "fuzz: no target '$target' (fuzz/corpus/ lists them)"; exit 1; }
for p in clang-14 libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    { echo "fuzz: needs clang-14 and libclang-rt-14-dev (apt-get install clang-14 libclang-rt-14-dev)"; exit 1; }
done
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)" --target "fuzz_$target"
work=runs/fuzz/$target
mkdir -p "$work/corpus" "$work/merged"
tar -xf "$corpus" -C "$work/corpus"
max_len=4096
case "$target" in safetensors | routes | tokenizer) max_len=16384 ;; esac
# A dictionary of the format's keys and words, where there is one, helps mutations reach fields.
dict=()
[ -f "fuzz/dict/$target.dict" ] && dict=(-dict="fuzz/dict/$target.dict")
"build/fuzz/fuzz/fuzz_$target" "$work/corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=3072 \
  -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$work/" "${dict[@]}" "$@" 2>&1 |
  tee "$work/fuzz.log" |
  grep -E "^#[0-9]+.*(pulse|DONE)|stat::|ERROR|SUMMARY" || true
# Minimise: the smallest set of inputs with the coverage of all, packed reproducibly.
rm -rf "$work/merged" && mkdir -p "$work/merged"
"build/fuzz/fuzz/fuzz_$target" -merge=1 "$work/merged" "$work/corpus" >"$work/merge.log" 2>&1
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$corpus" -C "$work/merged" .
echo "fuzz: $corpus holds $(ls "$work/merged" | wc -l) inputs"

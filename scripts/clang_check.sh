#!/usr/bin/env bash
# Every translation unit of the tree through a second compiler's front end: clang-14 with the
# flags of the `clang` preset (the ci preset's: warnings on and as errors) and -fsyntax-only
# (parsing, semantic analysis, template instantiation; no code generated). GCC 12 lets some
# extensions through in C++17 mode without a word (lambdas capturing structured bindings); clang
# refuses them. About 4 s per source against the precompiled header; CI runs it
# (scripts/test.sh). docs/reliability.md says more.
#   scripts/clang_check.sh [JOBS]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang++-14 >/dev/null ||
  { echo "clang_check: needs clang-14 (bash scripts/setup.sh installs it)"; exit 1; }
jobs=${1:-$(nproc)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] ||
  { echo "clang_check: JOBS must be a whole number > 0, got '$jobs'"; exit 1; }
cmake --preset clang >/dev/null
cmake --build --preset clang --target lol_git_commit >/dev/null  # the generated header
python3 - build/clang/compile_commands.json "$jobs" <<'EOF'
import concurrent.futures, json, shlex, subprocess, sys, time

commands = json.load(open(sys.argv[1]))
jobs = int(sys.argv[2])


def run(entry, syntax_only):
    args = shlex.split(entry["command"])
    if syntax_only:  # no object file: drop -c and -o FILE
        at = args.index("-o")
        args = [a for a in args[:at] + args[at + 2:] if a != "-c"] + ["-fsyntax-only"]
    done = subprocess.run(args, cwd=entry["directory"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    return entry["file"], done.returncode, done.stderr.decode("utf-8", "replace")


start = time.time()
# The precompiled headers first (compiled for real: the sources include them), then the sources.
headers = [e for e in commands if e["file"].endswith("cmake_pch.hxx.cxx")]
sources = sorted({e["file"]: e for e in commands if e not in headers}.values(),
                 key=lambda e: e["file"])
failed = []
for entry in headers:
    name, rc, err = run(entry, syntax_only=False)
    if rc:
        sys.exit(f"clang_check: the precompiled header failed:\n{err}")
with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
    for name, rc, err in pool.map(lambda e: run(e, syntax_only=True), sources):
        if rc:
            failed.append(name)
            print(err, end="", flush=True)
print(f"clang_check: {len(sources) - len(failed)} of {len(sources)} sources pass clang++-14 "
      f"-fsyntax-only ({time.time() - start:.0f} s, {jobs} jobs)")
if failed:
    sys.exit("clang_check: failed: " + " ".join(failed))
EOF

#!/usr/bin/env bash
# The GPU check, in one run: build against a LibTorch 2.x with CUDA (pip torch's CMake config),
# run the whole test suite with the engine on the GPU (LOL_TEST_DEVICE), a short bf16 training
# run that is interrupted and resumed, and the model and decode benches on the GPU.
#
#   scripts/cuda_check.sh [OUT_DIR]        logs and results go to OUT_DIR (default runs/cuda-check)
#
# LOL_CHECK_DEVICE (default cuda) names the device; cpu rehearses the script anywhere.
# LOL_DEPS_PREFIX adds prefixes to CMAKE_PREFIX_PATH for machines without the Debian -dev
# packages (nlohmann-json, CLI11, GoogleTest, PCRE2, utf8proc): copy those packages' files under
# one folder with their /usr layout and point LOL_DEPS_PREFIX at its usr/. Every phase has a
# time limit, so a hang in one still leaves the logs of the others.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-runs/cuda-check}")
mkdir -p "$out"
log="$out/check.log"
: >"$log"
say() { echo "== $* ($(date +%T))" | tee -a "$log"; }
phase() {  # phase NAME SECONDS COMMAND...: runs with a limit, logs, records the exit status
  local name=$1 limit=$2
  shift 2
  say "$name"
  timeout --signal=INT --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  echo "$name rc=$rc" | tee -a "$out/summary.txt" "$log"
  return $rc
}

dev=${LOL_CHECK_DEVICE:-cuda}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$log" 2>&1
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tee -a "$log"

build=${LOL_CHECK_BUILD:-build/cuda}
phase configure 120 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;${LOL_DEPS_PREFIX:-}" || exit 1
phase build 300 cmake --build "$build" -j "$(nproc)" || { grep -E "error" "$log" | head -40; exit 1; }
lol="$build/lol"
# The data-parallel backends this LibTorch build compiled in: NCCL is the CUDA path (one GPU per
# local rank), Gloo the CPU one; the 2-worker run checks the Gloo path against LibTorch 2.x.
"$lol" --version | tee -a "$log"
"$lol" --version | grep -q "nccl"
echo "nccl compiled rc=$?" | tee -a "$out/summary.txt" "$log"
phase dp-gloo 120 "$lol" train --preset tiny --data task:maze:5 --steps 6 --train-set seq_len=128 \
  --train-set grad_accum=2 --train-set bucket_mb=0.02 --out /tmp/lol-cuda-dp --overwrite --nproc 2
# Two workers on the GPUs (each takes cuda:LOCAL_RANK): NCCL where the machine has two GPUs;
# with one, the second worker must stop naming its missing GPU (NCCL refuses two on one GPU).
if [ "$dev" = cuda ]; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
  phase dp-nccl 180 "$lol" --device cuda train --preset tiny --data task:maze:5 --steps 6 \
    --train-set seq_len=128 --train-set grad_accum=2 --out /tmp/lol-cuda-nccl --overwrite --nproc 2
  rc=$?
  if [ "$gpus" -lt 2 ]; then
    [ "$rc" -ne 0 ] && grep -q "LOCAL_RANK 1) has no GPU" "$log"
    echo "dp-nccl on $gpus GPU refused by name rc=$?" | tee -a "$out/summary.txt" "$log"
  fi
fi

# Tests: engine on the GPU against the CPU reference paths; the CLI script runs on the CPU.
export LOL_TEST_DEVICE=$dev
phase tests 200 ctest --test-dir "$build" -j 8 --output-on-failure
unset LOL_TEST_DEVICE
grep -E "tests passed|tests failed|Failed|\*\*\*" "$log" | tail -20

# Training on the GPU: bf16 autocast by default; interrupt with SIGINT, then resume.
run=/tmp/lol-cuda-run
rm -rf "$run"
train=("$lol" --device "$dev" train --preset maze-demo --data task:maze:5 --steps 400
       --train-set seq_len=256 --train-set eval_every=200 --train-set checkpoint_every=100 --out "$run")
say "train (interrupted after 25 s)"
timeout --signal=INT 25 "${train[@]}" >>"$log" 2>&1
echo "interrupted train rc=$?" | tee -a "$out/summary.txt" "$log"
ls "$run/checkpoints" >>"$log" 2>&1
phase resume 120 "$lol" --device "$dev" train --resume "$run"
cp "$run/metrics.jsonl" "$out/metrics.jsonl" 2>/dev/null

# Benches on the GPU (not tests: figures for the notes).
phase bench-model 120 "$lol" --device "$dev" bench --suite model --families dense,lol,moe --mode train,step,forward \
  --seq-len 512 --batch 32 --reps 5
# The routed core's products on the GPU: tiled (no host read per depth, the default there)
# against per-expert slices (the counts read on the host at every routed depth).
LOL_EXPERT_PRODUCTS=sliced phase bench-lol-sliced 90 "$lol" --device "$dev" bench --suite model \
  --families lol --mode train,step --seq-len 512 --batch 32 --reps 5
phase bench-model-fp32 60 "$lol" --device "$dev" bench --suite model --families dense,lol --mode train \
  --seq-len 512 --batch 32 --reps 5 --precision fp32
phase bench-decode 120 "$lol" --device "$dev" bench --suite decode --families lol,dense --contexts 128,4096 \
  --batches 1,32 --steps 16
say done

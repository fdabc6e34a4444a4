#!/usr/bin/env bash
# lol serve driven by real clients: curl, the official openai package under Node, a headless
# browser on the explorer page, and SIGTERM with a request in flight.
# usage: serve_test.sh LOL_BINARY
set -euo pipefail
lol=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
node_dir="$root/tests/node"
if [ ! -d "$node_dir/node_modules/openai" ] || [ ! -d "$node_dir/node_modules/playwright-core" ]; then
  echo "serve_test: $node_dir/node_modules is missing: run scripts/setup.sh (npm ci there)" >&2
  exit 1
fi
command -v chromium >/dev/null || { echo "serve_test: chromium is missing: run scripts/setup.sh" >&2; exit 1; }

work=${SERVE_TEST_WORK:-$(mktemp -d)}
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "${SERVE_TEST_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "serve_test: FAIL: $*" >&2; exit 1; }

"$lol" init --preset tiny --seed 5 --set vocab_size=160 --set max_seq_len=4096 --out "$work/model" >/dev/null

# start NAME ARGS...: a server on a free port; sets $url and $pid.
start() {
  local name=$1
  shift
  "$lol" serve --model "$work/model" --task maze --port 0 --port-file "$work/$name.port" "$@" \
    >"$work/$name.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 200); do
    if [ -s "$work/$name.port" ] && curl -sf "http://127.0.0.1:$(cat "$work/$name.port")/health" >/dev/null; then
      url="http://127.0.0.1:$(cat "$work/$name.port")"
      return
    fi
    sleep 0.05
  done
  cat "$work/$name.log" >&2
  fail "server $name did not become healthy"
}

start one --parallel 1
url_one=$url pid_one=$pid
start eight --parallel 8 --api-key sesame  # the openai client and the explorer send the key
url_eight=$url

# A second server on a port in use: one clear error, non-zero exit.
if "$lol" serve --model "$work/model" --port "$(cat "$work/one.port")" >"$work/clash.log" 2>&1; then
  fail "a second server on a used port started"
fi
grep -q "^lol: error: cannot listen on 127.0.0.1:" "$work/clash.log" || { cat "$work/clash.log" >&2; fail "port clash message"; }

# curl: a completion, a stream that ends with [DONE], the tokenizer, metrics, a bad request.
prompt=$(curl -sf "$url_one/examples" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).examples[0].prompt))')
body=$(node -e 'console.log(JSON.stringify({prompt: process.argv[1], max_tokens: 12, temperature: 0}))' "$prompt")
completion=$(curl -sf "$url_one/v1/completions" -d "$body")
grep -q '"finish_reason"' <<<"$completion" || fail "curl completion"
stream=$(node -e 'console.log(JSON.stringify({prompt: process.argv[1], max_tokens: 12, stream: true}))' "$prompt")
streamed=$(curl -sfN "$url_one/v1/completions" -d "$stream")
tail -2 <<<"$streamed" | grep -q '^data: \[DONE\]' || fail "curl stream ends with [DONE]"
tokens=$(curl -sf "$url_one/tokenize" -d '{"prompt": "Q : start"}')
grep -q '"tokens"' <<<"$tokens" || fail "curl tokenize"
code=$(curl -s -o /dev/null -w '%{http_code}' "$url_one/v1/completions" -d '{"prompt": 5}')
[ "$code" = 400 ] || fail "a bad prompt gives 400, got $code"
metrics=$(curl -sf "$url_one/metrics")  # not piped into grep -q: pipefail would see curl's SIGPIPE
grep -q '^lol_generated_tokens_total' <<<"$metrics" || fail "metrics"

EIGHT_KEY=sesame node "$node_dir/openai_client.mjs" "$url_one" "$url_eight" "$lol" "$work/model"
EXPLORER_KEY=sesame node "$node_dir/explorer.mjs" "$url_eight"

# SIGTERM with a stream in flight (3000 tokens, about a second): the stream runs to its end
# ([DONE] after every token) and the server exits 0.
long=$(node -e 'console.log(JSON.stringify({prompt: process.argv[1], max_tokens: 3000, stream: true, stream_options: {include_usage: true}, ignore_eos: true, temperature: 1, seed: 3}))' "$prompt")
curl -sN "$url_one/v1/completions" -d "$long" >"$work/inflight.txt" &
curl_pid=$!
for _ in $(seq 200); do grep -q '^data: {' "$work/inflight.txt" 2>/dev/null && break; sleep 0.02; done
kill -TERM "$pid_one"
rc=0
wait "$pid_one" || rc=$?
wait "$curl_pid" || true
[ "$rc" = 0 ] || { cat "$work/one.log" >&2; fail "server exit status after SIGTERM: $rc"; }
tail -2 "$work/inflight.txt" | grep -q '^data: \[DONE\]' || fail "the in-flight stream was not finished before exit"
grep -q '"completion_tokens":3000' "$work/inflight.txt" || fail "the in-flight stream was cut short"
grep -q "interrupted: finishing running requests" "$work/one.log" || fail "the server did not report the SIGTERM"
echo "serve_test: ok (curl, openai client, explorer, graceful SIGTERM)"

#!/usr/bin/env bash
# End-to-end checks of the lol binary: each command works on a tiny model, and bad input of
# each kind ends with one clear error line and a non-zero exit (never a crash).
set -uo pipefail
lol="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
pass() { echo "ok: $1"; }
failed() { echo "FAILED: $1"; failures=$((failures + 1)); }

# expect_ok NAME CMD...: exit 0
expect_ok() {
  local name=$1; shift
  if "$@" >"$dir/out" 2>"$dir/err"; then pass "$name"; else failed "$name: exit $? $(tail -1 "$dir/err")"; fi
}
# expect_error NAME PATTERN CMD...: exit 1 (not a signal), one 'lol: error:' line matching PATTERN
expect_error() {
  local name=$1 pattern=$2; shift 2
  "$@" >"$dir/out" 2>"$dir/err" </dev/null
  local rc=$?
  if [ "$rc" -eq 1 ] && grep -q "^lol: error: .*$pattern" "$dir/err" && [ "$(wc -l <"$dir/err")" -eq 1 ]; then
    pass "$name"
  else
    failed "$name: exit $rc, stderr: $(head -c 300 "$dir/err")"
  fi
}

# The launcher sets the OpenMP runtime's spin count before the engine loads it (libgomp reads
# it once, at load), and a caller's own setting wins.
shown=$(OMP_DISPLAY_ENV=verbose "$lol" --version 2>&1)
grep -q "GOMP_SPINCOUNT = '3000'" <<<"$shown" &&
  pass "launcher sets GOMP_SPINCOUNT before the engine loads" || failed "launcher: GOMP_SPINCOUNT not in effect"
shown=$(OMP_DISPLAY_ENV=verbose GOMP_SPINCOUNT=77 "$lol" --version 2>&1)
grep -q "GOMP_SPINCOUNT = '77'" <<<"$shown" && pass "a caller's GOMP_SPINCOUNT wins" ||
  failed "launcher overrode the caller's GOMP_SPINCOUNT"
expect_ok "init" "$lol" init --preset tiny --seed 1 --out "$dir/m"
expect_ok "info" "$lol" info --model "$dir/m" --json
grep -q '"router.balance_bias": \[' "$dir/out" && pass "info json gives the balance bias" ||
  failed "info json has no balance bias: $(head -c 300 "$dir/out")"
expect_ok "info text" "$lol" info --model "$dir/m"
grep -q "^  router.balance_bias  *+0.000 +0.000" "$dir/out" && pass "info prints the balance bias" ||
  failed "info prints no balance bias: $(cat "$dir/out")"
grep -q "^router rows *|R\[m\]| per expert 0..L-1 (" "$dir/out" && pass "info labels the router rows" ||
  failed "info labels the router rows otherwise: $(grep '^router rows' "$dir/out")"
expect_ok "init with a skip" "$lol" init --preset tiny --seed 1 --set router_skip=true --out "$dir/skip"
expect_ok "info with a skip" "$lol" info --model "$dir/skip"
grep -q "^router rows *|R\[m\]| per expert 0..L-1, then the skip's" "$dir/out" &&
  pass "info names the skip's router row" ||
  failed "info does not name the skip's router row: $(grep '^router rows' "$dir/out")"
expect_ok "init with a skip head and its target" "$lol" init --preset tiny --seed 1 --set router_skip=true \
  --set router_skip_renorm=true --set router_skip_head=true --set router_skip_share=0.25 \
  --set router_skip_target=true --set router_skip_window0=false --out "$dir/skip_target"
expect_ok "info with a skip head" "$lol" info --model "$dir/skip_target"
grep -q "^router rows .*then the skip head's (p_skip = sigmoid(z - log L))" "$dir/out" &&
  grep -q "^skip bias *router_skip_share=0.25; skip where p_skip > sigmoid(-bias); not offered to window 0" "$dir/out" &&
  pass "info names the skip head's row, its threshold and the windows offered" ||
  failed "info: the skip head's row or threshold unnamed: $(grep -e '^router rows' -e '^skip bias' "$dir/out")"
expect_ok "forward" "$lol" forward --model "$dir/m" --tokens 1,2,3,4,5,6,7,8,9 --prompt-len 2 --router-only 1 --out "$dir/f.json"
grep -q '"routes"' "$dir/f.json" && pass "forward json" || failed "forward json has no routes"
echo '{"entries":[{"depth":1,"window":0,"expert":2,"gate":0.5}]}' >"$dir/path.json"
expect_ok "forward forced" "$lol" forward --model "$dir/m" --tokens 1,2,3 --force "$dir/path.json" --out "$dir/g.json"
expect_ok "generate ids" "$lol" generate --model "$dir/m" --tokens 1,2,3 --max-tokens 4 --routes "$dir/r.jsonl"
expect_ok "generate ids as text" "$lol" generate --model "$dir/m" --prompt "1, 2 3" --max-tokens 4 --echo
grep -q '^1,2,3,[0-9]' "$dir/out" && pass "ids echo as comma lists" || failed "ids echo: $(cat "$dir/out")"
# The id vocabulary has no end of sequence: 1,000 tokens asked, the model's 128 positions end it.
expect_ok "generate past max_seq_len" "$lol" generate --model "$dir/m" --tokens 1,2,3 --max-tokens 1000
[ "$(tr ',' '\n' <"$dir/out" | wc -l)" -eq 125 ] &&
  grep -q "1 of 1 sequences stopped at the model's max_seq_len of 128 tokens, before --max-tokens 1000" "$dir/err" &&
  pass "a continuation cut by max_seq_len says so" || failed "cut by max_seq_len: $(head -c 300 "$dir/err")"
expect_error "generate ids out of range" "'999' is not a token id in \\[0, 64)" "$lol" generate --model "$dir/m" --prompt "1 999" --max-tokens 4
expect_error "the skip withheld without a skip" "router_skip_window0=false needs router_skip=true" "$lol" init --preset tiny --seed 1 --set router_skip_window0=false --out "$dir/noskip"
expect_error "serve without a model" "not a model directory" "$lol" serve --model "$dir/nowhere" --port 0
expect_error "workers that do not divide a step" "--nproc 2: a step's 1 micro-batch(es) (grad_accum) must divide" "$lol" train --preset tiny --steps 2 --out "$dir/dp" --nproc 2
# A new run's settings are checked once, by the launcher, before any worker starts: one error.
expect_error "workers with data the model cannot hold" "uses .* token ids but the model's vocab_size is 64 (set vocab_size=" "$lol" train --preset tiny --data task:maze:5 --steps 2 --train-set grad_accum=2 --out "$dir/dp2" --nproc 2
[ ! -e "$dir/dp2" ] && pass "a refused multi-worker run writes nothing" || failed "refused multi-worker run left $dir/dp2"

expect_error "init twice" "already holds a model" "$lol" init --preset tiny --seed 1 --out "$dir/m"
expect_error "unknown preset" "unknown preset 'nope'" "$lol" init --preset nope --seed 1 --out "$dir/x"
expect_error "bad config value" "window must be > 0, got 0" "$lol" init --preset tiny --set window=0 --seed 1 --out "$dir/x"
expect_error "unknown config key" "unknown config key 'windw'" "$lol" init --preset tiny --set windw=3 --seed 1 --out "$dir/x"
expect_error "bad token list" "'x' is not an integer" "$lol" forward --model "$dir/m" --tokens 1,x --out "$dir/x.json"
expect_error "token outside vocab" "outside the vocabulary" "$lol" forward --model "$dir/m" --tokens 1,999 --out "$dir/x.json"
expect_error "no model dir" "not a model directory" "$lol" forward --model "$dir/none" --tokens 1 --out "$dir/x.json"
echo '{"entries":[{"depth":9,"window":0,"expert":1}]}' >"$dir/bad_path.json"
expect_error "forced path depth" "depth 9 is outside" "$lol" forward --model "$dir/m" --tokens 1 --force "$dir/bad_path.json" --out "$dir/x.json"
echo '{"entries":[' >"$dir/broken.json"
expect_error "forced path json" "not valid JSON" "$lol" forward --model "$dir/m" --tokens 1 --force "$dir/broken.json" --out "$dir/x.json"
expect_error "bad device" "is not a device" "$lol" --device blah info --model "$dir/m"
cp -r "$dir/m" "$dir/trunc"
head -c 200 "$dir/m/model.safetensors" >"$dir/trunc/model.safetensors"
expect_error "truncated checkpoint" "truncated" "$lol" forward --model "$dir/trunc" --tokens 1 --out "$dir/x.json"
expect_error "info of a truncated checkpoint" "truncated" "$lol" info --model "$dir/trunc"
cp "$dir/m/model.safetensors" "$dir/trunc/model.safetensors"
sed 's/"library_size": *[0-9]*/"library_size": 1000000000/' "$dir/m/config.json" >"$dir/trunc/config.json"
expect_error "impossible config in a checkpoint" "library_size must be <= 1024, got 1000000000" "$lol" info --model "$dir/trunc"
sed 's/"library_size": *[0-9]*/"library_size": 1000/' "$dir/m/config.json" >"$dir/trunc/config.json"
expect_error "config far larger than its weights" "describes a lol model of .* parameters but model.safetensors holds" "$lol" forward --model "$dir/trunc" --tokens 1 --out "$dir/x.json"
expect_error "model larger than memory" "more than this machine" "$lol" init --preset tiny --set d_model=65536 --set n_heads=16 --set n_kv_heads=16 --set ffn_hidden=1048576 --seed 1 --out "$dir/huge"
cp "$dir/m/config.json" "$dir/trunc/config.json"
printf '\xff\xff\xff\xff\xff\xff\xff\x7f{}' >"$dir/trunc/model.safetensors"
expect_error "oversized header" "exceeds the limit" "$lol" forward --model "$dir/trunc" --tokens 1 --out "$dir/x.json"

# Tasks: generate, trace from questions, score, and malformed input naming the line.
expect_ok "data maze" "$lol" data maze --count 5 --seed 3 --size 6 --out "$dir/maze.txt"
expect_ok "data sudoku shards" "$lol" data sudoku --count 2 --seed 3 --format shards --out "$dir/sudoku.shard"
sed 's/ R : .*//' "$dir/maze.txt" >"$dir/questions.txt"
expect_ok "task trace" bash -c "'$lol' task trace maze <'$dir/questions.txt' >'$dir/traced.txt'"
cmp -s "$dir/maze.txt" "$dir/traced.txt" && pass "trace reproduces data" || failed "task trace differs from lol data"
expect_ok "task score" bash -c "'$lol' task score maze --json '$dir/score.json' <'$dir/maze.txt'"
grep -q '"answer_correct": 1.0' "$dir/score.json" && pass "score json" || failed "reference sequences do not score 1"
printf 'Q : r1c1 banana [ ... ]\n' >"$dir/bad.txt"
expect_error "task unknown token" "line 1: unknown token 'banana'" bash -c "'$lol' task trace maze <'$dir/bad.txt'"
printf 'Q : 1 2 3\n' >"$dir/bad.txt"
expect_error "task truncated line" "line 1: truncated" bash -c "'$lol' task score sudoku --strategy 1 <'$dir/bad.txt'"

# Training: a few steps, an exact resume, and data from a shard.
expect_ok "train" "$lol" train --preset tiny --set vocab_size=160 --data task:maze:5 --steps 4 --train-set seq_len=128 --train-set checkpoint_every=2 --out "$dir/run"
expect_ok "train resume (finished run)" "$lol" train --resume "$dir/run"
# A real SIGINT mid-run, then --resume: the losses equal an uninterrupted run's, step for step.
small_run=(--preset tiny --set vocab_size=160 --data task:maze:5 --steps 24 --train-set seq_len=128
           --train-set eval_every=0 --train-set checkpoint_every=1000 --train-set log_every=1)
"$lol" train "${small_run[@]}" --out "$dir/straight" >/dev/null 2>&1
"$lol" train "${small_run[@]}" --out "$dir/interrupted" >/dev/null 2>"$dir/int.log" &
pid=$!
for _ in $(seq 1 3000); do grep -q "train 6/24" "$dir/int.log" 2>/dev/null && break; sleep 0.01; done
kill -INT "$pid"
wait "$pid"
rc=$?
# It exits 130 (128 + SIGINT, as a shell reports a process the signal ended), so a script that
# chains stages stops there instead of taking the cut-short run for a finished one.
grep -q "interrupted at step" "$dir/int.log" && [ "$rc" -eq 130 ] && pass "SIGINT saves and exits 130" || failed "SIGINT: exit $rc, $(tail -1 "$dir/int.log")"
expect_ok "resume after SIGINT" "$lol" train --resume "$dir/interrupted"
losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl"; }
[ "$(losses "$dir/straight" | wc -l)" -eq 24 ] && [ "$(losses "$dir/straight")" = "$(losses "$dir/interrupted")" ] &&
  pass "losses after SIGINT + resume equal the uninterrupted run" || failed "losses after SIGINT + resume differ"
# The seed in train_config.json is the run's whole seed (initialisation too): --seed 5 and
# --train-set seed=5 are the same run, so a run is reproduced from its train_config.json.
seed_run=(--preset tiny --set vocab_size=160 --data task:maze:5 --steps 2 --train-set seq_len=128
          --train-set eval_every=0)
"$lol" train "${seed_run[@]}" --seed 5 --out "$dir/seed_flag" >/dev/null 2>&1
"$lol" train "${seed_run[@]}" --train-set seed=5 --out "$dir/seed_config" >/dev/null 2>&1
cmp -s "$dir/seed_flag/checkpoints/step_00000002/model.safetensors" \
       "$dir/seed_config/checkpoints/step_00000002/model.safetensors" &&
  pass "--seed 5 and --train-set seed=5 train the same model" ||
  failed "--seed 5 and --train-set seed=5 trained different models"
expect_error "train over a run" "already holds a run" "$lol" train --preset tiny --steps 2 --out "$dir/run"
expect_error "train bad setting" "optimizer must be one of muon, adamw; got .sgd." "$lol" train --preset tiny --train-set optimizer=sgd --out "$dir/run2"
expect_error "overwrite with a bad setting" "lr must be a finite number > 0, got 0" "$lol" train --preset tiny --train-set lr=0 --overwrite --out "$dir/run"
expect_error "a skip lr scale without a skip" "skip_lr_scale (0.5) scales the lr of the skip.s row of router.weight: the model needs router_skip=true" "$lol" train --preset tiny --train-set skip_lr_scale=0.5 --steps 2 --out "$dir/noskip_lr"
expect_error "a skip lr scale without a skip, dry run" "skip_lr_scale (0.5) scales the lr of the skip.s row of router.weight: the model needs router_skip=true" "$lol" train --preset tiny --train-set skip_lr_scale=0.5 --dry-run --out "$dir/noskip_lr_dry"
[ -d "$dir/run/checkpoints" ] && pass "bad overwrite keeps the old run" || failed "a rejected --overwrite deleted the old run"
# --dry-run: the settings written, nothing trained, never over a run, bad data refused.
expect_ok "dry run" "$lol" train --preset tiny --data task:maze:5 --set vocab_size=160 --steps 7 --train-set lr=2e-3 --dry-run --out "$dir/dry"
grep -q '"steps": 7' "$dir/dry/train_config.json" && grep -q '"lr": 0.002' "$dir/dry/train_config.json" &&
  grep -q '"vocab_size": 160' "$dir/dry/config.json" && [ ! -e "$dir/dry/checkpoints" ] &&
  pass "dry run writes the settings and trains nothing" || failed "dry run: $(ls "$dir/dry")"
cp "$dir/run/train_config.json" "$dir/run_tc.json"
expect_error "dry run over a run" "already holds a run" "$lol" train --preset tiny --steps 2 --dry-run --out "$dir/run"
cmp -s "$dir/run/train_config.json" "$dir/run_tc.json" && pass "dry run leaves a run alone" || failed "dry run changed a run"
expect_error "dry run with data the model cannot hold" "uses .* token ids but the model's vocab_size is 8" "$lol" train --preset tiny --set vocab_size=8 --data task:maze:5 --dry-run --out "$dir/dry2"
expect_ok "train from shard" "$lol" train --preset tiny --set vocab_size=160 --data "$dir/sudoku.shard" --steps 2 --train-set seq_len=512 --out "$dir/run3"
# Runs side by side: the table on stdout, the plots on one page, the final loss from eval.json.
"$lol" data maze --count 2 --seed 3 --size 4 --format shards --out "$dir/maze4.shard" >/dev/null 2>&1
expect_ok "eval a shard into the run" "$lol" eval --model "$dir/run" --data "$dir/maze4.shard" --json-out "$dir/run/eval.json"
# A task shard is scored as training scores it: only the tokens after the prompt window "... ]".
"$lol" data maze --count 2 --seed 3 --size 4 --format text --out "$dir/maze4.txt" >/dev/null 2>&1
targets=$(sed 's/.* \] //' "$dir/maze4.txt" | wc -w)
grep -q "\"tokens\": *$targets\b" "$dir/run/eval.json" && pass "eval scores a task's targets after the prompt ($targets)" ||
  failed "eval of a task shard: $targets targets expected, $(grep -o '"tokens": *[0-9]*' "$dir/run/eval.json" | head -1)"
expect_error "eval of a task stream" "lol data maze --size 5 --format shards" "$lol" eval --model "$dir/run" --data task:maze:5
expect_error "eval of a mixture" "evaluate its parts one at a time (task:maze:5, $dir/maze4.shard)" "$lol" eval --model "$dir/run" --data "mix:2*task:maze:5,$dir/maze4.shard"
expect_ok "compare" "$lol" compare "$dir/run" "$dir/run3" --out "$dir/compare.html" --json-out "$dir/compare.json"
[ "$(grep -c '^| run3\? | lol L=4 |' "$dir/out")" -eq 2 ] && grep -q '| metrics |$' "$dir/out" && grep -q '| eval.json |$' "$dir/out" &&
  [ "$(grep -c '<svg' "$dir/compare.html")" -eq 3 ] && grep -q '<polyline' "$dir/compare.html" &&
  grep -q '"final_loss_from": "eval.json"' "$dir/compare.json" && grep -q '"final_loss_from": "metrics"' "$dir/compare.json" &&
  pass "compare: a row per run, three plots, eval.json preferred" || failed "compare output: $(head -c 400 "$dir/out")"
expect_error "compare a model that is not a run" "m/train_config.json" "$lol" compare "$dir/m"
expect_ok "generate task text" "$lol" generate --model "$dir/run/checkpoints/step_00000004" --task maze --prompts "$dir/questions.txt" --max-tokens 8
cp "$dir/out" "$dir/all_at_once.txt"
# --echo prints whole sequences, one pipe into the scorer; the run's task is found without --task.
if "$lol" generate --model "$dir/run" --prompts "$dir/questions.txt" --max-tokens 8 --echo 2>"$dir/err" |
  "$lol" task score maze >"$dir/score.txt" 2>>"$dir/err" && grep -q "sequences" "$dir/score.txt"; then
  pass "generate --echo | task score"
else
  failed "generate --echo | task score: $(tail -2 "$dir/err")"
fi
# A stop string stops generation wherever it occurs in the continuation, and the text shown
# ends before it (not after it): stop at the 2nd and 3rd words of a free continuation.
"$lol" generate --model "$dir/run" --prompt "$(head -1 "$dir/questions.txt")" --max-tokens 8 >"$dir/free.txt" 2>/dev/null
read -r _ w2 w3 _ <"$dir/free.txt"
cont=" $(cat "$dir/free.txt")"
before="${cont%%"$w2 $w3"*}"
expect_ok "generate --stop" "$lol" generate --model "$dir/run" --prompt "$(head -1 "$dir/questions.txt")" --max-tokens 8 --stop "$w2 $w3"
[ -n "$w3" ] && [ "$(cat "$dir/out")" = "${before# }" ] && pass "stop string cuts the text before it" ||
  failed "generate --stop '$w2 $w3' on '$(cat "$dir/free.txt")' gave '$(cat "$dir/out")'"
expect_error "generate text a task vocabulary cannot read" "--prompt: text: unknown token 'hello'" "$lol" generate --model "$dir/run" --prompt "hello" --max-tokens 2
expect_ok "generate two at a time" "$lol" generate --model "$dir/run/checkpoints/step_00000004" --task maze --prompts "$dir/questions.txt" --max-tokens 8 --batch-size 2 --temperature 1 --seed 4
expect_ok "generate all at once, sampled" "$lol" generate --model "$dir/run/checkpoints/step_00000004" --task maze --prompts "$dir/questions.txt" --max-tokens 8 --batch-size 0 --temperature 1 --seed 4
cp "$dir/out" "$dir/sampled_all.txt"
expect_ok "generate one at a time, sampled" "$lol" generate --model "$dir/run/checkpoints/step_00000004" --task maze --prompts "$dir/questions.txt" --max-tokens 8 --batch-size 1 --temperature 1 --seed 4
cmp -s "$dir/out" "$dir/sampled_all.txt" && [ "$(wc -l <"$dir/out")" -eq "$(wc -l <"$dir/questions.txt")" ] && pass "batch size leaves sampled output unchanged" || failed "sampled output depends on --batch-size"
expect_error "negative temperature" "temperature must be a finite number >= 0 (0: greedy), got -1" "$lol" generate --model "$dir/run/checkpoints/step_00000004" --task maze --prompts "$dir/questions.txt" --temperature -1
expect_error "negative batch size" "batch-size: must be >= 0, got -1" "$lol" generate --model "$dir/run/checkpoints/step_00000004" --task maze --prompts "$dir/questions.txt" --batch-size -1

# Routing analysis: routes of labelled sequences, mode paths, bad input.
expect_ok "route task" "$lol" route --model "$dir/run" --task maze --size 4 --count 2 --out "$dir/routes.jsonl"
[ "$(wc -l <"$dir/routes.jsonl")" -eq 11 ] && pass "route file: header + 10 sequences" || failed "route file has $(wc -l <"$dir/routes.jsonl") lines"
printf 'fr\t1,2,3,4\nde\t5,6,7\n' >"$dir/set.tsv"
expect_ok "route tsv" "$lol" route --model "$dir/run" --data "$dir/set.tsv" --out "$dir/routes_tsv.jsonl"
expect_ok "path extract" "$lol" path extract "$dir/routes.jsonl" --out "$dir/paths"
expect_ok "path stats" "$lol" path stats "$dir/routes.jsonl" --json "$dir/stats.json"
grep -q '"expected_uniform"' "$dir/stats.json" && pass "stats json" || failed "stats json lacks expected_uniform"
expect_ok "path stats with groups" "$lol" path stats "$dir/routes_tsv.jsonl" --group romance=fr --group germanic=de --json "$dir/stats_g.json"
grep -q "within groups 0.000 (0 pairs), across groups .* (1 pairs)" "$dir/out" && grep -q '"label_similarity"' "$dir/stats_g.json" &&
  pass "path similarity by group" || failed "path stats --group: $(tail -2 "$dir/out")"
expect_error "group names a missing label" "--group names label 'es'" "$lol" path stats "$dir/routes_tsv.jsonl" --group romance=fr,es
expect_error "malformed group" "--group must be NAME=label" "$lol" path stats "$dir/routes_tsv.jsonl" --group romance
expect_ok "path probe" "$lol" path probe "$dir/routes.jsonl" --folds 2 --shuffles 3 --json "$dir/probes.json"
printf 'fr\t1,2,3,4\nfr\t5,6,7\n' >"$dir/one_label.tsv"
"$lol" route --model "$dir/run" --data "$dir/one_label.tsv" --out "$dir/one_label.jsonl" 2>/dev/null
expect_error "probe one label" "at least two labels" "$lol" path probe "$dir/one_label.jsonl" --folds 2
expect_ok "forward with a mode path" "$lol" forward --model "$dir/run" --tokens 1,2,3 --force "$dir/paths/bfs.json" --out "$dir/x.json"
expect_ok "path eval" "$lol" path eval --model "$dir/run" --task maze --size 4 --paths "$dir/paths" --count 2 --interventions full,permute,depths --depth-width 2 --samples "$dir/samples.jsonl" --paths-out "$dir/forced" --json "$dir/eval.json"
grep -q '"confusion"' "$dir/eval.json" && [ "$(wc -l <"$dir/samples.jsonl")" -eq 40 ] && pass "path eval json and samples" || failed "path eval wrote $(wc -l <"$dir/samples.jsonl") samples"
# A generation of path eval is what lol generate --force writes for the same prompt and path.
line=$(grep '"condition":"permute"' "$dir/samples.jsonl" | grep '"label":"dfs"' | head -1)
prompt=$(sed -n 's/.*"prompt":"\([^"]*\)".*/\1/p' <<<"$line")
generated=$(sed -n 's/.*"generated":"\([^"]*\)".*/\1/p' <<<"$line")
expect_ok "generate with an evaluated path" "$lol" generate --model "$dir/run" --task maze --prompt "$prompt" --force "$dir/forced/permute/dfs.json" --max-tokens "$(wc -w <<<"$generated")"
[ -n "$generated" ] && [ "$(cat "$dir/out")" = "$generated" ] && pass "path eval equals generate --force" || failed "path eval and generate --force differ"
expect_ok "route with perturbation" "$lol" route --model "$dir/run" --task maze --size 4 --count 2 --perturb 0.05 --out "$dir/routes_p.jsonl"
grep -q '"flipped"' "$dir/routes_p.jsonl" && pass "route file records flips" || failed "no flips recorded"
expect_ok "report" "$lol" report "$dir/routes_p.jsonl" --eval "$dir/eval.json" --folds 2 --shuffles 2 --out "$dir/report.html"
[ "$(grep -c '<svg' "$dir/report.html")" -ge 8 ] && ! grep -q '<script' "$dir/report.html" && pass "report pictures" || failed "report has $(grep -c '<svg' "$dir/report.html") pictures"
echo '[{"condition":"full"}]' >"$dir/bad_eval.json"
expect_error "report bad eval" "bad_eval.json: each path eval result needs" "$lol" report "$dir/routes.jsonl" --eval "$dir/bad_eval.json" --out "$dir/r.html"
[ ! -e "$dir/r.html" ] && pass "a failed report writes no file" || failed "a failed report left a file"
expect_ok "path depth" "$lol" path depth --model "$dir/run" --task maze --size 4 --count 1 --depths 1,4,8 --json "$dir/depth.json"
grep -q 'extrapolated' "$dir/out" && grep -q '"depth": 8' "$dir/depth.json" && pass "path depth extrapolates" || failed "path depth output"
expect_error "path eval wrong task" "label 'astar' names no sudoku strategy" "$lol" path eval --model "$dir/run" --task sudoku --paths "$dir/paths" --count 1
expect_error "path eval bad intervention" "--interventions item must be one of" "$lol" path eval --model "$dir/run" --task maze --size 4 --paths "$dir/paths" --interventions full,swap
printf 'fr\t1,oops\n' >"$dir/bad.tsv"
expect_error "route bad tsv" "bad.tsv line 1: 'oops' is not a token id" "$lol" route --model "$dir/run" --data "$dir/bad.tsv" --out "$dir/failed_routes.jsonl"
[ ! -e "$dir/failed_routes.jsonl" ] && pass "a failed route run writes no file" || failed "a failed route run left a file"
expect_ok "init dense" "$lol" init --preset tiny --set family=dense --seed 1 --out "$dir/dense"
expect_error "path depth dense" "only a lol core executes more depths" "$lol" path depth --model "$dir/dense" --data "$dir/set.tsv" --depths 9
expect_error "route dense model" "needs a core that routes windows" "$lol" route --model "$dir/dense" --data "$dir/set.tsv" --out "$dir/r.jsonl"
echo '{"lol_routes":1,"core_depth":4,"library_size":4,"sequences":1}' >"$dir/bad_routes.jsonl"
echo '{"sequence":0}' >>"$dir/bad_routes.jsonl"
expect_error "path extract bad file" "bad_routes.jsonl line 2: " "$lol" path extract "$dir/bad_routes.jsonl" --out "$dir/p2"

# lol bench --peer: a stand-in peer with the real one's command line records the shape it was
# given and times lol at 1 s and dense at 2 s a step; the engine's rows are divided by those.
cat >"$dir/peer.py" <<'PY'
import argparse, json, sys
ap = argparse.ArgumentParser()
for flag in ("--env", "--threads", "--config", "--batch", "--seq", "--warmup", "--steps", "--families", "--json"):
    ap.add_argument(flag)
ap.add_argument("--bench", action="store_true")
a = ap.parse_args()
shape = json.load(open(a.config))
with open(a.json + ".shape", "w") as f:
    json.dump(shape, f)
with open(sys.argv[0] + ".calls", "a") as f:
    f.write(json.dumps(shape) + "\n")
secs = {"lol": 1.0, "dense": 2.0}
fams = {f: {"times": [secs[f]] * int(a.steps)} for f in a.families.split(",")}
json.dump({"runs": [{"gemm_peak_median": 1.0, "threads": {"torch": int(a.threads)}, "families": fams}]}, open(a.json, "w"))
PY
expect_ok "bench with a peer" "$lol" --threads 1 bench --preset tiny --set d_model=48 --families dense,lol --mode train --seq-len 32 --batch 2 --reps 2 --warmup 0 --peer "$dir/peer.py" --peer-python python3 -o json
python3 - "$dir/out" "$dir/peer.py.calls" <<'PY' && pass "bench peer rows and ratios" || failed "bench peer rows and ratios"
import json, sys
j = json.load(open(sys.argv[1]))
calls = [json.loads(l) for l in open(sys.argv[2])]
assert len(calls) == 2 and all(c["d_model"] == 48 and c["batch"] == 2 and c["seq"] == 32 for c in calls), calls
peer = {(r["round"], r["family"]): r for r in j["rows"] if r["mode"] == "peer step"}
assert sorted(peer) == [(1, "dense"), (1, "lol"), (2, "dense"), (2, "lol")], sorted(peer)
assert abs(peer[(1, "lol")]["tokens_per_s"] - 64) < 1e-9 and abs(peer[(2, "dense")]["tokens_per_s"] - 32) < 1e-9
engine = [r for r in j["rows"] if r["mode"] == "train"]
assert len(engine) == 4
for r in engine:
    want = r["tokens_per_s"] / peer[(r["round"], r["family"])]["tokens_per_s"]
    assert abs(r["ratio_to_peer"] - want) < 1e-9 * want, (r, want)
# The medians over the rounds: of tokens/s and of each round's ratios.
import statistics
assert j["rounds"] == 2
med = {(m["family"], m["mode"]): m for m in j["medians"]}
assert sorted(med) == [("dense", "peer step"), ("dense", "train"), ("lol", "peer step"), ("lol", "train")], sorted(med)
for (fam, mode), m in med.items():
    rows = [r for r in j["rows"] if r["family"] == fam and r["mode"] == mode]
    for key in ("tokens_per_s", "ratio_to_dense") + (("ratio_to_peer",) if mode == "train" else ()):
        want = statistics.median(r[key] for r in rows)
        assert abs(m[key] - want) < 1e-9 * want, (key, m, want)
    assert mode == "train" or "ratio_to_peer" not in m, m
PY
printf 'import sys\nsys.exit(3)\n' >"$dir/bad_peer.py"
printf '#!/bin/sh\n[ "$1" = -c ] && exit 0\nexec python3 "$@"\n' >"$dir/py"
chmod +x "$dir/py"
expect_error "bench peer that fails" "bad_peer.py failed (exit status 3)" "$lol" bench --preset tiny --families lol --mode train --seq-len 16 --batch 1 --reps 1 --peer "$dir/bad_peer.py" --peer-python "$dir/py"
expect_error "bench peer without torch" "/bin/false cannot import torch" "$lol" bench --preset tiny --families lol --mode train --seq-len 16 --batch 1 --reps 1 --peer "$dir/peer.py" --peer-python /bin/false
expect_error "bench peer missing" "--peer: no such file" "$lol" bench --preset tiny --families lol --mode train --peer "$dir/nothing.py"
expect_error "bench peer families" "the peer implements lol and dense" "$lol" bench --preset tiny --families looped --peer "$dir/peer.py"
expect_error "bench peer other suite" "only the model suite runs the peer" "$lol" bench --suite decode --peer "$dir/peer.py"

# lol bench --suite decode: each step's bytes, FLOPs and floor, and with --profile where a
# batch row's step goes; the profile's regions account for the step.
expect_ok "bench decode profile" "$lol" --threads 1 bench --suite decode --preset tiny --families lol,dense --contexts 16 --batches 1,3 --steps 4 --profile -o json
python3 - "$dir/out" <<'PY' && pass "bench decode floor and profile" || failed "bench decode floor and profile"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["read_bandwidth_gbps"]["median"] > 0 and j["matmul_peak_gflops"]["median"] > 0
batch = [r for r in j["rows"] if r["what"] == "batch"]
assert len(batch) == 4, batch
for r in j["rows"]:
    if r["what"] == "prefill":
        continue
    assert r["mb_read_per_step"] > 0 and r["gflop_per_step"] > 0, r
    floor = 1e3 * max(r["mb_read_per_step"] / 1e3 / j["read_bandwidth_gbps"]["median"],
                      r["gflop_per_step"] / j["matmul_peak_gflops"]["median"])
    assert abs(r["floor_ms"] - floor) < 1e-6 * floor, (r, floor)
by = {(r["family"], r["batch"]): r for r in batch}
for fam in ("lol", "dense"):  # three rows read the same weights and three times the cache
    assert abs(by[(fam, 3)]["gflop_per_step"] / by[(fam, 1)]["gflop_per_step"] - 3) < 0.2, fam
for r in batch:
    phases = {p["phase"] for p in r["profile"]}
    assert {"embed", "prelude", "core", "coda", "head"} <= phases, phases
    total = sum(p["forward_ms"] + p["host_ms"] for p in r["profile"])
    assert 0 < total <= r["profiled_ms_per_step"] * 1.01, (total, r["profiled_ms_per_step"])
    assert any(p["part"] == "proj" for p in r["profile"]) and r["operators"]
PY
expect_error "bench profile other suite" "only the model and decode suites have a profile" "$lol" bench --suite tasks --profile

# lol bench --suite decode --rounds: the batch rows round after round, each round's floors at its
# own bandwidth and each row against its own round's batch 1; then the medians over the rounds.
expect_ok "bench decode rounds" "$lol" --threads 1 bench --suite decode --preset tiny --families lol,dense --contexts 16 --batches 1,3 --steps 3 --rounds 3 -o json
python3 - "$dir/out" <<'PY' && pass "bench decode rounds, ratios and medians" || failed "bench decode rounds, ratios and medians"
import json, statistics, sys
j = json.load(open(sys.argv[1]))
assert j["rounds"] == 3, j.get("rounds")
batch = [r for r in j["rows"] if r["what"] == "batch"]
assert sorted((r["family"], r["round"], r["batch"]) for r in batch) == sorted(
    (f, k, b) for f in ("lol", "dense") for k in (1, 2, 3) for b in (1, 3)), batch
by = {(r["family"], r["round"], r["batch"]): r for r in batch}
for (fam, k, b), r in by.items():
    floor = 1e3 * max(r["mb_read_per_step"] / 1e3 / r["read_bandwidth_gbps"],
                      r["gflop_per_step"] / j["matmul_peak_gflops"]["median"])
    assert abs(r["floor_ms"] - floor) < 1e-6 * floor, (r, floor)
    one = by[(fam, k, 1)]["tokens_per_s"]
    assert abs(r["x_batch1"] - r["tokens_per_s"] / one) < 1e-9 * r["x_batch1"], r
med = {(m["family"], m["batch"]): m for m in j["medians"]}
assert sorted(med) == sorted((f, b) for f in ("lol", "dense") for b in (1, 3)), med
for (fam, b), m in med.items():
    rows = [by[(fam, k, b)] for k in (1, 2, 3)]
    for key, values in (("tokens_per_s", [r["tokens_per_s"] for r in rows]),
                        ("x_batch1", [r["x_batch1"] for r in rows]),
                        ("x_floor", [r["p50_ms"] / r["floor_ms"] for r in rows])):
        assert abs(m[key] - statistics.median(values)) < 1e-9 * abs(m[key]), (key, m, values)
PY
expect_error "bench rounds other suite" "only the model and decode suites (or --against) have rounds" "$lol" bench --suite tasks --rounds 2

# lol bench --against: a stand-in "other build" records the arguments it was run with and writes
# fixed rows; this build's rows are real. Each row gets both builds' figures over the rounds.
cat >"$dir/other_lol" <<'SH'
#!/bin/sh
printf '%s\n' "$*" >>"$0.calls"
cat <<'JSON'
{"commit": "stand-in", "rows": [
 {"family": "lol", "what": "batch", "context": 16, "batch": 1, "tokens_per_s": 300.0, "p50_ms": 3.3},
 {"family": "lol", "what": "prefill", "context": 16, "batch": 1, "tokens_per_s": 100.0},
 {"family": "lol", "what": "batch", "context": 16, "batch": 64, "tokens_per_s": 900.0}]}
JSON
SH
chmod +x "$dir/other_lol"
expect_ok "bench against another build" "$lol" --threads 1 bench --suite decode --preset tiny --families lol --contexts 16 --batches 1 --steps 2 --against "$dir/other_lol" --rounds 3 -o json
python3 - "$dir/out" "$dir/other_lol.calls" <<'PY' && pass "bench against rows, rounds and arguments" || failed "bench against rows, rounds and arguments"
import json, statistics, sys
j = json.load(open(sys.argv[1]))
calls = open(sys.argv[2]).read().splitlines()
assert calls == ["--threads 1 bench --suite decode --preset tiny --families lol --contexts 16 --batches 1 --steps 2 -o json"] * 3, calls
assert j["rounds"] == 3 and j["b"]["commit"] == "stand-in" and j["a"]["commit"] != "stand-in", j
rows = {(r["what"], r["batch"]): r for r in j["rows"]}
for key, b in ((("batch", 1), 300.0), (("prefill", 1), 100.0)):
    r = rows[key]
    assert r["family"] == "lol" and r["context"] == 16, r
    assert len(r["a_tokens_per_s"]) == 3 and all(x > 0 for x in r["a_tokens_per_s"]), r
    assert r["b_tokens_per_s"] == [b] * 3, r
    assert abs(r["a_median"] - statistics.median(r["a_tokens_per_s"])) < 1e-9, r
    assert abs(r["b_over_a"] - b / r["a_median"]) < 1e-9 * b, r
only_b = rows[("batch", 64)]  # a row only one build has: its figures, no ratio
assert only_b["a_tokens_per_s"] == [] and "b_over_a" not in only_b, only_b
PY
printf '#!/bin/sh\nexit 3\n' >"$dir/failing_lol"
chmod +x "$dir/failing_lol"
# (This build's own run comes first and shows its progress: the error is the one last line.)
"$lol" bench --suite decode --preset tiny --families lol --contexts 16 --batches 1 --steps 2 --against "$dir/failing_lol" --rounds 1 >"$dir/out" 2>"$dir/err"
rc=$?
if [ "$rc" -eq 1 ] && [ "$(grep -c '^lol: error:' "$dir/err")" -eq 1 ] &&
  tail -1 "$dir/err" | grep -q "^lol: error: --against: .*failing_lol failed (exit status 3)"; then
  pass "bench against a failing build"
else
  failed "bench against a failing build: exit $rc, stderr: $(tail -c 300 "$dir/err")"
fi
expect_error "bench against nothing" "is not an executable file" "$lol" bench --suite decode --against "$dir/nothing"
expect_error "bench against a suite without tokens/s" "--suite tasks has no tokens/s rows" "$lol" bench --suite tasks --against "$dir/other_lol"
expect_error "bench against with a peer" "one comparison at a time" "$lol" bench --against "$dir/other_lol" --peer "$dir/peer.py"

if [ "$failures" -ne 0 ]; then echo "$failures CLI checks failed"; exit 1; fi
echo "all CLI checks passed"

// The server driven by the official openai client (v6) and by lm-eval's request shapes.
// usage: node openai_client.mjs URL_PARALLEL_1 URL_PARALLEL_8 LOL_BINARY MODEL_DIR
import OpenAI from "openai";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";

const [urlOne, urlEight, lol, modelDir] = process.argv.slice(2);
const one = new OpenAI({ baseURL: urlOne + "/v1", apiKey: "unused" });
const eight = new OpenAI({ baseURL: urlEight + "/v1", apiKey: process.env.EIGHT_KEY || "unused" });
const get = async (url) => (await fetch(url)).json();
const post = async (url, body) => (await fetch(url, { method: "POST", body: JSON.stringify(body) })).json();

const examples = (await get(urlOne + "/examples")).examples;
assert.ok(examples.length >= 5, "the server offers example prompts");
const prompts = examples.map((e) => e.prompt);
let checks = 0;

// 1. Streamed text equals the whole response (greedy and seeded sampling; completions, chat).
for (const sampling of [{ temperature: 0 }, { temperature: 1.0, seed: 11 }]) {
  const whole = await one.completions.create({ model: "m", prompt: prompts[0], max_tokens: 40, ...sampling });
  let streamed = "";
  for await (const chunk of await one.completions.create({ model: "m", prompt: prompts[0], max_tokens: 40, stream: true, ...sampling }))
    streamed += chunk.choices[0]?.text ?? "";
  assert.equal(streamed, whole.choices[0].text, "stream == non-stream (completions)");
  const chat = await one.chat.completions.create({ model: "m", messages: [{ role: "user", content: prompts[1] }], max_tokens: 40, ...sampling });
  let chatStreamed = "";
  for await (const chunk of await one.chat.completions.create({ model: "m", messages: [{ role: "user", content: prompts[1] }], max_tokens: 40, stream: true, ...sampling }))
    chatStreamed += chunk.choices[0]?.delta?.content ?? "";
  assert.equal(chatStreamed, chat.choices[0].message.content, "stream == non-stream (chat)");
  checks += 2;
}

// 2. The same request with the same seed gives the same output at --parallel 1 and 8, with 16
//    requests in flight on the parallel server.
const requests = [];
for (let i = 0; i < 16; i++)
  requests.push({ model: "m", prompt: prompts[i % prompts.length], max_tokens: 24 + (i % 5) * 6, temperature: 0.9, seed: 1000 + i });
const alone = [];
for (const r of requests) alone.push((await one.completions.create(r)).choices[0].text);
const together = await Promise.all(requests.map((r) => eight.completions.create(r)));
together.forEach((res, i) => assert.equal(res.choices[0].text, alone[i], `request ${i}: same seed, same text at --parallel 1 and 8`));
checks += 16;

// 3. lm-eval's loglikelihood request: token-id prompt, echo, max_tokens 1, logprobs 1. Every
//    prompt token's log-probability equals `lol forward`'s log-softmax (1e-5), and the greedy
//    check (token == max of top_logprobs) holds for the generated token.
const ids = (await post(urlOne + "/tokenize", { prompt: prompts[2], add_special_tokens: false })).tokens;
assert.equal((await post(urlOne + "/detokenize", { tokens: ids })).prompt, prompts[2], "tokenize/detokenize round trip");
const info = await get(urlOne + "/tokenizer_info");
assert.equal(info.eos_token, "<eos>");
const res = await one.completions.create({ model: "m", prompt: [ids], max_tokens: 1, echo: true, logprobs: 1, temperature: 0, seed: 1234 });
const lp = res.choices[0].logprobs;
assert.equal(lp.token_logprobs.length, ids.length + 1);
assert.equal(lp.token_logprobs[0], null);
assert.equal(lp.top_logprobs[0], null);
const last = ids.length;  // the generated token
assert.equal(lp.token_logprobs[last], Math.max(...Object.values(lp.top_logprobs[last])), "greedy check on the generated token");
// The prompt window through "]" and the router-only descriptor, as the task tokenizer sets them.
const open = ids.indexOf((await post(urlOne + "/tokenize", { prompt: "[" })).tokens[0]);
const close = ids.indexOf((await post(urlOne + "/tokenize", { prompt: "]" })).tokens[0]);
const routerOnly = [];
for (let i = open; i <= close; i++) routerOnly.push(i);
const dir = mkdtempSync(join(tmpdir(), "lol-forward-"));
execFileSync(lol, ["forward", "--model", modelDir, "--tokens", ids.join(","), "--prompt-len", String(close + 1),
                   "--router-only", routerOnly.join(","), "--out", join(dir, "f.json")]);
const logits = JSON.parse(readFileSync(join(dir, "f.json"), "utf8")).logits;
let worst = 0;
for (let t = 1; t < ids.length; t++) {
  const row = logits[t - 1];
  const m = Math.max(...row);
  const lse = m + Math.log(row.reduce((s, x) => s + Math.exp(x - m), 0));
  worst = Math.max(worst, Math.abs(row[ids[t]] - lse - lp.token_logprobs[t]));
}
assert.ok(worst < 1e-5, `echo logprobs == lol forward's log-softmax (worst ${worst})`);
checks += ids.length;

// 4. LoL extensions through the client: routes come back per token.
const routed = await one.completions.create({ model: "m", prompt: prompts[0], max_tokens: 8, temperature: 0, routes: true });
assert.ok(Array.isArray(routed.choices[0].routes) && routed.choices[0].routes[0].windows.length > 0, "routes per token");
checks += 1;

console.log(`openai client: ${checks} checks passed (worst echo logprob difference ${worst.toExponential(2)})`);

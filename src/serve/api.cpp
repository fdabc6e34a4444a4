#include "serve/api.h"

#include <cmath>
#include <map>
#include <random>

#include "text/utf8.h"
#include "util/error.h"

namespace lol::serve {
namespace {

constexpr int64_t kMaxLogprobs = 20;
constexpr size_t kMaxStops = 16;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

// Typed optional fields of a request body; each names the field when its value is wrong.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(name, std::string("'") + name + "' must be true or false");
  return v->get<bool>();
}

int64_t get_int(const json& body, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number_integer())
    bad(name, std::string("'") + name + "' must be an integer, got " + json_text(*v));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
    bad(name, std::string("'") + name + "' must be at most " + std::to_string(hi));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi)
    bad(name, std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "], got " + std::to_string(x));
  return x;
}

double get_number(const json& body, const char* name, double fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number())
    bad(name, std::string("'") + name + "' must be a number, got " + json_text(*v));
  const double x = v->get<double>();
  if (!std::isfinite(x)) bad(name, std::string("'") + name + "' must be finite");
  return x;
}

// The text before the first stop string (all of it when none occurs).
std::string cut_at_stop(const std::string& text, const std::vector<std::string>& stops) {
  return text.substr(0, std::min(text.size(), find_stop(text, stops)));
}

// A prompt must hold at least one token and fit the context.
void check_prompt_length(const std::vector<int64_t>& ids, const ServedModel& model,
                         const std::string& param) {
  if (ids.empty()) bad(param, "a prompt is empty: it needs at least one token");
  if (static_cast<int64_t>(ids.size()) > model.config->max_seq_len)
    bad(param, "a prompt has " + std::to_string(ids.size()) +
                   " tokens, more than the model's context of " +
                   std::to_string(model.config->max_seq_len));
}

// The tokenizer's ids of `text`, or a 400 naming `param`.
std::vector<int64_t> encode(const ServedModel& model, const std::string& text,
                            const std::string& param) {
  try {
    return model.tokenizer->encode(text);
  } catch (const Error& e) {
    bad(param, "cannot tokenize the " + param + ": " + e.what());
  }
}

std::vector<std::vector<int64_t>> parse_prompts(const json& body, const ServedModel& model) {
  const json* p = field(body, "prompt");
  if (!p) bad("prompt", "'prompt' is required");
  auto ids = [&](const json& list) {
    std::vector<int64_t> out;
    for (const auto& t : list) {
      if (!t.is_number_integer())
        bad("prompt", "a token-id prompt must hold only integers, got " + json_text(t));
      const int64_t id =
          t.is_number_unsigned() && t.get<uint64_t>() > INT64_MAX ? -1 : t.get<int64_t>();
      if (id < 0 || id >= model.config->vocab_size)
        bad("prompt", "token id " + json_text(t) + " is outside the vocabulary [0, " +
                          std::to_string(model.config->vocab_size) + ")");
      out.push_back(id);
    }
    return out;
  };
  std::vector<std::vector<int64_t>> prompts;
  if (p->is_string()) {
    prompts.push_back(encode(model, p->get<std::string>(), "prompt"));
  } else if (p->is_array() && !p->empty()) {
    const auto& first = p->front();
    if (first.is_number_integer()) {
      prompts.push_back(ids(*p));
    } else if (first.is_string()) {
      for (const auto& s : *p) {
        if (!s.is_string()) bad("prompt", "a list of prompts must hold only strings");
        prompts.push_back(encode(model, s.get<std::string>(), "prompt"));
      }
    } else if (first.is_array()) {
      for (const auto& l : *p) {
        if (!l.is_array()) bad("prompt", "a list of token-id prompts must hold only lists");
        prompts.push_back(ids(l));
      }
    } else {
      bad("prompt",
          "'prompt' must be a string, a list of strings, a list of token ids or a "
          "list of token-id lists");
    }
  } else {
    bad("prompt",
        "'prompt' must be a string, a list of strings, a list of token ids or a list "
        "of token-id lists (not empty)");
  }
  for (const auto& ids_of : prompts) check_prompt_length(ids_of, model, "prompt");
  return prompts;
}

// Chat: the documented template of every model served today is the last message's content,
// which must be the user's (tokenizer_info's chat_template says the same in Jinja).
std::vector<int64_t> parse_messages(const json& body, const ServedModel& model) {
  const json* m = field(body, "messages");
  if (!m || !m->is_array() || m->empty())
    bad("messages", "'messages' must be a non-empty list of {role, content}");
  for (const auto& msg : *m)
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
      bad("messages", "every message needs a string 'role'");
  const auto& last = m->back();
  if (last["role"] != "user") bad("messages", "the last message must be the user's");
  std::string text;
  const json* content = field(last, "content");
  if (content && content->is_string()) {
    text = content->get<std::string>();
  } else if (content && content->is_array()) {
    for (const auto& part : *content) {
      // A JSON comparison, not value("type", ""): that throws on a "type" that is no string.
      if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
          !part.contains("text") || !part["text"].is_string())
        bad("messages", "content parts must be {\"type\": \"text\", \"text\": ...}");
      text += part["text"].get<std::string>();
    }
  } else {
    bad("messages", "the last message's 'content' must be a string or a list of text parts");
  }
  auto ids = encode(model, text, "messages");
  check_prompt_length(ids, model, "messages");
  return ids;
}

json usage(const std::vector<std::shared_ptr<Job>>& jobs) {
  int64_t prompt = 0, completion = 0;
  for (const auto& job : jobs) {
    prompt += static_cast<int64_t>(job->request().prompt.tokens.size());
    for (const auto& c : job->choices()) completion += static_cast<int64_t>(c.tokens.size());
  }
  return json{{"prompt_tokens", prompt},
              {"completion_tokens", completion},
              {"total_tokens", prompt + completion}};
}

// {piece: logprob} of a token's alternatives (OpenAI's legacy top_logprobs).
json top_object(const Tokenizer& tok, const TokenLogprob& lp) {
  json top = json::object();
  for (const auto& [id, v] : lp.top) {
    const auto key = tok.piece(id, false);
    if (!top.contains(key)) top[key] = v;
  }
  return top;
}

// The legacy completions logprobs object over the tokens a choice shows.
json completion_logprobs(const CompletionCall& call, const Job& job, const Choice& choice,
                         const Tokenizer& tok) {
  json tokens = json::array(), values = json::array(), tops = json::array(),
       offsets = json::array();
  const auto& prompt = job.request().prompt.tokens;
  size_t offset = 0;
  if (call.echo) {
    const auto plps = job.prompt_logprobs();
    for (size_t t = 0; t < prompt.size(); ++t) {
      const auto piece = tok.piece(prompt[t], t == 0);
      tokens.push_back(piece);
      offsets.push_back(offset);
      offset += piece.size();
      if (t == 0 || t >= plps.size()) {
        values.push_back(nullptr);
        tops.push_back(nullptr);
      } else {
        values.push_back(plps[t].logprob);
        tops.push_back(top_object(tok, plps[t]));
      }
    }
  } else {
    offset = tok.decode(prompt).size();
  }
  for (const auto& lp : choice.logprobs) {
    const auto piece = tok.piece(lp.token, false);
    tokens.push_back(piece);
    offsets.push_back(offset);
    offset += piece.size();
    values.push_back(lp.logprob);
    tops.push_back(top_object(tok, lp));
  }
  return json{{"tokens", tokens},
              {"token_logprobs", values},
              {"top_logprobs", tops},
              {"text_offset", offsets}};
}

// Chat's logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
json chat_logprobs(const std::vector<TokenLogprob>& lps, const Tokenizer& tok) {
  auto bytes = [](const std::string& s) {
    std::vector<int> b;
    for (unsigned char c : s) b.push_back(c);
    return b;
  };
  json content = json::array();
  for (const auto& lp : lps) {
    const auto piece = tok.piece(lp.token, false);
    json top = json::array();
    for (const auto& [id, v] : lp.top) {
      const auto p = tok.piece(id, false);
      top.push_back({{"token", p}, {"logprob", v}, {"bytes", bytes(p)}});
    }
    content.push_back({{"token", piece},
                       {"logprob", lp.logprob},
                       {"bytes", bytes(piece)},
                       {"top_logprobs", top}});
  }
  return json{{"content", content}};
}

// A choice's text: the continuation cut before the first stop string, after the prompt's
// text with echo. A chat reply stands alone, so its first piece has no leading separator.
std::string choice_text(const CompletionCall& call, const Job& job, const Choice& choice,
                        const Tokenizer& tok) {
  std::string text;
  for (size_t i = 0; i < choice.tokens.size(); ++i)
    text += tok.piece(choice.tokens[i], call.chat && i == 0);
  text = cut_at_stop(text, call.stop);
  return call.echo && !call.chat ? tok.decode(job.request().prompt.tokens) + text : text;
}

json finish_value(const Choice& choice) {
  // A cancelled choice only happens on shutdown or disconnect; report it as cut short.
  if (choice.finish_reason.empty()) return nullptr;
  return choice.finish_reason == "cancelled" ? json("length") : json(choice.finish_reason);
}

}  // namespace

json error_body(int status, const std::string& message, const std::string& param,
                const std::string& type) {
  return json{{"error",
               {{"message", message},
                {"type", type},
                {"param", param.empty() ? json(nullptr) : json(param)},
                {"code", status}}}};
}

CompletionCall parse_completion(const json& body, const ServedModel& model, bool chat) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  const json* name = field(body, "model");
  if (name && !name->is_string()) bad("model", "'model' must be a string");
  CompletionCall call;
  call.chat = chat;
  SamplingOptions s;
  s.max_tokens = get_int(body, chat ? "max_completion_tokens" : "max_tokens", -1, 0, 1 << 30);
  if (chat && s.max_tokens < 0) s.max_tokens = get_int(body, "max_tokens", -1, 0, 1 << 30);
  if (s.max_tokens < 0) s.max_tokens = chat ? model.config->max_seq_len : 16;
  s.temperature = get_number(body, "temperature", 1.0);
  if (s.temperature < 0) bad("temperature", "'temperature' must be >= 0");
  s.top_p = get_number(body, "top_p", 1.0);
  if (!(s.top_p > 0 && s.top_p <= 1)) bad("top_p", "'top_p' must be in (0, 1]");
  s.top_k = get_int(body, "top_k", 0, -1, INT64_MAX);
  if (s.top_k < 0) s.top_k = 0;  // -1 means off, as in vLLM
  if (field(body, "seed"))
    s.seed = static_cast<uint64_t>(get_int(body, "seed", 0, INT64_MIN, INT64_MAX));
  else
    s.seed = std::random_device{}() * 0x100000001ULL + std::random_device{}();
  s.vocab_limit = model.tokenizer->vocab_size();
  if (auto eos = model.tokenizer->eos(); eos && !get_bool(body, "ignore_eos", false))
    s.stop_tokens.push_back(*eos);
  const int64_t n = get_int(body, "n", 1, 1, model.parallel);
  if (const json* b = field(body, "best_of"); b && get_int(body, "best_of", 1, 1, 1 << 20) != n)
    bad("best_of", "'best_of' other than n is not supported");
  for (const char* k : {"presence_penalty", "frequency_penalty"})
    if (get_number(body, k, 0) != 0) bad(k, std::string("'") + k + "' is not supported (use 0)");
  if (const json* b = field(body, "logit_bias"); b && !(b->is_object() && b->empty()))
    bad("logit_bias", "'logit_bias' is not supported");
  if (const json* x = field(body, "suffix");
      x && !(x->is_string() && x->get<std::string>().empty()))
    bad("suffix", "'suffix' is not supported");

  if (const json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      call.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > kMaxStops)
        bad("stop", "'stop' takes at most " + std::to_string(kMaxStops) + " strings");
      for (const auto& x : *stop) {
        if (!x.is_string()) bad("stop", "'stop' must be a string or a list of strings");
        call.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or a list of strings");
    }
    for (const auto& x : call.stop)
      if (x.empty()) bad("stop", "a stop string must not be empty");
  }
  call.stream = get_bool(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    call.include_usage = get_bool(*so, "include_usage", false);
  }
  call.routes = get_bool(body, "routes", false);
  if (chat) {
    if (get_bool(body, "logprobs", false))
      call.logprobs = get_int(body, "top_logprobs", 0, 0, kMaxLogprobs);
  } else {
    call.echo = get_bool(body, "echo", false);
    call.logprobs = get_int(body, "logprobs", -1, 0, kMaxLogprobs);
  }
  std::shared_ptr<const ForcedPath> force;
  if (const json* f = field(body, "force")) {
    try {
      auto path = std::make_shared<ForcedPath>(ForcedPath::from_json(*f));
      path->validate(model.config->core_depth, model.config->library_size,
                     model.config->router_skip);
      force = std::move(path);
    } catch (const Error& e) {
      bad("force", std::string("'force': ") + e.what());
    }
  }

  std::vector<std::vector<int64_t>> prompts;
  if (chat)
    prompts.push_back(parse_messages(body, model));
  else
    prompts = parse_prompts(body, model);
  const Tokenizer* tok = model.tokenizer;
  for (auto& ids : prompts) {
    Request r;
    r.prompt = tok->prompt(std::move(ids));
    r.sampling = s;
    r.n = n;
    r.logprobs = call.logprobs;
    r.echo = call.echo;
    r.force = force;
    if (!call.stop.empty()) {
      auto stops = call.stop;
      r.stop = [tok, stops](const std::vector<int64_t>& generated) {
        return find_stop(tok->continuation(generated), stops) != std::string::npos;
      };
    }
    call.requests.push_back(std::move(r));
  }
  return call;
}

json token_routes(const std::vector<int64_t>& prompt, const Choice& choice) {
  std::map<int64_t, std::vector<const RouteRecord*>> by_depth;  // each in order of position
  for (const auto& r : choice.routes) by_depth[r.depth].push_back(&r);
  for (auto& [depth, list] : by_depth)
    std::stable_sort(list.begin(), list.end(), [](const RouteRecord* a, const RouteRecord* b) {
      return a->position < b->position;
    });
  const size_t generated = choice.tokens.size();
  const size_t total = prompt.size() + generated;
  const size_t read = prompt.size() + (generated > 0 ? generated - 1 : 0);
  json out = json::array();
  for (size_t t = 0; t < total; ++t) {
    if (t >= read) {
      out.push_back(nullptr);
      continue;
    }
    json windows = json::array();
    for (const auto& [depth, list] : by_depth) {
      const RouteRecord* hit = nullptr;
      for (const auto* r : list)
        if (r->position <= static_cast<int64_t>(t)) hit = r;
      if (!hit) continue;
      windows.push_back({{"depth", depth},
                         {"window", hit->window},
                         {"expert", hit->expert},
                         {"gate", hit->gate},
                         {"probs", hit->probs},
                         {"forced", hit->forced_expert || hit->forced_gate}});
    }
    out.push_back({{"position", t},
                   {"token", t < prompt.size() ? prompt[t] : choice.tokens[t - prompt.size()]},
                   {"windows", windows}});
  }
  return out;
}

json completion_response(const CompletionCall& call, const std::vector<std::shared_ptr<Job>>& jobs,
                         const ServedModel& model, const std::string& id, int64_t created) {
  const Tokenizer& tok = *model.tokenizer;
  json choices = json::array();
  int64_t index = 0;
  for (const auto& job : jobs) {
    const auto all = job->choices();
    for (const auto& choice : all) {
      json c = {{"index", index++}, {"finish_reason", finish_value(choice)}};
      const auto text = choice_text(call, *job, choice, tok);
      if (call.chat) {
        c["message"] = {{"role", "assistant"}, {"content", text}};
        c["logprobs"] = call.logprobs >= 0 ? chat_logprobs(choice.logprobs, tok) : json(nullptr);
      } else {
        c["text"] = text;
        c["logprobs"] =
            call.logprobs >= 0 ? completion_logprobs(call, *job, choice, tok) : json(nullptr);
      }
      if (call.routes) c["routes"] = token_routes(job->request().prompt.tokens, choice);
      choices.push_back(std::move(c));
    }
  }
  return json{{"id", id},           {"object", call.chat ? "chat.completion" : "text_completion"},
              {"created", created}, {"model", model.id},
              {"choices", choices}, {"usage", usage(jobs)}};
}

json stream_chunk(const CompletionCall& call, const Job& job, const Choice& choice, int64_t index,
                  StreamState& state, const ServedModel& model, const std::string& id,
                  int64_t created) {
  if (state.finished) return nullptr;
  const Tokenizer& tok = *model.tokenizer;
  const bool finished = !choice.finish_reason.empty();
  const size_t before = state.seen_tokens;
  for (; state.seen_tokens < choice.tokens.size(); ++state.seen_tokens)
    state.text += tok.piece(choice.tokens[state.seen_tokens], call.chat && state.seen_tokens == 0);
  // Release text up to the first stop string once finished, else up to where no stop string
  // can still begin (all but the longest one's length - 1).
  if (call.echo && !call.chat && before == 0 && state.prefix.empty())
    state.prefix = tok.decode(job.request().prompt.tokens);
  const std::string text = state.prefix + cut_at_stop(state.text, call.stop);
  size_t ready = text.size();
  if (!finished) {
    for (const auto& x : call.stop)
      ready = std::min(ready, text.size() - std::min(text.size(), x.size() - 1));
    // A byte-level token can end inside a character: hold its first bytes back until the
    // character is whole, so that every delta is valid UTF-8.
    ready = complete_utf8_prefix(std::string_view(text).substr(0, ready));
  }
  const std::string delta =
      ready > state.sent_text ? text.substr(state.sent_text, ready - state.sent_text) : "";
  if (delta.empty() && !finished && state.seen_tokens == before) return nullptr;
  json c = {{"index", index}, {"finish_reason", finished ? finish_value(choice) : json(nullptr)}};
  if (call.chat) {
    json d = {{"content", delta}};
    if (before == 0) d["role"] = "assistant";
    c["delta"] = d;
    c["logprobs"] = nullptr;
    if (call.logprobs >= 0) {
      const auto from =
          choice.logprobs.begin() + static_cast<long>(std::min(before, choice.logprobs.size()));
      c["logprobs"] = chat_logprobs({from, choice.logprobs.end()}, tok);
    }
  } else {
    c["text"] = delta;
    c["logprobs"] = nullptr;
    if (call.logprobs >= 0 && finished) c["logprobs"] = completion_logprobs(call, job, choice, tok);
  }
  if (call.routes && finished) c["routes"] = token_routes(job.request().prompt.tokens, choice);
  state.sent_text = std::max(state.sent_text, ready);
  state.finished = finished;
  return json{{"id", id},
              {"object", call.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model.id},
              {"choices", json::array({c})}};
}

json usage_chunk(const CompletionCall& call, const std::vector<std::shared_ptr<Job>>& jobs,
                 const ServedModel& model, const std::string& id, int64_t created) {
  return json{{"id", id},
              {"object", call.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model.id},
              {"choices", json::array()},
              {"usage", usage(jobs)}};
}

json tokenize(const json& body, const ServedModel& model) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  const json* p = field(body, "prompt");
  if (!p || !p->is_string()) bad("prompt", "'prompt' must be a string");
  get_bool(body, "add_special_tokens", true);  // checked; no tokenizer here adds any
  const auto ids = encode(model, p->get<std::string>(), "prompt");
  return json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", model.config->max_seq_len}};
}

json detokenize(const json& body, const ServedModel& model) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  const json* t = field(body, "tokens");
  if (!t || !t->is_array()) bad("tokens", "'tokens' must be a list of token ids");
  std::vector<int64_t> ids;
  for (const auto& x : *t) {
    if (!x.is_number_integer() || (x.is_number_unsigned() && x.get<uint64_t>() > INT64_MAX) ||
        x.get<int64_t>() < 0 || x.get<int64_t>() >= model.tokenizer->vocab_size())
      bad("tokens", "token " + json_text(x) + " is not an id in [0, " +
                        std::to_string(model.tokenizer->vocab_size()) + ")");
    ids.push_back(x.get<int64_t>());
  }
  return json{{"prompt", model.tokenizer->decode(ids)}};
}

json tokenizer_info(const ServedModel& model) {
  const Tokenizer& tok = *model.tokenizer;
  auto text = [&](std::optional<int64_t> id) {
    return id ? json(tok.piece(*id, true)) : json(nullptr);
  };
  return json{{"tokenizer", tok.name()},
              {"vocab_size", tok.vocab_size()},
              {"eos_token", text(tok.eos())},
              {"eos_token_id", tok.eos() ? json(*tok.eos()) : json(nullptr)},
              {"bos_token", text(tok.bos())},
              {"bos_token_id", tok.bos() ? json(*tok.bos()) : json(nullptr)},
              {"pad_token", text(tok.pad())},
              {"pad_token_id", tok.pad() ? json(*tok.pad()) : json(nullptr)},
              {"add_bos_token", false},
              {"model_max_length", model.config->max_seq_len},
              {"chat_template", "{{ messages[-1]['content'] }}"}};
}

json models_list(const ServedModel& model, int64_t created) {
  return json{{"object", "list"},
              {"data", json::array({{{"id", model.id},
                                     {"object", "model"},
                                     {"created", created},
                                     {"owned_by", "lol"},
                                     {"max_model_len", model.config->max_seq_len},
                                     {"family", enum_name(model.config->family)},
                                     {"tokenizer", model.tokenizer->name()}}})}};
}

}  // namespace lol::serve

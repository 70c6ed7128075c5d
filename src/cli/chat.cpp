// `deepinfer chat`: reads one user message per line from stdin, renders the whole conversation with the model's
// chat encoding (serving.md §1.3: V4 / V4.1 templates, control tokens only from template text), streams the
// reply, and keeps the answer (not the reasoning, which later turns drop) in the history.
#include "cli/chat.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>

#include "deepinfer/engine.h"

namespace deepinfer::cli {

namespace {

struct ChatArgs {
  std::string model_dir;
  std::string tokenizer;
  std::string system;
  std::string numerics = "official";
  bool thinking = false;
  int max_tokens = 256;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int64_t seed = -1;
};

// Streams one reply to stdout and returns it whole; a rejected or failed request is an error.
std::string stream_reply(Engine& engine, std::vector<int32_t> prompt, const ChatArgs& a) {
  Request r;
  r.prompt_token_ids = std::move(prompt);
  r.params.max_tokens = a.max_tokens;
  r.params.temperature = a.temperature;
  r.params.top_p = a.top_p;
  if (a.seed >= 0) r.params.seed = uint64_t(a.seed);
  RequestStream stream = engine.submit(std::move(r));
  std::string reply;
  Event ev;
  while (stream.next(ev)) {
    std::cout << ev.text_delta << std::flush;
    reply += ev.text_delta;
    if (ev.terminal() && (ev.reason == FinishReason::Rejected || ev.reason == FinishReason::Error))
      throw Error(ev.message);
  }
  std::cout << "\n";
  return reply;
}

int run_chat(const ChatArgs& a) {
  EngineOptions eo;
  eo.model = a.model_dir;
  eo.tokenizer = a.tokenizer;
  eo.numerics = a.numerics;
  eo = EngineOptions::from_env(eo);
  auto engine = Engine::create(eo);
  const bool interactive = ::isatty(STDIN_FILENO);
  if (interactive) std::fprintf(stderr, "[chat] one message per line; /reset clears the history, /exit quits\n");

  nlohmann::json messages = nlohmann::json::array();
  if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
  const size_t preamble = messages.size();
  std::string line;
  while (true) {
    if (interactive) std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line == "/reset") {
      messages.erase(messages.begin() + long(preamble), messages.end());
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    std::string reply = stream_reply(*engine, engine->encode_chat(messages.dump(), a.thinking), a);
    // The answer joins the history; reasoning of past turns is dropped by the template anyway (serving.md §1.3).
    messages.push_back({{"role", "assistant"}, {"content", engine->parse_chat(reply, a.thinking).content}});
  }
  return 0;
}

}  // namespace

std::function<int()> add_chat_command(CLI::App& app) {
  auto args = std::make_shared<ChatArgs>();
  auto* c = app.add_subcommand("chat", "Chat through the model's V4 / V4.1 chat encoding (one message per line)");
  c->add_option("--model", args->model_dir, "Model directory (config.json + safetensors)")->required();
  c->add_option("--tokenizer", args->tokenizer, "tokenizer.json of the model")->required();
  c->add_option("--system", args->system, "System prompt");
  c->add_flag("--thinking", args->thinking, "Thinking mode (the reply starts with reasoning)");
  c->add_option("--max-tokens", args->max_tokens, "Tokens per reply at most")->check(CLI::PositiveNumber);
  c->add_option("--temperature", args->temperature, "0 = greedy (default)");
  c->add_option("--top-p", args->top_p, "Nucleus sampling mass in (0, 1]");
  c->add_option("--seed", args->seed, "Generator seed (default: derived from the request id)");
  c->add_option("--numerics", args->numerics, "official, fp32, fp32-cache-quant (see generate --help)");
  return [c, args]() { return *c ? run_chat(*args) : -1; };
}

}  // namespace deepinfer::cli

// deepinfer command-line entry point. Subcommands use only the public model API (DESIGN.md principle 3).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "model/model.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    long v = 0;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > INT32_MAX)
      throw deepinfer::Error("--prompt-ids: '" + item + "' is not a token id");
    ids.push_back(int32_t(v));
  }
  if (ids.empty()) throw deepinfer::Error("--prompt-ids: no token ids given");
  return ids;
}

struct GenerateArgs {
  std::string model_dir;
  std::string prompt_ids;
  int max_tokens = 32;
  std::string numerics = "official";
  bool quiet = false;
};

deepinfer::NumericsOptions numerics_from_name(const std::string& name) {
  deepinfer::NumericsOptions n;
  if (name == "official") return n;
  if (name == "fp32") return {false, false, false};             // what HF transformers deepseek_v4 computes
  if (name == "fp32-cache-quant") return {true, false, false};  // what NeMo Automodel deepseek_v41 computes
  throw deepinfer::Error("--numerics: unknown mode '" + name + "' (official, fp32, fp32-cache-quant)");
}

int run_generate(const GenerateArgs& a) {
  std::vector<int32_t> prompt = parse_ids(a.prompt_ids);
  deepinfer::ModelOptions options;
  options.numerics = numerics_from_name(a.numerics);
  options.show_progress = !a.quiet;
  auto model = deepinfer::load_model(a.model_dir, options);
  int64_t vocab = model->config().vocab_size;
  for (int32_t id : prompt)
    if (id >= vocab)
      throw deepinfer::Error("--prompt-ids: token id " + std::to_string(id) + " is outside the vocabulary (" +
                             std::to_string(vocab) + ")");

  auto seq = model->new_sequence();
  auto t0 = Clock::now();
  deepinfer::Tensor logits = model->forward(*seq, prompt);
  auto t1 = Clock::now();
  std::vector<int32_t> generated;
  const float* last = logits.row(int64_t(prompt.size()) - 1);
  for (int i = 0; i < a.max_tokens; ++i) {
    int32_t next = int32_t(std::max_element(last, last + vocab) - last);
    generated.push_back(next);
    if (next == model->config().eos_token_id || i + 1 == a.max_tokens) break;
    logits = model->forward(*seq, std::span<const int32_t>(&next, 1));
    last = logits.row(0);
  }
  auto t2 = Clock::now();

  for (size_t i = 0; i < generated.size(); ++i) std::cout << (i ? "," : "") << generated[i];
  std::cout << "\n";
  if (!a.quiet) {
    double prefill_s = std::chrono::duration<double>(t1 - t0).count();
    double decode_s = std::chrono::duration<double>(t2 - t1).count();
    std::fprintf(stderr, "[generate] prompt %zu tokens in %.3f s (%.1f tok/s); %zu tokens decoded in %.3f s\n",
                 prompt.size(), prefill_s, double(prompt.size()) / std::max(prefill_s, 1e-9), generated.size(),
                 decode_s);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"deepinfer: inference engine for DeepSeek V4 / V4.1"};
  app.require_subcommand(1);

  GenerateArgs gen;
  auto* generate = app.add_subcommand("generate", "Greedy generation from token ids");
  generate->add_option("--model", gen.model_dir, "Model directory (config.json + safetensors)")->required();
  generate->add_option("--prompt-ids", gen.prompt_ids, "Comma-separated prompt token ids")->required();
  generate->add_option("--max-tokens", gen.max_tokens, "Tokens to generate")->check(CLI::PositiveNumber);
  generate->add_option("--numerics", gen.numerics,
                       "official (model semantics), fp32 (as HF deepseek_v4), fp32-cache-quant (as NeMo deepseek_v41)");
  generate->add_flag("--quiet", gen.quiet, "Print only the generated ids");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*generate) return run_generate(gen);
  } catch (const deepinfer::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

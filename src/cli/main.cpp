// deepinfer command-line entry point. Subcommands use only the public API in include/deepinfer/
// (DESIGN.md principle 3).
//
//   deepinfer generate --model DIR --prompt-ids 0,10,20 [--max-tokens N] [sampling flags]
//   deepinfer generate --model DIR --input requests.jsonl --output results.jsonl [sampling flags]
//   deepinfer launch --nproc N -- deepinfer generate ... --data-parallel N   (the ranks as processes; rank 0 prints)
//
// JSONL input: one request per line, {"prompt_token_ids": [...]} or {"prompt": "..."} (needs --tokenizer),
// optionally "id" and any sampling field (temperature, top_p, top_k, min_p, repetition_penalty,
// presence_penalty, frequency_penalty, max_tokens, stop, stop_token_ids, ignore_eos, logprobs, seed); the
// flags give the defaults. Output: one line per input line, in order: {"index", "id", "prompt_token_ids",
// "token_ids", "text", "finish_reason", "message", "logprobs"}. A bad line is answered with
// finish_reason "rejected" and a message naming the line and the field.
#ifdef DEEPINFER_WITH_CUDA
#include "model/gpu/backend.h"
#endif
#include <CLI/CLI.hpp>

#include "cli/chat.h"
#include "cli/launch_command.h"
#include "cli/plan_command.h"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "deepinfer/engine.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// Why this binary cannot run a data-parallel group on the GPU (--data-parallel N > 1 with device cuda), or null when
// it can: that needs the CUDA backend and the library deepinfer_gpu_dp, built only where NCCL was found
// (CMakeLists.txt, cmake/nccl.cmake).
const char* gpu_data_parallel_missing() {
#if defined(DEEPINFER_WITH_GPU_DATA_PARALLEL)
  return nullptr;
#elif defined(DEEPINFER_WITH_CUDA)
  return "this deepinfer was built with the CUDA backend but without NCCL (cmake/nccl.cmake found no nccl.h / "
         "libnccl.so.2, or DEEPINFER_NCCL=OFF); install it (pip install nvidia-nccl-cu13) and configure the build "
         "again, or run with --data-parallel 1";
#else
  return "this deepinfer was built without the CUDA backend (a CPU-only build: DEEPINFER_CUDA=OFF or no nvcc); "
         "build it with CUDA and NCCL (cmake/cuda.cmake, cmake/nccl.cmake; pip install nvidia-nccl-cu13), or run "
         "with --device cpu";
#endif
}

std::vector<int32_t> parse_ids(const std::string& flag, const std::string& text) {
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
      throw deepinfer::Error(flag + ": '" + item + "' is not a token id");
    ids.push_back(int32_t(v));
  }
  return ids;
}

struct GenerateArgs {
  std::string model_dir;
  std::string tokenizer;
  std::string prompt_ids;
  std::string prompt;
  std::string input;
  std::string output;
  std::string numerics = "official";
  std::string device;
  int max_model_len = 0;
  int data_parallel = 1;
  int expert_parallel = 1;
  int eplb_window = 128;
  int eplb_redundant = 0;
  int eplb_rebalance_steps = 0;
  double eplb_rebalance_min_gain = 0.02;
  bool sync = false;
  bool random_weights = false;
  bool quiet = false;
  // Sampling defaults (greedy unless --temperature is given).
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int max_tokens = 32;
  std::string stop_ids;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int logprobs = -1;
  int64_t seed = -1;
  // Engine.
  int max_batch_tokens = 2048;
  int max_num_seqs = 64;
  int prefill_chunk = 512;
  bool batch_invariant = false;
};

deepinfer::SamplingParams default_params(const GenerateArgs& a) {
  deepinfer::SamplingParams p;
  p.temperature = a.temperature;
  p.top_p = a.top_p;
  p.top_k = a.top_k;
  p.min_p = a.min_p;
  p.repetition_penalty = a.repetition_penalty;
  p.presence_penalty = a.presence_penalty;
  p.frequency_penalty = a.frequency_penalty;
  p.max_tokens = a.max_tokens;
  p.stop_token_ids = parse_ids("--stop-ids", a.stop_ids);
  p.stop = a.stop;
  p.ignore_eos = a.ignore_eos;
  p.logprobs = a.logprobs;
  if (a.seed >= 0) p.seed = uint64_t(a.seed);
  return p;
}

// One JSONL line -> request; throws deepinfer::Error naming the field.
deepinfer::Request request_from_json(const json& j, const deepinfer::SamplingParams& defaults) {
  if (!j.is_object()) throw deepinfer::Error("the line is not a JSON object");
  deepinfer::Request r;
  r.params = defaults;
  auto get = [&](const char* key, auto& field) {
    if (!j.contains(key)) return;
    try {
      j.at(key).get_to(field);
    } catch (const std::exception&) {
      throw deepinfer::Error(std::string(key) + ": wrong type (" + j.at(key).dump() + ")");
    }
  };
  get("prompt_token_ids", r.prompt_token_ids);
  get("prompt", r.prompt);
  get("temperature", r.params.temperature);
  get("top_p", r.params.top_p);
  get("top_k", r.params.top_k);
  get("min_p", r.params.min_p);
  get("repetition_penalty", r.params.repetition_penalty);
  get("presence_penalty", r.params.presence_penalty);
  get("frequency_penalty", r.params.frequency_penalty);
  get("max_tokens", r.params.max_tokens);
  get("stop_token_ids", r.params.stop_token_ids);
  get("ignore_eos", r.params.ignore_eos);
  get("logprobs", r.params.logprobs);
  if (j.contains("stop")) {
    if (j["stop"].is_string()) r.params.stop = {j["stop"].get<std::string>()};
    else get("stop", r.params.stop);
  }
  if (j.contains("seed")) {
    if (!j["seed"].is_number_unsigned() && !j["seed"].is_null())
      throw deepinfer::Error("seed: must be a non-negative integer");
    if (j["seed"].is_null()) r.params.seed.reset();
    else r.params.seed = j["seed"].get<uint64_t>();
  }
  static const char* known[] = {"id", "prompt_token_ids", "prompt", "temperature", "top_p", "top_k", "min_p",
                                "repetition_penalty", "presence_penalty", "frequency_penalty", "max_tokens",
                                "stop_token_ids", "ignore_eos", "logprobs", "stop", "seed"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return it.key() == k; }) ==
        std::end(known))
      throw deepinfer::Error(it.key() + ": unknown field");
  return r;
}

json output_to_json(size_t index, const json& id, const deepinfer::RequestOutput& o, bool text) {
  json j;
  j["index"] = index;
  if (!id.is_null()) j["id"] = id;
  j["prompt_token_ids"] = o.prompt_token_ids;
  j["token_ids"] = o.token_ids;
  if (text) j["text"] = o.text;
  j["finish_reason"] = deepinfer::finish_reason_name(o.finish_reason);
  if (!o.message.empty()) j["message"] = o.message;
  if (!o.logprobs.empty()) {
    json lps = json::array();
    for (const auto& lp : o.logprobs) {
      json top = json::array();
      for (const auto& t : lp.top) top.push_back({{"token_id", t.token_id}, {"logprob", t.logprob}});
      lps.push_back({{"token_id", lp.token_id}, {"logprob", lp.logprob}, {"top", top}});
    }
    j["logprobs"] = lps;
  }
  return j;
}

int run_generate(const GenerateArgs& a) {
  int sources = !a.prompt_ids.empty() + !a.prompt.empty() + !a.input.empty();
  if (sources != 1) throw deepinfer::Error("give exactly one of --prompt-ids, --prompt, --input");
  deepinfer::SamplingParams defaults = default_params(a);

  deepinfer::EngineOptions eo;
  eo.model = a.model_dir;
  eo.tokenizer = a.tokenizer;
  eo.numerics = a.numerics;
  eo.show_progress = !a.quiet;
  eo.max_batch_tokens = a.max_batch_tokens;
  eo.max_num_seqs = a.max_num_seqs;
  eo.prefill_chunk = std::min(a.prefill_chunk, a.max_batch_tokens);
  eo.batch_invariant = a.batch_invariant;
  eo.max_model_len = a.max_model_len;
  eo.async_scheduling = !a.sync;
  eo.random_weights = a.random_weights;
  eo.data_parallel = a.data_parallel;
  eo.expert_parallel = a.expert_parallel;
  eo.eplb_window_steps = a.eplb_window;
  eo.eplb_redundant_experts = a.eplb_redundant;
  eo.eplb_rebalance_steps = a.eplb_rebalance_steps;
  eo.eplb_rebalance_min_gain = a.eplb_rebalance_min_gain;
  eo = deepinfer::EngineOptions::from_env(eo);
  if (!a.device.empty()) eo.device = a.device;  // the flag wins over DEEPINFER_DEVICE
  if (a.batch_invariant) eo.batch_invariant = true;
  if (eo.data_parallel > 1 && eo.device == "cuda")
    if (const char* missing = gpu_data_parallel_missing())
      throw deepinfer::Error("--data-parallel " + std::to_string(eo.data_parallel) + " on device cuda: " + missing);

  // Under `deepinfer launch --nproc N` (WORLD_SIZE set) --data-parallel N makes the launched processes the ranks:
  // rank 0 reads the requests, admits them over all the ranks and prints the outputs; the other ranks serve
  // (docs/data_parallel.md "Ranks as processes").
  std::unique_ptr<deepinfer::Engine> engine;
  if (const char* world = std::getenv("WORLD_SIZE"); eo.data_parallel > 1 && world && *world) {
    eo.process_group = true;
    engine = deepinfer::Engine::create(eo);
    if (engine->group_rank() > 0) {
      engine->serve();
      return 0;
    }
  }

  std::vector<deepinfer::Request> requests;
  std::vector<json> ids;
  std::vector<std::string> line_errors;  // per request: a parse error answered as "rejected"
  if (!a.input.empty()) {
    std::ifstream in(a.input);
    if (!in) throw deepinfer::Error("--input: cannot open '" + a.input + "'");
    std::string line;
    size_t lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      deepinfer::Request r;
      json id;
      std::string err;
      try {
        json j = json::parse(line);
        if (j.is_object() && j.contains("id")) id = j["id"];
        r = request_from_json(j, defaults);
      } catch (const json::exception& e) {
        err = a.input + ":" + std::to_string(lineno) + ": not JSON (" + e.what() + ")";
      } catch (const deepinfer::Error& e) {
        err = a.input + ":" + std::to_string(lineno) + ": " + e.what();
      }
      requests.push_back(std::move(r));
      ids.push_back(id);
      line_errors.push_back(err);
    }
  } else {
    deepinfer::Request r;
    r.params = defaults;
    if (!a.prompt_ids.empty()) {
      r.prompt_token_ids = parse_ids("--prompt-ids", a.prompt_ids);
      if (r.prompt_token_ids.empty()) throw deepinfer::Error("--prompt-ids: no token ids given");
    } else {
      r.prompt = a.prompt;
    }
    requests.push_back(std::move(r));
    ids.push_back(nullptr);
    line_errors.push_back({});
  }

  if (!engine) engine = deepinfer::Engine::create(eo);
  auto t0 = Clock::now();
  std::vector<deepinfer::RequestStream> streams;
  for (size_t i = 0; i < requests.size(); ++i)
    if (line_errors[i].empty()) streams.push_back(engine->submit(std::move(requests[i])));
  std::vector<deepinfer::RequestOutput> outputs;
  size_t next_stream = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!line_errors[i].empty()) {
      deepinfer::RequestOutput o;
      o.finish_reason = deepinfer::FinishReason::Rejected;
      o.message = line_errors[i];
      outputs.push_back(std::move(o));
    } else {
      outputs.push_back(streams[next_stream++].collect());
    }
  }
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  size_t generated = 0;
  for (const auto& o : outputs) generated += o.token_ids.size();
  if (!a.input.empty()) {
    std::ofstream file;
    if (!a.output.empty()) {
      file.open(a.output);
      if (!file) throw deepinfer::Error("--output: cannot write '" + a.output + "'");
    }
    std::ostream& out = a.output.empty() ? std::cout : file;
    for (size_t i = 0; i < outputs.size(); ++i)
      out << output_to_json(i, ids[i], outputs[i], engine->has_tokenizer()).dump() << "\n";
  } else {
    const auto& o = outputs[0];
    if (o.finish_reason == deepinfer::FinishReason::Rejected || o.finish_reason == deepinfer::FinishReason::Error)
      throw deepinfer::Error(o.message);
    if (!a.output.empty()) {
      std::ofstream(a.output) << output_to_json(0, nullptr, o, engine->has_tokenizer()).dump() << "\n";
    } else if (!a.prompt.empty() && engine->has_tokenizer()) {
      std::cout << o.text << "\n";
    } else {
      for (size_t i = 0; i < o.token_ids.size(); ++i) std::cout << (i ? "," : "") << o.token_ids[i];
      std::cout << "\n";
    }
  }
  // A process group: every rank leaves together now; a failed group (a peer process died) is an error here.
  engine->serve();
  if (!a.quiet) {
    deepinfer::EngineStats st = engine->stats();
    // Where the steps' time went (the summary stays the last line).
    const double steps = double(std::max<uint64_t>(st.steps, 1));
    std::fprintf(stderr, "[generate] per step: host %.1f us, in the model %.1f us, %llu of %llu asynchronous",
                 st.host_seconds / steps * 1e6, st.model_wait_seconds / steps * 1e6,
                 (unsigned long long)st.async_steps, (unsigned long long)st.steps);
    if (st.device_busy_seconds > 0)
      std::fprintf(stderr, "; device busy %.3f s, idle between steps %.3f s (%.2f %%)", st.device_busy_seconds,
                   st.device_idle_seconds,
                   100.0 * st.device_idle_seconds / (st.device_busy_seconds + st.device_idle_seconds));
    std::fprintf(stderr, "\n");
    const deepinfer::EngineOptions& eo_now = engine->options();
    if (eo_now.expert_parallel > 1 && st.eplb_window_pairs == 0)
      std::fprintf(stderr, "[generate] moe_lb: no expert-load statistics (the model does not report its routing, "
                   "or --eplb-window 0)\n");
    else if (eo_now.expert_parallel > 1)  // a data-parallel group's: the sum of its ranks' counts
      std::fprintf(stderr, "[generate] moe_lb over %d expert-parallel ranks: %.3f contiguous, %.3f EPLB with %d "
                   "redundant slots (%llu steps, %llu routed pairs)\n", eo_now.expert_parallel,
                   st.moe_lb_contiguous, st.moe_lb_eplb, eo_now.eplb_redundant_experts,
                   (unsigned long long)st.eplb_window_steps, (unsigned long long)st.eplb_window_pairs);
    if (eo_now.eplb_rebalance_steps > 0)
      std::fprintf(stderr, "[generate] moe_lb of the placement in use: %.3f; %llu rebalances, %llu expert slots moved\n",
                   st.moe_lb_placed, (unsigned long long)st.eplb_rebalances, (unsigned long long)st.eplb_slots_moved);
    for (size_t r = 0; r < st.ranks.size(); ++r) {
      if (eo_now.process_group && r > 0) {  // rank 0 knows only what it admitted to another process
        std::fprintf(stderr, "[generate] rank %zu: %llu requests (its own process keeps its other counts)\n", r,
                     (unsigned long long)st.ranks[r].requests);
        continue;
      }
      std::fprintf(stderr, "[generate] rank %zu: %llu requests, %llu prefill + %llu decode tokens, %llu of %llu steps "
                   "without rows\n", r, (unsigned long long)st.ranks[r].requests,
                   (unsigned long long)st.ranks[r].prefill_tokens, (unsigned long long)st.ranks[r].decode_tokens,
                   (unsigned long long)st.ranks[r].empty_steps, (unsigned long long)st.ranks[r].steps);
    }
    std::fprintf(stderr,
                 "[generate] %zu requests, %zu tokens generated in %.3f s (%.1f tok/s); %llu steps, %llu prefill "
                 "tokens, %llu preemptions\n",
                 outputs.size(), generated, seconds, double(generated) / std::max(seconds, 1e-9),
                 (unsigned long long)st.steps, (unsigned long long)st.prefill_tokens,
                 (unsigned long long)st.preemptions);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef DEEPINFER_WITH_CUDA
  deepinfer::gpu::register_cuda_backend();
#endif
#ifdef DEEPINFER_WITH_GPU_DATA_PARALLEL
  deepinfer::gpu::register_cuda_data_parallel();  // after the backend: replaces its "needs NCCL" stand-in loader
#endif
  CLI::App app{"deepinfer: inference engine for DeepSeek V4 / V4.1"};
  app.require_subcommand(1);

  GenerateArgs gen;
  auto* g = app.add_subcommand("generate", "Generate from token ids, text, or a JSONL batch of requests");
  g->add_option("--model", gen.model_dir, "Model directory (config.json + safetensors)")->required();
  g->add_option("--tokenizer", gen.tokenizer, "tokenizer.json (text prompts, text output, stop strings)");
  g->add_option("--prompt-ids", gen.prompt_ids, "Comma-separated prompt token ids");
  g->add_option("--prompt", gen.prompt, "Prompt text (needs --tokenizer)");
  g->add_option("--input", gen.input, "JSONL file of requests (one per line)");
  g->add_option("--output", gen.output, "Write JSONL results here (default: stdout)");
  g->add_option("--max-tokens", gen.max_tokens, "Tokens to generate at most")->check(CLI::PositiveNumber);
  g->add_option("--temperature", gen.temperature, "0 = greedy (default)");
  g->add_option("--top-p", gen.top_p, "Nucleus sampling mass in (0, 1]");
  g->add_option("--top-k", gen.top_k, "Keep the k most likely tokens (0 = all)");
  g->add_option("--min-p", gen.min_p, "Drop tokens below min_p * p(max)");
  g->add_option("--repetition-penalty", gen.repetition_penalty, "> 0, 1 = off");
  g->add_option("--presence-penalty", gen.presence_penalty, "[-2, 2]");
  g->add_option("--frequency-penalty", gen.frequency_penalty, "[-2, 2]");
  g->add_option("--stop-ids", gen.stop_ids, "Comma-separated stop token ids");
  g->add_option("--stop", gen.stop, "Stop string (repeatable; needs --tokenizer)");
  g->add_flag("--ignore-eos", gen.ignore_eos, "Do not stop at the model's EOS token");
  g->add_option("--logprobs", gen.logprobs, "Return logprobs with this many alternatives (-1 = none)");
  g->add_option("--seed", gen.seed, "Per-request generator seed (default: derived from the request id)");
  g->add_option("--max-batch-tokens", gen.max_batch_tokens, "Tokens per engine step")->check(CLI::PositiveNumber);
  g->add_option("--max-num-seqs", gen.max_num_seqs, "Sequences per engine step")->check(CLI::PositiveNumber);
  g->add_option("--prefill-chunk", gen.prefill_chunk, "Largest prefill chunk")->check(CLI::PositiveNumber);
  g->add_flag("--batch-invariant", gen.batch_invariant, "Batch-invariant mode (also DEEPINFER_BATCH_INVARIANT=1)");
  g->add_option("--device", gen.device,
                "cpu (default) or cuda (GPU 0, or GPU r for data-parallel rank r; official numerics; DEEPINFER_DEVICE)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  g->add_flag("--random-weights", gen.random_weights,
              "With --device cuda: random weights of config.json's shapes (benchmarks; no checkpoint needed)");
  g->add_flag("--sync", gen.sync,
              "Synchronous scheduling: read every step's tokens before planning the next (debugging; default async)");
  g->add_option("--max-model-len", gen.max_model_len,
                "Longest prompt + output a request may reach (the GPU reserves caches for it; default 32768)")
      ->check(CLI::PositiveNumber);
  g->add_option("--data-parallel", gen.data_parallel,
                "Attention data-parallel ranks (default 1): each a model copy with its own scheduler, stepping in "
                "lockstep (CPU: threads of this process; --device cuda: rank r on GPU r, the V4 / V4.1 model's "
                "routed experts split over the ranks through NCCL, in builds with NCCL; under `deepinfer launch --nproc N`: the "
                "N processes, rank 0 reading the requests and printing the outputs)")
      ->check(CLI::PositiveNumber);
  g->add_option("--expert-parallel", gen.expert_parallel,
                "Report the EPLB moe_lb of this many expert-parallel ranks (default 1: off; the CPU and GPU models "
                "count their routed pairs)")
      ->check(CLI::PositiveNumber);
  g->add_option("--eplb-window", gen.eplb_window, "Steps of expert-load statistics (default 128, 0 = off)")
      ->check(CLI::NonNegativeNumber);
  g->add_option("--eplb-redundant", gen.eplb_redundant, "Redundant expert slots per layer: EPLB's moe_lb, and with --data-parallel N = --expert-parallel N "
                "on GPUs the slots the ranks load")
      ->check(CLI::NonNegativeNumber);
  g->add_option("--eplb-rebalance-steps", gen.eplb_rebalance_steps,
                "Move the experts to the EPLB placement of the window every N lockstep steps (default 0 = off; needs "
                "--data-parallel N = --expert-parallel N and a model that places its experts over the ranks: "
                "--device cuda)")
      ->check(CLI::NonNegativeNumber);
  g->add_option("--eplb-rebalance-min-gain", gen.eplb_rebalance_min_gain,
                "Skip a rebalance that lowers the window's moe_lb by less than this fraction (default 0.02)")
      ->check(CLI::Range(0.0, 0.999999));
  g->add_option("--numerics", gen.numerics,
                "official (model semantics), fp32 (as HF deepseek_v4), fp32-cache-quant (as NeMo deepseek_v41)");
  g->add_flag("--quiet", gen.quiet, "Print only the results");

  auto run_chat = deepinfer::cli::add_chat_command(app);
  auto run_plan = deepinfer::cli::add_plan_command(app);
  auto run_launch = deepinfer::cli::add_launch_command(app);

  CLI11_PARSE(app, argc, argv);
  try {
    if (*g) return run_generate(gen);
    if (int rc = run_chat(); rc >= 0) return rc;
    if (int rc = run_plan(); rc >= 0) return rc;
    if (int rc = run_launch(); rc >= 0) return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

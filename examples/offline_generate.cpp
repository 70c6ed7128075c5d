// Offline generation with the C++ API: a batch of requests with different sampling settings, then one
// request read as a stream of events. Usage: example_offline_generate MODEL_DIR
#include <cstdio>

#include "deepinfer/engine.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR\n", argv[0]);
    return 2;
  }
  deepinfer::EngineOptions options = deepinfer::EngineOptions::from_env();
  options.model = argv[1];
  std::unique_ptr<deepinfer::Engine> engine;
  try {
    engine = deepinfer::Engine::create(options);
  } catch (const deepinfer::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }

  // A batch: greedy, seeded temperature sampling with top-p, and top-k with penalties.
  std::vector<deepinfer::Request> batch(3);
  batch[0].prompt_token_ids = {0, 10, 20, 30};
  batch[0].params = deepinfer::SamplingParams::greedy(8);
  batch[1].prompt_token_ids = {0, 42};
  batch[1].params.temperature = 0.8f;
  batch[1].params.top_p = 0.9f;
  batch[1].params.seed = 1234;
  batch[1].params.max_tokens = 8;
  batch[2].prompt_token_ids = {0, 7, 7, 7};
  batch[2].params.top_k = 20;
  batch[2].params.repetition_penalty = 1.2f;
  batch[2].params.seed = 99;
  batch[2].params.max_tokens = 8;
  batch[2].params.logprobs = 2;
  for (const deepinfer::RequestOutput& out : engine->generate(batch)) {
    std::printf("request %llu: %s, tokens:", (unsigned long long)out.request_id,
                deepinfer::finish_reason_name(out.finish_reason));
    for (int32_t t : out.token_ids) std::printf(" %d", t);
    std::printf("\n");
    if (out.finish_reason != deepinfer::FinishReason::Length && out.finish_reason != deepinfer::FinishReason::Finished)
      return 1;
  }

  // Streaming: one event per generated token, then exactly one terminal event.
  deepinfer::Request r;
  r.prompt_token_ids = {0, 1, 2, 3};
  r.params.seed = 7;
  r.params.max_tokens = 6;
  deepinfer::RequestStream stream = engine->submit(r);
  deepinfer::Event event;
  int terminals = 0;
  while (stream.next(event)) {
    if (event.terminal()) {
      ++terminals;
      std::printf("stream: finish %s\n", deepinfer::finish_reason_name(event.reason));
    } else {
      std::printf("stream: token %d\n", event.token_ids.at(0));
    }
  }
  return terminals == 1 ? 0 : 1;
}

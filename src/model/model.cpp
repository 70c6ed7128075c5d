#include "model/model.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>

#include "model/families.h"
#include "runtime/sampler.h"

namespace deepinfer {

namespace {

std::mutex& backends_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, DeviceModelLoader>& backends() {
  static std::map<std::string, DeviceModelLoader> b;
  return b;
}

}  // namespace

void register_device_backend(const std::string& device, DeviceModelLoader loader) {
  std::lock_guard<std::mutex> lk(backends_mutex());
  backends()[device] = std::move(loader);
}

void Model::forward_batch(std::span<const BatchChunk> chunks, std::vector<std::vector<float>>& last_logits) const {
  last_logits.assign(chunks.size(), {});
  const int64_t vocab = config().vocab_size;
  for (size_t i = 0; i < chunks.size(); ++i) {
    Tensor logits = forward(*chunks[i].state, chunks[i].tokens);
    if (!chunks[i].want_logits || chunks[i].tokens.empty()) continue;
    const float* row = logits.row(int64_t(chunks[i].tokens.size()) - 1);
    last_logits[i].assign(row, row + vocab);
  }
}

namespace {

class ReadySampledStep : public SampledStep {
 public:
  explicit ReadySampledStep(std::vector<int32_t> t) : tokens_(std::move(t)) {}
  std::vector<int32_t> tokens() override { return tokens_; }

 private:
  std::vector<int32_t> tokens_;
};

}  // namespace

std::unique_ptr<SampledStep> Model::enqueue_sampled(std::span<const BatchChunk> chunks,
                                                    std::span<const ChunkSampling> sampling) const {
  DI_CHECK(sampling.size() == chunks.size(), "enqueue_sampled: " + std::to_string(sampling.size()) +
                                                 " sampling entries for " + std::to_string(chunks.size()) + " chunks");
  // Resolve the -k - 1 tokens against the previous call, then run the step as forward_batch does.
  std::vector<std::vector<int32_t>> resolved(chunks.size());
  std::vector<BatchChunk> plain(chunks.begin(), chunks.end());
  for (size_t i = 0; i < chunks.size(); ++i) {
    resolved[i].assign(chunks[i].tokens.begin(), chunks[i].tokens.end());
    for (int32_t& t : resolved[i]) {
      if (t >= 0) continue;
      const size_t k = size_t(-int64_t(t) - 1);
      DI_CHECK(k < previous_sampled_.size() && previous_sampled_[k] >= 0,
               "enqueue_sampled: token " + std::to_string(t) + " names no sampled token of the previous step");
      t = previous_sampled_[k];
    }
    plain[i].tokens = resolved[i];
  }
  std::vector<std::vector<float>> logits;
  forward_batch(plain, logits);
  // The host sampler, as the synchronous engine calls it (without penalties, their parameters are neutral).
  std::vector<int32_t> tokens(chunks.size(), -1);
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (!chunks[i].want_logits || logits[i].empty()) continue;
    const ChunkSampling& c = sampling[i];
    SamplingParams params;
    params.temperature = c.temperature;
    params.top_k = c.top_k;
    params.top_p = c.top_p;
    params.min_p = c.min_p;
    tokens[i] = runtime::sample(logits[i], params, runtime::PenaltyState{}, c.seed, c.position).token;
  }
  previous_sampled_ = tokens;
  return std::make_unique<ReadySampledStep>(std::move(tokens));
}

std::unique_ptr<Model> load_model(const std::string& dir, const ModelOptions& options) {
  namespace fs = std::filesystem;
  DI_CHECK(fs::is_directory(dir), "model: '" + dir + "' is not a directory");
  DI_CHECK(!options.random_weights || options.device != "cpu",
           "model: random weights are a device-backend benchmark option (--device cuda)");
  if (options.device != "cpu") {
    DeviceModelLoader loader;
    {
      std::lock_guard<std::mutex> lk(backends_mutex());
      auto it = backends().find(options.device);
      if (it != backends().end()) loader = it->second;
    }
    DI_CHECK(loader != nullptr, "model: device '" + options.device +
                                    "' is not available in this build (devices: cpu" +
                                    (backends().count("cuda") ? ", cuda" : "") +
                                    "; the CUDA backend needs nvcc at build time)");
    return loader(dir, options);
  }
  ModelConfig config = load_model_config((fs::path(dir) / "config.json").string());
  LoadProgress progress;
  if (options.show_progress) {
    progress = [](int done, int total, const std::string& file) {
      if (done < total) std::fprintf(stderr, "[load] shard %d/%d %s\n", done + 1, total, file.c_str());
    };
  }
  Checkpoint checkpoint = Checkpoint::open(dir, progress);
  if (config.family == ModelFamily::V4) return load_v4_model(std::move(config), std::move(checkpoint), options);
  return load_v41_model(std::move(config), std::move(checkpoint), options);
}

}  // namespace deepinfer

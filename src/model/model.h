// The forward-pass contract shared by the V4 and V4.1 CPU reference models (model-spec.md §3, §4).
// A Model owns immutable weights; a SequenceState owns everything one sequence caches between calls
// (window rings, compressed KV, index keys, compressor partial groups, Engram history: model-spec §6).
// forward() appends tokens to a sequence: one call with the whole prompt is a prefill, several calls
// are a chunked prefill, calls with one token are decode steps. All three give the same logits.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/tensor.h"
#include "model/config.h"

namespace deepinfer {

// Numerics switches of the reference path (model-spec.md §2, §8). The defaults are the model's own
// semantics; turning them off gives the arithmetic of a reference that omits them (HF V4 runs fp32
// without the FP8/FP4 fake-quant), so the engine can be compared bit-tight with either.
struct NumericsOptions {
  // FP8/FP4 quantize-dequantize of KV, index keys and GEMM activations (model-spec §2 "Fake-quant").
  bool fake_quant = true;
  // Round activations to bf16 where the official reference casts (after norms, sublayer outputs, ...).
  bool bf16_activations = true;
};

struct ModelOptions {
  NumericsOptions numerics;
  // Progress lines on stderr while loading ("[load] layer 3/43 ...").
  bool show_progress = true;
};

// Everything one sequence caches between forward calls; created by Model::new_sequence().
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  // Tokens already consumed (the position of the next token).
  virtual int64_t length() const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual std::unique_ptr<SequenceState> new_sequence() const = 0;
  // Consumes `tokens` at positions state.length() ... and returns fp32 logits [tokens.size(), vocab].
  virtual Tensor forward(SequenceState& state, std::span<const int32_t> tokens) const = 0;
};

// Reads config.json and the checkpoint in `dir` and builds the family's model. Throws deepinfer::Error
// with a message naming the file / tensor / field for any problem.
std::unique_ptr<Model> load_model(const std::string& dir, const ModelOptions& options = {});

}  // namespace deepinfer

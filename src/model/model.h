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
// semantics (the official inference code); turning parts off reproduces a reference that omits them:
//   HF transformers deepseek_v4 (fp32):  quantize_cache = false, quantize_activations = false, bf16 = false
//   NeMo Automodel deepseek_v41 (fp32):  quantize_cache = true,  quantize_activations = false, bf16 = false
struct NumericsOptions {
  // Quantize-dequantize of what the caches hold: window KV (FP8), compressed KV (FP8 on V4, FP4 e4m3-scaled
  // block 16 on V4.1), index keys and queries (FP4 ue8m0 block 32; on V4 after the Hadamard rotation).
  bool quantize_cache = true;
  // W8A8: FP8 block quantization of the input of every FP8 / FP4 weight GEMM (model-spec §2).
  bool quantize_activations = true;
  // Round activations to bf16 where the official reference casts (after norms, sublayer outputs, ...).
  bool bf16_activations = true;
};

// V4.1 SWA bounded replay ("YOCO prefill", model-spec §9; DEEPINFER_YOCO_PREFILL_TRUNCATION_MODE /
// DEEPINFER_YOCO_PREFILL_KEEP_TOKENS). In DecoderTail mode a forward call of n > keep_tokens tokens runs the
// layers after the candidate source only on its last keep_tokens rows (approximate: the tail's first rows see
// windows cut at the tail start). Logits rows before the tail are not computed and hold quiet NaN; the last
// row is always computed. Ignored by V4; a V4.1 config that breaks the preconditions (an Engram layer or a KV
// source after the candidate source) falls back to Exact with a one-line notice on stderr.
struct PrefillReplayOptions {
  enum class Mode { Exact, DecoderTail };
  Mode mode = Mode::Exact;
  int keep_tokens = 140;  // must be >= sliding_window in DecoderTail mode
};

struct ModelOptions {
  NumericsOptions numerics;
  PrefillReplayOptions prefill_replay;
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

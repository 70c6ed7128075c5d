// One factory per model family; load_model (model.cpp) picks by config.model_type.
#pragma once

#include <memory>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/model.h"

namespace deepinfer {

// model-spec.md §3: DeepSeek-V4-Flash (flat config, per-site mHC, CSA/HCA, hash MoE, hc_head).
std::unique_ptr<Model> load_v4_model(ModelConfig config, Checkpoint checkpoint, const ModelOptions& options);

// model-spec.md §4: DeepSeek-V4.1-Flash (composite config, single-pass mHC, CSA2 roles, Engram).
std::unique_ptr<Model> load_v41_model(ModelConfig config, Checkpoint checkpoint, const ModelOptions& options);

}  // namespace deepinfer

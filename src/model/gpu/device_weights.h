// Checkpoint tensors in device memory for the CUDA backend (issue 4): uploads that keep the official formats
// (FP8 e4m3 + e8m0 block scales, MXFP4 experts) for our kernels, dense tensors as fp32 or bf16, and the same
// shapes filled with random values on the device for the full-width benchmark model (no file that large can
// travel). Every upload validates dtype and shape through Checkpoint::expect, so a bad checkpoint fails by name.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/kernels.h"
#include "model/checkpoint.h"
#include "model/config.h"

namespace deepinfer::gpu {

using cuda::bf16;

// Owns the device buffers of a set of weights; views (raw pointers, Fp8Linear, Fp4Experts) point into them.
class DeviceArena {
 public:
  template <class T>
  T* alloc(size_t count) {
    buffers_.emplace_back(count * sizeof(T));
    bytes_ += count * sizeof(T);
    return buffers_.back().as<T>();
  }
  template <class T>
  T* upload(const T* host, size_t count) {
    T* p = alloc<T>(count);
    if (count) buffers_.back().upload(host, count * sizeof(T));
    return p;
  }
  // A copy in pinned, device-mapped host memory; returns the pointer kernels read it through.
  template <class T>
  const T* upload_to_host(const T* host, size_t count) {
    host_buffers_.emplace_back(count * sizeof(T));
    host_bytes_ += count * sizeof(T);
    if (count) std::memcpy(host_buffers_.back().host_ptr(), host, count * sizeof(T));
    return static_cast<const T*>(host_buffers_.back().device_ptr());
  }
  size_t bytes() const { return bytes_; }
  size_t host_bytes() const { return host_bytes_; }
  // Frees the buffer that starts at `ptr` (a layout replaced by a repacked copy); unknown pointers are ignored.
  void release(const void* ptr) {
    for (auto it = buffers_.begin(); it != buffers_.end(); ++it) {
      if (it->get() != ptr) continue;
      bytes_ -= it->bytes();
      buffers_.erase(it);
      return;
    }
  }

 private:
  std::vector<cuda::DeviceBuffer> buffers_;
  std::vector<cuda::MappedHostBuffer> host_buffers_;
  size_t bytes_ = 0, host_bytes_ = 0;
};

// A BF16 / F16 / F32 tensor of exactly `shape`, as fp32 or as bf16 (rounded to nearest even).
const float* upload_f32(DeviceArena& arena, const Checkpoint& ck, const std::string& name,
                        const std::vector<int64_t>& shape);
const bf16* upload_bf16(DeviceArena& arena, const Checkpoint& ck, const std::string& name,
                        const std::vector<int64_t>& shape);

// `<prefix>.weight` F8_E4M3 [n, k] with `<prefix>.scale` [ceil(n/B), ceil(k/B)] (F8_E8M0, or F32 powers of two),
// as the codes and e8m0 scales our FP8 kernels read.
cuda::Fp8Linear upload_fp8_linear(DeviceArena& arena, const Checkpoint& ck, const std::string& prefix, int64_t n,
                                  int64_t k, int block);

// A linear weight [n, k] in whatever format the checkpoint holds (FP8, MXFP4 or dense), dequantized to bf16 for
// the cuBLAS GEMMs of cuda/blas.h. Exact for FP8 / MXFP4 codes times power-of-two scales.
const bf16* upload_linear_as_bf16(DeviceArena& arena, const Checkpoint& ck, const std::string& prefix, int64_t n,
                                  int64_t k, int fp8_block);

// MXFP4 experts `<prefix><e>.<name>.weight` I8 [n, k/2] + `.scale` F8_E8M0 [n, k/32], e = 0 .. experts-1, with
// the weights of several names stacked along n per expert (w1 then w3 gives the fused [experts, 2 inter, k]).
cuda::Fp4Experts upload_fp4_experts(DeviceArena& arena, const Checkpoint& ck, const std::string& prefix, int experts,
                                    const std::vector<std::string>& names, int64_t n_each, int64_t k);
// Only the listed experts, slot s holding expert experts[s] (a rank's share under expert parallelism,
// parallel/expert_shard.h).
cuda::Fp4Experts upload_fp4_experts(DeviceArena& arena, const Checkpoint& ck, const std::string& prefix,
                                    std::span<const int32_t> experts, const std::vector<std::string>& names,
                                    int64_t n_each, int64_t k);

// Several FP8 linears of the same k stacked along n into one (shared-expert w1 | w3). Each n must be a multiple
// of the block so the scale rows stack too.
cuda::Fp8Linear upload_fp8_stacked(DeviceArena& arena, const Checkpoint& ck, const std::vector<std::string>& prefixes,
                                   int64_t n_each, int64_t k, int block);

// Decode layouts (cuda/kernels.h fp8_pack / mxfp4_pack) for the streaming decode kernel (DecodeKernel::Stream).
// FP8 linears keep the checkpoint layout too (the prefill GEMM reads it); MXFP4 experts give theirs up (the
// packed copy would double the largest tensors), so their GEMMs then run the decode kernels at every batch size.
// The weights every V4 and V4.1 layer has (model-spec §3, §4 "Attention"): the two norms and mHC sites, the
// low-rank query, the KV row, the grouped output projection and the sink, and the layer's RoPE frequencies. The
// FP8 blocks are the config's weight_block_size (128 on V4, 32 on V4.1).
struct GpuBlockWeights {
  const bf16* attn_norm = nullptr;  // [hidden]
  const bf16* ffn_norm = nullptr;
  cuda::HcSite hc_attn, hc_ffn;
  cuda::Fp8Linear wq_a, wq_b, wkv, wo_b;
  const bf16* q_norm = nullptr;   // [q_lora]
  const bf16* kv_norm = nullptr;  // [head_dim]
  // wo_a [o_groups * o_lora, heads * head_dim / o_groups]: FP8 for the W8A16 decode kernel and its exact bf16
  // dequantization for the larger row counts (layers/quant/w8a16_gemv.h)
  cuda::Fp8Linear wo_a;
  const bf16* wo_a_bf16 = nullptr;
  const float* attn_sink = nullptr;
  const float* inv_freq = nullptr;  // [rope_dim / 2]: the layer's RoPE (YaRN on compressing layers)
};
// From `layers.<i>.` of a checkpoint.
GpuBlockWeights upload_block_weights(DeviceArena& arena, const Checkpoint& ck, const ModelConfig& c,
                                     const LayerPlan& plan);
// Random values of the same shapes (the full-width benchmark model); `seed` advances by the tensors drawn.
GpuBlockWeights random_block_weights(DeviceArena& arena, const ModelConfig& c, const LayerPlan& plan, uint64_t& seed);

// The weights every V4 and V4.1 model has outside its layers (model-spec §3 "Embedding", "Head"; §4), with the
// arena that owns all of a model's device buffers (the layers' too).
struct GpuOuterWeights {
  DeviceArena arena;
  const bf16* embed = nullptr;  // [vocab, hidden]
  const bf16* head = nullptr;   // [vocab, hidden]
  const bf16* norm = nullptr;   // [hidden]
};
// From embed.weight, head.weight and norm.weight of a checkpoint.
void upload_outer_weights(GpuOuterWeights& w, const Checkpoint& ck, const ModelConfig& c);
// Random values of the same shapes, drawn in that order; `seed` advances by the tensors drawn.
void random_outer_weights(GpuOuterWeights& w, const ModelConfig& c, uint64_t& seed);

void pack_fp8_for_decode(DeviceArena& arena, cuda::Fp8Linear& w);
void pack_experts_for_decode(DeviceArena& arena, cuda::Fp4Experts& w);

// Random stand-ins of the same formats (cuda/random_fill.h), deterministic in `seed`. Values are scaled like
// trained weights: linear weights ~ 1/sqrt(k) in magnitude, norms ~ 1.
cuda::Fp8Linear random_fp8_linear(DeviceArena& arena, int64_t n, int64_t k, int block, uint64_t seed);
cuda::Fp4Experts random_fp4_experts(DeviceArena& arena, int experts, int64_t n, int64_t k, uint64_t seed);
// The listed experts only, each drawn from its own seed (seed, expert id): a rank holding a share of the experts
// gets the same values as one GPU holding them all.
cuda::Fp4Experts random_fp4_experts(DeviceArena& arena, std::span<const int32_t> experts, int64_t n, int64_t k,
                                    uint64_t seed);
bf16* random_bf16(DeviceArena& arena, size_t count, float mean, float std, uint64_t seed);
float* random_f32(DeviceArena& arena, size_t count, float mean, float std, uint64_t seed);

// Random weights of a GPU model of `config`'s shapes, generated on the device (the full-width benchmark model). Every
// tensor is drawn from one running seed (seed * 1000003, advanced per tensor), in a fixed order, so a seed names one
// model: the outer weights, then `outer(weights, seed)` (the model's other tensors outside the layers), then per layer
// of the plan its block weights and `layer(weights, plan, layer_weights, seed)` (the rest of the layer, and its decode
// layouts). The device is synchronized before the weights are returned.
template <class Weights, class OuterFn, class LayerFn>
std::unique_ptr<Weights> random_gpu_weights(const ModelConfig& config, uint64_t seed, OuterFn outer, LayerFn layer) {
  auto w = std::make_unique<Weights>();
  uint64_t s = seed * 1000003;
  random_outer_weights(*w, config, s);
  outer(*w, s);
  for (const LayerPlan& plan : config.layers) {
    typename decltype(w->layers)::value_type L;
    static_cast<GpuBlockWeights&>(L) = random_block_weights(w->arena, config, plan, s);
    layer(*w, plan, L, s);
    w->layers.push_back(L);
  }
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

}  // namespace deepinfer::gpu

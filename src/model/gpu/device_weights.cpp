#include "model/gpu/device_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda/random_fill.h"
#include "layers/norm_rope/rope.h"
#include "layers/quant/w8a16_gemv.h"
#include "model/weight_formats.h"

namespace deepinfer::gpu {

namespace {

std::vector<float> dense_host(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape) {
  Tensor t = read_dense(ck, name, shape);
  return std::vector<float>(t.ptr(), t.ptr() + t.numel());
}

std::vector<uint16_t> to_bf16_bits(const float* x, size_t n) {
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(x[i]);
  return out;
}

// The e8m0 codes of a scale tensor stored as F8_E8M0 or as F32 powers of two (model-spec §10 item 2).
std::vector<uint8_t> e8m0_codes(const TensorEntry& s, size_t count) {
  std::vector<uint8_t> codes(count);
  if (s.dtype == DType::F8_E8M0) {
    std::copy_n(s.data, count, codes.begin());
    return codes;
  }
  DI_CHECK(s.dtype == DType::F32, "checkpoint: tensor '" + s.name + "' has dtype " + dtype_name(s.dtype) +
                                      ", expected F8_E8M0 or F32");
  for (size_t i = 0; i < count; ++i) {
    float v;
    std::memcpy(&v, s.data + 4 * i, 4);
    DI_CHECK(v > 0 && pow2_ceil(v) == v, "checkpoint: scale " + std::to_string(i) + " of '" + s.name + "' is " +
                                             std::to_string(v) + ", not a power of two");
    codes[i] = float_to_e8m0(v);
  }
  return codes;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

const float* upload_f32(DeviceArena& arena, const Checkpoint& ck, const std::string& name,
                        const std::vector<int64_t>& shape) {
  std::vector<float> h = dense_host(ck, name, shape);
  return arena.upload(h.data(), h.size());
}

const bf16* upload_bf16(DeviceArena& arena, const Checkpoint& ck, const std::string& name,
                        const std::vector<int64_t>& shape) {
  std::vector<float> h = dense_host(ck, name, shape);
  std::vector<uint16_t> bits = to_bf16_bits(h.data(), h.size());
  return reinterpret_cast<const bf16*>(arena.upload(bits.data(), bits.size()));
}

cuda::Fp8Linear upload_fp8_linear(DeviceArena& arena, const Checkpoint& ck, const std::string& prefix, int64_t n,
                                  int64_t k, int block) {
  return upload_fp8_stacked(arena, ck, {prefix}, n, k, block);
}

cuda::Fp8Linear upload_fp8_stacked(DeviceArena& arena, const Checkpoint& ck, const std::vector<std::string>& prefixes,
                                   int64_t n_each, int64_t k, int block) {
  DI_CHECK(prefixes.size() == 1 || n_each % block == 0,
           "gpu weights: stacking '" + prefixes[0] + "' needs its " + std::to_string(n_each) +
               " rows to be a multiple of the scale block " + std::to_string(block));
  const int64_t sb_n = ceil_div(n_each, block), sb_k = ceil_div(k, block);
  std::vector<uint8_t> codes, scales;
  codes.reserve(size_t(n_each * k) * prefixes.size());
  for (const std::string& p : prefixes) {
    const TensorEntry& w = ck.expect(p + ".weight", DType::F8_E4M3, {n_each, k});
    codes.insert(codes.end(), w.data, w.data + w.nbytes);
    const TensorEntry& s = ck.get(p + ".scale");
    DI_CHECK(s.shape == std::vector<int64_t>({sb_n, sb_k}),
             "checkpoint: tensor '" + p + ".scale' has the wrong shape for a " + std::to_string(block) + "-block FP8 weight");
    std::vector<uint8_t> sc = e8m0_codes(s, size_t(sb_n * sb_k));
    scales.insert(scales.end(), sc.begin(), sc.end());
  }
  cuda::Fp8Linear lin;
  lin.weight = arena.upload(codes.data(), codes.size());
  lin.scale = arena.upload(scales.data(), scales.size());
  lin.n = n_each * int64_t(prefixes.size());
  lin.k = k;
  lin.block = block;
  return lin;
}

const bf16* upload_linear_as_bf16(DeviceArena& arena, const Checkpoint& ck, const std::string& prefix, int64_t n,
                                  int64_t k, int fp8_block) {
  Tensor t = read_linear_weight(ck, prefix, n, k, fp8_block);
  std::vector<uint16_t> bits = to_bf16_bits(t.ptr(), size_t(t.numel()));
  return reinterpret_cast<const bf16*>(arena.upload(bits.data(), bits.size()));
}

cuda::Fp4Experts upload_fp4_experts(DeviceArena& arena, const Checkpoint& ck, const std::string& prefix, int experts,
                                    const std::vector<std::string>& names, int64_t n_each, int64_t k) {
  std::vector<int32_t> all(size_t(std::max(experts, 0)));
  for (size_t e = 0; e < all.size(); ++e) all[e] = int32_t(e);
  return upload_fp4_experts(arena, ck, prefix, all, names, n_each, k);
}

cuda::Fp4Experts upload_fp4_experts(DeviceArena& arena, const Checkpoint& ck, const std::string& prefix,
                                    std::span<const int32_t> experts, const std::vector<std::string>& names,
                                    int64_t n_each, int64_t k) {
  DI_CHECK(k % 32 == 0, "gpu weights: MXFP4 experts need k % 32 == 0, got " + std::to_string(k));
  const int64_t n = n_each * int64_t(names.size());
  const size_t slots = experts.size();
  uint8_t* weight = arena.alloc<uint8_t>(slots * size_t(n * k / 2));
  uint8_t* scale = arena.alloc<uint8_t>(slots * size_t(n * k / 32));
  for (size_t slot = 0; slot < slots; ++slot) {
    for (size_t j = 0; j < names.size(); ++j) {
      const std::string p = prefix + std::to_string(experts[slot]) + "." + names[j];
      const TensorEntry& w = ck.expect(p + ".weight", DType::I8, {n_each, k / 2});
      const TensorEntry& s = ck.expect(p + ".scale", DType::F8_E8M0, {n_each, k / 32});
      const size_t w_off = slot * size_t(n * k / 2) + j * size_t(n_each * k / 2);
      const size_t s_off = slot * size_t(n * k / 32) + j * size_t(n_each * k / 32);
      DI_CUDA_CHECK(cudaMemcpy(weight + w_off, w.data, w.nbytes, cudaMemcpyHostToDevice));
      DI_CUDA_CHECK(cudaMemcpy(scale + s_off, s.data, s.nbytes, cudaMemcpyHostToDevice));
    }
  }
  cuda::Fp4Experts x;
  x.weight = weight;
  x.scale = scale;
  x.experts = int(slots);
  x.n = n;
  x.k = k;
  return x;
}

void pack_fp8_for_decode(DeviceArena& arena, cuda::Fp8Linear& w) {
  uint8_t* packed = arena.alloc<uint8_t>(cuda::fp8_packed_bytes(w.n, w.k));
  cuda::fp8_pack(w, packed, nullptr);
  w.packed = packed;
  w.decode = cuda::DecodeKernel::Stream;
}

void pack_experts_for_decode(DeviceArena& arena, cuda::Fp4Experts& w) {
  uint8_t* pw = arena.alloc<uint8_t>(cuda::mxfp4_packed_weight_bytes(w.experts, w.n, w.k));
  uint8_t* ps = arena.alloc<uint8_t>(cuda::mxfp4_packed_scale_bytes(w.experts, w.n, w.k));
  cuda::mxfp4_pack(w, pw, ps, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  arena.release(w.weight);
  arena.release(w.scale);
  w.weight = nullptr;
  w.scale = nullptr;
  w.packed_weight = pw;
  w.packed_scale = ps;
  w.decode = cuda::DecodeKernel::Stream;
}

cuda::Fp8Linear random_fp8_linear(DeviceArena& arena, int64_t n, int64_t k, int block, uint64_t seed) {
  const size_t scales = size_t(ceil_div(n, block) * ceil_div(k, block));
  uint8_t* w = arena.alloc<uint8_t>(size_t(n * k));
  uint8_t* s = arena.alloc<uint8_t>(scales);
  cuda::fill_random_e4m3(w, size_t(n * k), seed, nullptr);
  // Codes ~ U[-1, 1]: a scale near 1/sqrt(k) keeps the outputs O(1) for O(1) inputs.
  const int e = int(std::lround(-0.5 * std::log2(double(k)))) + 1;
  cuda::fill_random_e8m0(s, scales, e - 1, e, seed ^ 0x5ca1eull, nullptr);
  cuda::Fp8Linear lin;
  lin.weight = w;
  lin.scale = s;
  lin.n = n;
  lin.k = k;
  lin.block = block;
  return lin;
}

cuda::Fp4Experts random_fp4_experts(DeviceArena& arena, int experts, int64_t n, int64_t k, uint64_t seed) {
  const size_t wbytes = size_t(experts) * size_t(n * k / 2), sbytes = size_t(experts) * size_t(n * k / 32);
  uint8_t* w = arena.alloc<uint8_t>(wbytes);
  uint8_t* s = arena.alloc<uint8_t>(sbytes);
  cuda::fill_random_e2m1_pairs(w, wbytes, seed, nullptr);
  // e2m1 magnitudes average ~2: scale by ~1/(2 sqrt(k)).
  const int e = int(std::lround(-0.5 * std::log2(double(k)))) - 1;
  cuda::fill_random_e8m0(s, sbytes, e - 1, e, seed ^ 0x5ca1eull, nullptr);
  cuda::Fp4Experts x;
  x.weight = w;
  x.scale = s;
  x.experts = experts;
  x.n = n;
  x.k = k;
  return x;
}

cuda::Fp4Experts random_fp4_experts(DeviceArena& arena, std::span<const int32_t> experts, int64_t n, int64_t k,
                                    uint64_t seed) {
  const size_t wbytes = size_t(n * k / 2), sbytes = size_t(n * k / 32);  // per expert
  uint8_t* w = arena.alloc<uint8_t>(experts.size() * wbytes);
  uint8_t* s = arena.alloc<uint8_t>(experts.size() * sbytes);
  const int e = int(std::lround(-0.5 * std::log2(double(k)))) - 1;  // as above
  for (size_t slot = 0; slot < experts.size(); ++slot) {
    const uint64_t own = seed * 0x9e3779b97f4a7c15ull + uint64_t(experts[slot]) + 1;
    cuda::fill_random_e2m1_pairs(w + slot * wbytes, wbytes, own, nullptr);
    cuda::fill_random_e8m0(s + slot * sbytes, sbytes, e - 1, e, own ^ 0x5ca1eull, nullptr);
  }
  cuda::Fp4Experts x;
  x.weight = w;
  x.scale = s;
  x.experts = int(experts.size());
  x.n = n;
  x.k = k;
  return x;
}

bf16* random_bf16(DeviceArena& arena, size_t count, float mean, float std, uint64_t seed) {
  bf16* p = arena.alloc<bf16>(count);
  cuda::fill_random_bf16(p, count, mean, std, seed, nullptr);
  return p;
}

float* random_f32(DeviceArena& arena, size_t count, float mean, float std, uint64_t seed) {
  float* p = arena.alloc<float>(count);
  cuda::fill_random_f32(p, count, mean, std, seed, nullptr);
  return p;
}

namespace {

// The coefficients of an mHC site (model-spec §3 "mHC site"): `<layer>hc_<site>_fn` [(2 + hc) * hc, hc * hidden],
// `_base` [(2 + hc) * hc], `_scale` [3], fp32.
cuda::HcSite upload_hc_site(DeviceArena& a, const Checkpoint& ck, const ModelConfig& c, const std::string& p,
                            const std::string& site) {
  const int64_t hc = c.hc_mult, mix = (2 + hc) * hc;
  cuda::HcSite s;
  s.fn = upload_f32(a, ck, p + "hc_" + site + "_fn", {mix, hc * c.hidden_size});
  s.base = upload_f32(a, ck, p + "hc_" + site + "_base", {mix});
  s.scale = upload_f32(a, ck, p + "hc_" + site + "_scale", {3});
  return s;
}

cuda::HcSite random_hc_site(DeviceArena& a, const ModelConfig& c, uint64_t seed) {
  const int64_t hc = c.hc_mult, mix = (2 + hc) * hc, width = hc * c.hidden_size;
  cuda::HcSite s;
  s.fn = random_f32(a, size_t(mix * width), 0.0f, float(1.0 / std::sqrt(double(width))), seed);
  s.base = random_f32(a, size_t(mix), 0.0f, 0.5f, seed + 1);
  s.scale = random_f32(a, 3, 1.0f, 0.2f, seed + 2);
  return s;
}

// The layer's RoPE frequencies (plain, or YaRN-scaled on compressed layers; model-spec §2).
const float* upload_inv_freq(DeviceArena& a, const ModelConfig& c, const LayerPlan& plan) {
  const Rope rope = Rope::for_layer(c, plan);
  return a.upload(rope.inv_freq().data(), rope.inv_freq().size());
}

}  // namespace

void upload_outer_weights(GpuOuterWeights& w, const Checkpoint& ck, const ModelConfig& c) {
  const int64_t H = c.hidden_size;
  w.embed = upload_bf16(w.arena, ck, "embed.weight", {c.vocab_size, H});
  w.head = upload_bf16(w.arena, ck, "head.weight", {c.vocab_size, H});
  w.norm = upload_bf16(w.arena, ck, "norm.weight", {H});
}

void random_outer_weights(GpuOuterWeights& w, const ModelConfig& c, uint64_t& s) {
  const int64_t H = c.hidden_size;
  w.embed = random_bf16(w.arena, size_t(c.vocab_size * H), 0.0f, 1.0f, ++s);
  w.head = random_bf16(w.arena, size_t(c.vocab_size * H), 0.0f, float(2.0 / std::sqrt(double(H))), ++s);
  w.norm = random_bf16(w.arena, size_t(H), 1.0f, 0.1f, ++s);
}

GpuBlockWeights upload_block_weights(DeviceArena& a, const Checkpoint& ck, const ModelConfig& c,
                                     const LayerPlan& plan) {
  const int64_t H = c.hidden_size, D = c.head_dim, heads = c.num_heads;
  const int block = c.weight_block_size;
  const std::string p = "layers." + std::to_string(plan.index) + ".", at = p + "attn.";
  GpuBlockWeights L;
  L.attn_norm = upload_bf16(a, ck, p + "attn_norm.weight", {H});
  L.ffn_norm = upload_bf16(a, ck, p + "ffn_norm.weight", {H});
  L.hc_attn = upload_hc_site(a, ck, c, p, "attn");
  L.hc_ffn = upload_hc_site(a, ck, c, p, "ffn");
  L.wq_a = upload_fp8_linear(a, ck, at + "wq_a", c.q_lora_rank, H, block);
  L.q_norm = upload_bf16(a, ck, at + "q_norm.weight", {c.q_lora_rank});
  L.wq_b = upload_fp8_linear(a, ck, at + "wq_b", heads * D, c.q_lora_rank, block);
  L.wkv = upload_fp8_linear(a, ck, at + "wkv", D, H, block);
  L.kv_norm = upload_bf16(a, ck, at + "kv_norm.weight", {D});
  L.wo_a = upload_fp8_linear(a, ck, at + "wo_a", int64_t(c.o_groups) * c.o_lora_rank, heads * D / c.o_groups,
                             block);
  L.wo_a_bf16 = upload_linear_as_bf16(a, ck, at + "wo_a", L.wo_a.n, L.wo_a.k, block);
  L.wo_b = upload_fp8_linear(a, ck, at + "wo_b", H, int64_t(c.o_groups) * c.o_lora_rank, block);
  L.attn_sink = upload_f32(a, ck, at + "attn_sink", {heads});
  L.inv_freq = upload_inv_freq(a, c, plan);
  return L;
}

GpuBlockWeights random_block_weights(DeviceArena& a, const ModelConfig& c, const LayerPlan& plan, uint64_t& s) {
  const int64_t H = c.hidden_size, D = c.head_dim, heads = c.num_heads;
  const int block = c.weight_block_size;
  GpuBlockWeights L;
  L.attn_norm = random_bf16(a, size_t(H), 1.0f, 0.1f, ++s);
  L.ffn_norm = random_bf16(a, size_t(H), 1.0f, 0.1f, ++s);
  L.hc_attn = random_hc_site(a, c, s += 3);
  L.hc_ffn = random_hc_site(a, c, s += 3);
  L.wq_a = random_fp8_linear(a, c.q_lora_rank, H, block, ++s);
  L.q_norm = random_bf16(a, size_t(c.q_lora_rank), 1.0f, 0.1f, ++s);
  L.wq_b = random_fp8_linear(a, heads * D, c.q_lora_rank, block, ++s);
  L.wkv = random_fp8_linear(a, D, H, block, ++s);
  L.kv_norm = random_bf16(a, size_t(D), 1.0f, 0.1f, ++s);
  L.wo_a = random_fp8_linear(a, int64_t(c.o_groups) * c.o_lora_rank, heads * D / c.o_groups, block, ++s);
  bf16* wo_a_bf16 = a.alloc<bf16>(size_t(L.wo_a.n * L.wo_a.k));
  cuda::fp8_dequantize_bf16(L.wo_a, wo_a_bf16, nullptr);
  L.wo_a_bf16 = wo_a_bf16;
  L.wo_b = random_fp8_linear(a, H, int64_t(c.o_groups) * c.o_lora_rank, block, ++s);
  L.attn_sink = random_f32(a, size_t(heads), 0.0f, 1.0f, ++s);
  L.inv_freq = upload_inv_freq(a, c, plan);
  return L;
}

}  // namespace deepinfer::gpu

// RMSNorm and partial interleaved RoPE / YaRN kernels against layers/norm_rope/{rms_norm,rope}.cpp; the fused
// norm -> FP8 quantization against the two kernels it replaces, bitwise (the same fp32 math in the same order).
#include <algorithm>
#include <cstring>

#include "cuda/kernels.h"
#include "cuda/step_kernels.h"
#include "gpu_test_util.h"
#include "layers/norm_rope/rms_norm.h"
#include "layers/norm_rope/rope.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

void run_rms_norm(Rng& rng, int64_t rows, int n, bool weighted, float eps) {
  std::vector<float> x(size_t(rows * n)), w(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::exp(rng.uniform(-4.0f, 4.0f));  // rows of very different magnitude
    for (int i = 0; i < n; ++i) x[size_t(r * n + i)] = rng.normal(0.0f, row_scale);
  }
  for (float& v : w) v = rng.normal(1.0f, 0.3f);
  round_to_bf16(x);
  round_to_bf16(w);

  std::vector<float> ref(x.size());
  for (int64_t r = 0; r < rows; ++r)
    rms_norm(x.data() + r * n, weighted ? w.data() : nullptr, n, eps, ref.data() + r * n);

  cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dw = cuda::to_device(to_bf16(w)), dy(x.size() * 2);
  dy.fill_bytes(0xFF);
  cuda::rms_norm(dx.as<cuda::bf16>(), weighted ? dw.as<cuda::bf16>() : nullptr, dy.as<cuda::bf16>(), rows, n, eps,
                 nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out = from_bf16(cuda::to_host<uint16_t>(dy, x.size()));
  // One bf16 rounding of an fp32 result (kBf16OutputBound).
  check_rel_l2("rms_norm rows=" + std::to_string(rows) + " n=" + std::to_string(n) + (weighted ? "" : " unweighted"),
               out, ref, kBf16OutputBound);
}

void run_rope(Rng& rng, const Rope& rope, const char* label, int64_t tokens, int heads, int head_dim, bool inverse) {
  const int rope_dim = rope.rope_dim();
  std::vector<float> x(size_t(tokens * heads * head_dim));
  for (float& v : x) v = rng.normal(0.0f, 2.0f);
  round_to_bf16(x);
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  for (auto& p : pos) p = rng.integer(0, 1 << 20);  // up to max_position_embeddings (1M)
  pos[0] = 0;

  std::vector<float> ref = x;
  for (int64_t t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h)
      rope.apply(ref.data() + (t * heads + h) * head_dim + (head_dim - rope_dim), pos[size_t(t)], inverse);

  cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dpos = cuda::to_device(pos),
                     dfreq = cuda::to_device(rope.inv_freq());
  cuda::rope(dx.as<cuda::bf16>(), int64_t(heads) * head_dim, dpos.as<int32_t>(), dfreq.as<float>(), tokens, heads,
             head_dim, rope_dim, inverse, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out = from_bf16(cuda::to_host<uint16_t>(dx, x.size()));

  size_t touched = 0;  // channels outside the rope slice must come back bit-identical
  for (int64_t t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h)
      for (int d = 0; d < head_dim - rope_dim; ++d) {
        size_t i = size_t((t * heads + h) * head_dim + d);
        touched += out[i] != x[i];
      }
  std::string name = std::string("rope ") + label + (inverse ? " inverse" : "");
  report_exact(name + " nope-channels-untouched", touched, size_t(tokens * heads * (head_dim - rope_dim)));
  // The rotated pairs are rounded once to bf16; sin/cos of the same fp32 angle differ by a few fp32 ulps.
  check_rel_l2(name, out, ref, kBf16OutputBound);
}

// rms_norm_f32 (fp32 rows, a GEMM's output) against the CPU norm, then rms_norm_f32_quantize against
// rms_norm_f32 -> fp8_quantize on the device: the bf16 values, codes and scales must be identical.
void run_rms_norm_f32_quantize(Rng& rng, int64_t rows, int n, bool weighted, float eps, int block) {
  std::vector<float> x(size_t(rows * n)), w(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::exp(rng.uniform(-4.0f, 4.0f));
    for (int i = 0; i < n; ++i) x[size_t(r * n + i)] = rng.normal(0.0f, row_scale);
  }
  for (float& v : w) v = rng.normal(1.0f, 0.3f);
  round_to_bf16(w);
  std::vector<float> ref(x.size());
  for (int64_t r = 0; r < rows; ++r)
    rms_norm(x.data() + r * n, weighted ? w.data() : nullptr, n, eps, ref.data() + r * n);

  const size_t count = x.size(), scales = count / size_t(block);
  cuda::DeviceBuffer dx = cuda::to_device(x), dw = cuda::to_device(to_bf16(w)), dy_a(count * 2), dy_b(count * 2),
                     dq_a(count), dq_b(count), ds_a(scales * 4), ds_b(scales * 4);
  for (cuda::DeviceBuffer* b : {&dy_a, &dy_b, &dq_a, &dq_b, &ds_a, &ds_b}) b->fill_bytes(0xFF);
  const cuda::bf16* wp = weighted ? dw.as<cuda::bf16>() : nullptr;
  cuda::rms_norm_f32(dx.as<float>(), wp, dy_a.as<cuda::bf16>(), rows, n, eps, nullptr);
  cuda::fp8_quantize(dy_a.as<cuda::bf16>(), dq_a.as<uint8_t>(), ds_a.as<float>(), rows, n, block, nullptr);
  cuda::rms_norm_f32_quantize(dx.as<float>(), wp, dy_b.as<cuda::bf16>(), dq_b.as<uint8_t>(), ds_b.as<float>(), rows,
                              n, eps, block, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());

  const std::string shape = " rows=" + std::to_string(rows) + " n=" + std::to_string(n) +
                            (weighted ? "" : " unweighted") + " block=" + std::to_string(block);
  const auto y_a = cuda::to_host<uint16_t>(dy_a, count), y_b = cuda::to_host<uint16_t>(dy_b, count);
  check_rel_l2("rms_norm_f32" + shape, from_bf16(y_a), ref, kBf16OutputBound);
  auto mismatches = [](const auto& a, const auto& b) {
    size_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i) bad += std::memcmp(&a[i], &b[i], sizeof(a[i])) != 0;
    return bad;
  };
  report_exact("rms_norm_f32_quantize y vs rms_norm_f32" + shape, mismatches(y_b, y_a), count);
  report_exact("rms_norm_f32_quantize codes vs fp8_quantize" + shape,
               mismatches(cuda::to_host<uint8_t>(dq_b, count), cuda::to_host<uint8_t>(dq_a, count)), count);
  report_exact("rms_norm_f32_quantize scales vs fp8_quantize" + shape,
               mismatches(cuda::to_host<float>(ds_b, scales), cuda::to_host<float>(ds_a, scales)), scales);
  // Without y: the same codes.
  dq_b.fill_bytes(0xFF);
  cuda::rms_norm_f32_quantize(dx.as<float>(), wp, nullptr, dq_b.as<uint8_t>(), ds_b.as<float>(), rows, n, eps, block,
                              nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  report_exact("rms_norm_f32_quantize (codes only) vs fp8_quantize" + shape,
               mismatches(cuda::to_host<uint8_t>(dq_b, count), cuda::to_host<uint8_t>(dq_a, count)), count);
}

}  // namespace

TEST(GpuRmsNorm, F32QuantizeMatchesTwoKernels) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_rms_norm_f32_quantize(rng, 1, 1024, true, 1e-6f, 128);   // V4-Flash q_norm at decode
  run_rms_norm_f32_quantize(rng, 9, 1536, true, 1e-6f, 128);   // q_lora 1536: a partial last pass of vectors
  run_rms_norm_f32_quantize(rng, 4, 1024, true, 1e-20f, 32);   // V4.1 blocks and eps
  run_rms_norm_f32_quantize(rng, 3, 512, false, 1e-6f, 256);   // unweighted, widest block
}

TEST(GpuRmsNorm, MatchesReference) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_rms_norm(rng, 7, 4096, true, 1e-6f);    // V4 hidden
  run_rms_norm(rng, 33, 5120, true, 1e-20f);  // V4.1 hidden, its eps
  run_rms_norm(rng, 64 * 3, 512, false, 1e-6f);  // V4 per-head q norm (unweighted)
  run_rms_norm(rng, 2, 16384, true, 1e-6f);   // wider than the register slice
}

TEST(GpuRope, PartialInterleavedWithYarn) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  YarnScaling yarn;
  yarn.factor = 16.0f;
  yarn.original_max_position_embeddings = 65536;
  yarn.beta_fast = 32.0f;
  yarn.beta_slow = 1.0f;
  Rope compressed(64, 160000.0f, &yarn);  // compressed layers: compress_rope_theta + YaRN (model-spec §2)
  Rope window(64, 10000.0f, nullptr);     // window-only layers
  run_rope(rng, compressed, "yarn q", 5, 64, 512, false);
  run_rope(rng, compressed, "yarn q", 5, 64, 512, true);
  run_rope(rng, window, "plain kv", 9, 1, 512, false);
  run_rope(rng, compressed, "yarn index-q", 3, 64, 128, false);
}

// MXFP4 grouped expert GEMM against the CPU reference: the expert weights decoded as model/weight_formats.cpp
// reads them (two e2m1 per byte, even column in the low nibble, one e8m0 scale per 32 along K), the activation
// through fp8_fake_quant (model-spec §2: FP4-weight GEMMs take FP8 activations), core/linalg.cpp's matmul.
#include <algorithm>
#include <numeric>

#include "core/linalg.h"
#include "cuda/kernels.h"
#include "gpu_test_util.h"
#include "layers/quant/fake_quant.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

enum class Path { Checkpoint, Packed, Prefill, Stream };  // Packed: decode v7, Stream: decode v8

void run_experts(Rng& rng, int experts, int64_t n, int64_t k, int act_block, const std::vector<int>& group_rows,
                 Path path = Path::Checkpoint) {
  // Weights: random codes (every nibble value, both signs) and scales 2^-10 .. 2^-2 per 32 along K.
  std::vector<uint8_t> codes(size_t(experts) * n * (k / 2)), scales(size_t(experts) * n * (k / 32));
  for (auto& c : codes) c = uint8_t(rng.integer(0, 255));
  for (auto& s : scales) s = uint8_t(rng.integer(127 - 10, 127 - 2));
  auto weight = [&](int e, int64_t r, int64_t c) {
    uint8_t byte = codes[size_t((int64_t(e) * n + r) * (k / 2) + c / 2)];
    float v = e2m1_to_float(c % 2 == 0 ? (byte & 0xF) : (byte >> 4));
    return v * e8m0_to_float(scales[size_t((int64_t(e) * n + r) * (k / 32) + c / 32)]);
  };

  // Groups: distinct experts in a random order, row counts as given (0 = a touched-but-empty group).
  std::vector<int> ids(static_cast<size_t>(experts));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng.engine());
  const int groups = int(group_rows.size());
  ids.resize(size_t(groups));
  std::vector<int32_t> offsets(size_t(groups) + 1, 0);
  for (int g = 0; g < groups; ++g) offsets[size_t(g) + 1] = offsets[size_t(g)] + group_rows[size_t(g)];
  const int64_t rows = offsets.back();
  const int max_rows = *std::max_element(group_rows.begin(), group_rows.end());

  std::vector<float> x(size_t(rows * k));
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::exp(rng.uniform(-3.0f, 3.0f));
    for (int64_t i = 0; i < k; ++i) x[size_t(r * k + i)] = rng.normal(0.0f, s);
  }
  round_to_bf16(x);
  std::vector<float> xq = x;
  fp8_fake_quant(xq.data(), int64_t(xq.size()), act_block);

  std::vector<float> ref(size_t(rows * n));
  std::vector<float> wdeq(size_t(n * k));
  for (int g = 0; g < groups; ++g) {
    if (group_rows[size_t(g)] == 0) continue;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) wdeq[size_t(r * k + c)] = weight(ids[size_t(g)], r, c);
    matmul_nt(xq.data() + offsets[size_t(g)] * k, group_rows[size_t(g)], k, wdeq.data(), n,
              ref.data() + offsets[size_t(g)] * n);
  }

  std::vector<int32_t> ids32(ids.begin(), ids.end());
  cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dq(size_t(rows * k)), ds(size_t(rows * (k / act_block)) * 4),
                     dw = cuda::to_device(codes), dws = cuda::to_device(scales), dids = cuda::to_device(ids32),
                     doff = cuda::to_device(offsets), dy(size_t(rows * n) * 4);
  dy.fill_bytes(0xFF);
  cuda::fp8_quantize(dx.as<cuda::bf16>(), dq.as<uint8_t>(), ds.as<float>(), rows, int(k), act_block, nullptr);
  cuda::Fp4Experts w{dw.as<uint8_t>(), dws.as<uint8_t>(), experts, n, k};
  cuda::DeviceBuffer dpw, dps, dwork;
  if (path == Path::Packed || path == Path::Stream) {  // decode layout made on the GPU, poisoned first
    dpw = cuda::DeviceBuffer(cuda::mxfp4_packed_weight_bytes(experts, n, k));
    dps = cuda::DeviceBuffer(cuda::mxfp4_packed_scale_bytes(experts, n, k));
    dpw.fill_bytes(0x77);
    dps.fill_bytes(0xFF);
    cuda::mxfp4_pack(w, dpw.as<uint8_t>(), dps.as<uint8_t>(), nullptr);
    w.packed_weight = dpw.as<uint8_t>();
    w.packed_scale = dps.as<uint8_t>();
    w.decode = path == Path::Stream ? cuda::DecodeKernel::Stream : cuda::DecodeKernel::Registers;
  }
  if (path == Path::Prefill) {
    dwork = cuda::DeviceBuffer(cuda::mxfp4_prefill_workspace_bytes(rows, k));
    dwork.fill_bytes(0xFF);
    cuda::mxfp4_grouped_gemm_prefill(dq.as<uint8_t>(), ds.as<float>(), rows, act_block, w, dids.as<int32_t>(),
                                     doff.as<int32_t>(), groups, max_rows, dy.as<float>(), dwork.get(), nullptr);
  } else {
    cuda::mxfp4_grouped_gemm(dq.as<uint8_t>(), ds.as<float>(), act_block, w, dids.as<int32_t>(), doff.as<int32_t>(),
                             groups, max_rows, dy.as<float>(), nullptr);
  }
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out = cuda::to_host<float>(dy, size_t(rows * n));
  const char* tag = path == Path::Checkpoint ? "mxfp4_grouped_gemm"
                    : path == Path::Packed   ? "mxfp4_grouped_gemm packed"
                    : path == Path::Stream   ? "mxfp4_grouped_gemm stream"
                                             : "mxfp4_grouped_gemm prefill";
  const std::string name = std::string(tag) + " n=" + std::to_string(n) + " k=" + std::to_string(k) + " groups=" +
                           std::to_string(groups) + " max_rows=" + std::to_string(max_rows);
  if ((path == Path::Packed || path == Path::Stream) && rows > 0) {
    // Deterministic reduction order: a second run gives the same bits.
    cuda::DeviceBuffer dy2(size_t(rows * n) * 4);
    dy2.fill_bytes(0xFF);
    cuda::mxfp4_grouped_gemm(dq.as<uint8_t>(), ds.as<float>(), act_block, w, dids.as<int32_t>(), doff.as<int32_t>(),
                             groups, max_rows, dy2.as<float>(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    auto a = cuda::to_host<uint32_t>(dy, size_t(rows * n)), b = cuda::to_host<uint32_t>(dy2, size_t(rows * n));
    size_t rerun = 0;
    for (size_t i = 0; i < a.size(); ++i) rerun += a[i] != b[i];
    report_exact(name + " rerun-bitwise", rerun, a.size());
  }
  // The products are exact (e2m1 and e4m3 values are exact in f16, and f16 x f16 is exact in the fp32
  // accumulators) and the scales are powers of two, so only fp32 summation over K <= 5120 terms remains: at worst
  // K * 2^-24 ~ 3e-4 of the sum of magnitudes; 1e-3 leaves room for that worst case.
  // The prefill path multiplies bf16 operands that hold the same exact values (e2m1 x 2^e, e4m3 x 2^e) and
  // accumulates in fp32 on the tensor cores: the same bound.
  check_rel_l2(name, out, ref, 1e-3);
}

}  // namespace

TEST(GpuMxfp4Experts, DecodeGroups) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  // V4-Flash: fused w1|w3 (2 x 2048 rows over hidden 4096), then w2 (hidden rows over 2048), activation block 128.
  run_experts(rng, 12, 4096, 4096, 128, {1, 1, 1, 1, 1, 1});
  run_experts(rng, 12, 4096, 2048, 128, {3, 0, 8, 1, 5});
  // V4.1-Flash: width 2304, hidden 5120, activation block 32; more tokens per expert (several passes).
  run_experts(rng, 8, 1152, 5120, 32, {9, 17, 2});
  run_experts(rng, 8, 640, 2304, 32, {40, 70, 1});
}

TEST(GpuMxfp4Experts, PackedDecodeGroups) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_experts(rng, 12, 4096, 4096, 128, {1, 1, 1, 1, 1, 1}, Path::Packed);
  run_experts(rng, 12, 4096, 2048, 128, {3, 0, 8, 1, 5}, Path::Packed);
  run_experts(rng, 8, 1152, 5120, 32, {9, 17, 2}, Path::Packed);
  run_experts(rng, 8, 640, 2304, 32, {40, 70, 1}, Path::Packed);
  run_experts(rng, 4, 1000, 1152, 32, {1, 2}, Path::Packed);  // partial row tile; k / 32 = 36: a half scale group
}

// Decode v8 (cuda/stream_gemm.cuh): empty groups, 1..8 rows per group, partial row tiles, k = 1152 (36 steps: a
// half scale group and a half granule), k = 128 (the minimum: one warp, 4 of its 8 steps), 6 x 256 tiles (every
// block crosses a group boundary: the activations are re-staged), and max_rows 17 (falls back to v7).
TEST(GpuMxfp4Experts, StreamDecodeGroups) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_experts(rng, 12, 4096, 4096, 128, {1, 1, 1, 1, 1, 1}, Path::Stream);
  run_experts(rng, 12, 4096, 2048, 128, {3, 0, 8, 1, 5}, Path::Stream);
  run_experts(rng, 8, 1152, 5120, 32, {2, 7, 0, 4}, Path::Stream);
  run_experts(rng, 8, 640, 2304, 32, {8, 6, 1}, Path::Stream);
  run_experts(rng, 4, 1000, 1152, 32, {1, 2}, Path::Stream);
  run_experts(rng, 6, 640, 128, 128, {8, 0, 0, 3}, Path::Stream);
  run_experts(rng, 8, 1152, 5120, 32, {9, 17, 2}, Path::Stream);
}

TEST(GpuMxfp4Experts, PrefillGroups) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_experts(rng, 8, 1024, 4096, 128, {200, 0, 77, 130, 1}, Path::Prefill);
  run_experts(rng, 6, 640, 2304, 32, {129, 300, 5}, Path::Prefill);
}

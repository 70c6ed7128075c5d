// MXFP4 grouped expert GEMM against the CPU reference: the expert weights decoded as model/weight_formats.cpp
// reads them (two e2m1 per byte, even column in the low nibble, one e8m0 scale per 32 along K), the activation
// through fp8_fake_quant (model-spec §2: FP4-weight GEMMs take FP8 activations), core/linalg.cpp's matmul.
#include <algorithm>
#include <numeric>

#include "core/linalg.h"
#include "cuda/kernels.h"
#include "gpu_test_util.h"
#include "layers/moe/moe_gpu.h"
#include "layers/quant/fake_quant.h"
#include "layers/quant/fp8_gemm.h"
#include "mxfp4_experts_ref.h"

using namespace deepinfer;
using namespace deepinfer::gputest;


namespace {

enum class Path { Checkpoint, Packed, Prefill, Stream };  // Packed: decode v7, Stream: decode v8

void run_experts(Rng& rng, int experts, int64_t n, int64_t k, int act_block, const std::vector<int>& group_rows,
                 Path path = Path::Checkpoint) {
  const Mxfp4Experts wts = random_mxfp4_experts(rng, experts, n, k);
  const ExpertGroups grp = random_expert_groups(rng, experts, group_rows);
  const auto& [ids, offsets, groups, rows, max_rows] = grp;

  const std::vector<float> x = random_activation_rows(rng, rows, k);
  std::vector<float> xq = x;
  fp8_fake_quant(xq.data(), int64_t(xq.size()), act_block);
  const std::vector<float> ref = grouped_reference(wts, grp, group_rows, xq.data());

  std::vector<int32_t> ids32(ids.begin(), ids.end());
  cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dq(size_t(rows * k)), ds(size_t(rows * (k / act_block)) * 4),
                     dw = cuda::to_device(wts.codes), dws = cuda::to_device(wts.scales),
                     dids = cuda::to_device(ids32), doff = cuda::to_device(offsets), dy(size_t(rows * n) * 4);
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
                                     doff.as<int32_t>(), groups, max_rows, dy.as<float>(), cuda::OutType::F32,
                                     dwork.get(), nullptr);
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
  if (path == Path::Stream && rows > 0) {
    // The other e2m1 widening form (cuda/stream_gemm.cuh widen_fp4_perm vs skinny::Format<MXFP4>::widen): the same
    // f16 values, so the same bits.
    const bool perm = cuda::fp4_perm_widen();
    cuda::set_fp4_perm_widen(!perm);
    cuda::DeviceBuffer dy2(size_t(rows * n) * 4);
    dy2.fill_bytes(0xFF);
    cuda::mxfp4_grouped_gemm(dq.as<uint8_t>(), ds.as<float>(), act_block, w, dids.as<int32_t>(), doff.as<int32_t>(),
                             groups, max_rows, dy2.as<float>(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    cuda::set_fp4_perm_widen(perm);
    auto a = cuda::to_host<uint32_t>(dy, size_t(rows * n)), b = cuda::to_host<uint32_t>(dy2, size_t(rows * n));
    size_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
    report_exact(name + (perm ? " permute vs shift widening" : " shift vs permute widening"), differ, a.size());
  }
  if (path == Path::Stream && rows > 0) {
    // The other K loop (DEEPINFER_STREAM_LOOP: cuda/stream_gemm.cuh consume_tile kBlk128 vs generic; the 128-block
    // loop applies at act_block 128, else both runs take the generic one): the same operations in the same order,
    // so the same bits. k = 128 covers the half granule at the end of k.
    const bool blk = cuda::stream_blk128_loop();
    cuda::set_stream_blk128_loop(!blk);
    cuda::DeviceBuffer dy2(size_t(rows * n) * 4);
    dy2.fill_bytes(0xFF);
    cuda::mxfp4_grouped_gemm(dq.as<uint8_t>(), ds.as<float>(), act_block, w, dids.as<int32_t>(), doff.as<int32_t>(),
                             groups, max_rows, dy2.as<float>(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    cuda::set_stream_blk128_loop(blk);
    auto a = cuda::to_host<uint32_t>(dy, size_t(rows * n)), b = cuda::to_host<uint32_t>(dy2, size_t(rows * n));
    size_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
    report_exact(name + (blk ? " blk128 vs generic loop" : " generic vs blk128 loop"), differ, a.size());
  }
  if (path != Path::Prefill && rows > 0) {
    // The same product reading its rows through row_index (the MoE's slot -> row map) from a shuffled copy of
    // q / xs: the same bits.
    std::vector<int32_t> perm(static_cast<size_t>(rows));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.engine());
    const std::vector<uint8_t> q = cuda::to_host<uint8_t>(dq, size_t(rows * k));
    const std::vector<float> qs = cuda::to_host<float>(ds, size_t(rows * (k / act_block)));
    std::vector<uint8_t> q_shuf(q.size());
    std::vector<float> s_shuf(qs.size());
    const int64_t sc = k / act_block;
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(q.begin() + r * k, k, q_shuf.begin() + int64_t(perm[size_t(r)]) * k);
      std::copy_n(qs.begin() + r * sc, sc, s_shuf.begin() + int64_t(perm[size_t(r)]) * sc);
    }
    cuda::DeviceBuffer dq2 = cuda::to_device(q_shuf), ds2 = cuda::to_device(s_shuf), dperm = cuda::to_device(perm),
                       dy2(size_t(rows * n) * 4);
    dy2.fill_bytes(0xFF);
    cuda::mxfp4_grouped_gemm(dq2.as<uint8_t>(), ds2.as<float>(), act_block, w, dids.as<int32_t>(), doff.as<int32_t>(),
                             groups, max_rows, dy2.as<float>(), nullptr, dperm.as<int32_t>());
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    auto a = cuda::to_host<uint32_t>(dy, size_t(rows * n)), b = cuda::to_host<uint32_t>(dy2, size_t(rows * n));
    size_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
    report_exact(name + " row_index gather vs contiguous rows", differ, a.size());
  }
  // The products are exact (e2m1 and e4m3 values are exact in f16, and f16 x f16 is exact in the fp32
  // accumulators) and the scales are powers of two, so only fp32 summation over K <= 5120 terms remains: at worst
  // K * 2^-24 ~ 3e-4 of the sum of magnitudes; 1e-3 leaves room for that worst case.
  // The prefill path multiplies bf16 operands that hold the same exact values (e2m1 x 2^e, e4m3 x 2^e) and
  // accumulates in fp32 on the tensor cores: the same bound.
  check_rel_l2(name, out, ref, 1e-3);
}

// W2 with the SwiGLU prologue (mxfp4_grouped_gemm_swiglu, decode v8) against moe_swiglu_quant followed by
// mxfp4_grouped_gemm on the same kernel: the same bits; and against the CPU: a = silu(min(g, limit)) *
// clamp(u, +-limit) * w in fp32 with g, u and a rounded to bf16 where the reference holds them in bf16 (its GEMMs'
// outputs, its `x.to(dtype)` before W2: swiglu_expert.h), fp8_fake_quant per block, the dequantized weights' matmul.
void run_swiglu_w2(Rng& rng, int experts, int64_t n, int64_t k, int act_block, const std::vector<int>& group_rows,
                   float limit, bool weighted) {
  const Mxfp4Experts wts = random_mxfp4_experts(rng, experts, n, k);
  const ExpertGroups grp = random_expert_groups(rng, experts, group_rows);
  const auto& [ids, offsets, groups, rows, max_rows] = grp;

  // h = W1 | W3 outputs: O(1) with a row scale, so that the clamp bites on some values; routing weights in (0, 1].
  std::vector<float> h(size_t(rows * 2 * k)), rw(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::exp(rng.uniform(-1.0f, 1.0f));
    for (int64_t i = 0; i < 2 * k; ++i) h[size_t(r * 2 * k + i)] = rng.normal(0.0f, s);
    rw[size_t(r)] = weighted ? rng.uniform(0.05f, 1.0f) : 1.0f;
  }
  std::vector<float> a(size_t(rows * k));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) {
      float g = round_bf16(h[size_t(r * 2 * k + i)]), u = round_bf16(h[size_t(r * 2 * k + k + i)]);
      if (limit > 0) {
        g = std::min(g, limit);
        u = std::min(std::max(u, -limit), limit);
      }
      a[size_t(r * k + i)] = round_bf16(g / (1.0f + std::exp(-g)) * u * rw[size_t(r)]);
    }
  fp8_fake_quant(a.data(), int64_t(a.size()), act_block);
  const std::vector<float> ref = grouped_reference(wts, grp, group_rows, a.data());

  std::vector<int32_t> ids32(ids.begin(), ids.end());
  cuda::DeviceBuffer dh = cuda::to_device(h), drw = cuda::to_device(rw), dq(size_t(rows * k)),
                     ds(size_t(rows * (k / act_block)) * 4), dw = cuda::to_device(wts.codes),
                     dws = cuda::to_device(wts.scales), dids = cuda::to_device(ids32), doff = cuda::to_device(offsets),
                     dy(size_t(rows * n) * 4), dyf(size_t(rows * n) * 4),
                     dpw(cuda::mxfp4_packed_weight_bytes(experts, n, k)),
                     dps(cuda::mxfp4_packed_scale_bytes(experts, n, k));
  cuda::Fp4Experts w{dw.as<uint8_t>(), dws.as<uint8_t>(), experts, n, k};
  cuda::mxfp4_pack(w, dpw.as<uint8_t>(), dps.as<uint8_t>(), nullptr);
  w.packed_weight = dpw.as<uint8_t>();
  w.packed_scale = dps.as<uint8_t>();
  w.decode = cuda::DecodeKernel::Stream;
  dy.fill_bytes(0xFF);
  dyf.fill_bytes(0xFF);
  const float* row_weight = weighted ? drw.as<float>() : nullptr;
  cuda::moe_swiglu_quant(dh.as<float>(), row_weight, rows, k, act_block, limit, dq.as<uint8_t>(), ds.as<float>(),
                         nullptr);
  cuda::mxfp4_grouped_gemm(dq.as<uint8_t>(), ds.as<float>(), act_block, w, dids.as<int32_t>(), doff.as<int32_t>(),
                           groups, max_rows, dy.as<float>(), nullptr);
  const bool fused = cuda::mxfp4_grouped_gemm_swiglu(dh.as<float>(), row_weight, limit, act_block, w,
                                                     dids.as<int32_t>(), doff.as<int32_t>(), groups, max_rows,
                                                     dyf.as<float>(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const std::string name = "mxfp4_grouped_gemm_swiglu n=" + std::to_string(n) + " k=" + std::to_string(k) +
                           " block=" + std::to_string(act_block) + " groups=" + std::to_string(groups) +
                           " max_rows=" + std::to_string(max_rows) + (weighted ? " weighted" : " weight 1");
  EXPECT_TRUE(fused) << name << ": decode v8 should take the fused form";
  auto a1 = cuda::to_host<uint32_t>(dy, size_t(rows * n)), a2 = cuda::to_host<uint32_t>(dyf, size_t(rows * n));
  size_t differ = 0;
  for (size_t i = 0; i < a1.size(); ++i) differ += a1[i] != a2[i];
  report_exact(name + " fused vs moe_swiglu_quant + mxfp4_grouped_gemm", differ, a1.size());
  // The CPU's exp may differ from the GPU's expf by an ulp, which flips an e4m3 rounding now and then (one step,
  // 2^-3 of that element): a few per million outputs' worth of error, far under a wrong clamp / weight / scale.
  check_rel_l2(name + " vs CPU", cuda::to_host<float>(dyf, size_t(rows * n)), ref, 5e-3);
}

}  // namespace

TEST(GpuMxfp4Experts, StreamSwigluPrologue) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  // V4-Flash w2 (hidden rows over inter 2048, block 128), one row per expert and full groups of 8, empty groups;
  // V4.1 (block 32, k = 2304); the shared expert's form (weight 1); no clamp; k = 128 (one block per row).
  run_swiglu_w2(rng, 12, 4096, 2048, 128, {1, 1, 1, 1, 1, 1}, 10.0f, true);
  run_swiglu_w2(rng, 12, 1024, 2048, 128, {8, 0, 3, 8, 1}, 2.0f, true);
  run_swiglu_w2(rng, 8, 640, 2304, 32, {2, 7, 0, 4}, 2.0f, true);
  run_swiglu_w2(rng, 4, 1000, 1152, 64, {5, 2}, 2.0f, false);
  run_swiglu_w2(rng, 4, 512, 1024, 256, {3, 8}, 0.0f, true);
  run_swiglu_w2(rng, 6, 640, 128, 128, {8, 0, 0, 3}, 2.0f, true);
}

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

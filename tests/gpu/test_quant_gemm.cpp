// FP8 activation quantization and the W8A8 block-scaled GEMM (both kernels) against the CPU reference:
// layers/quant/fake_quant.cpp for the activation, the weight decoding of model/weight_formats.cpp (e4m3 code times
// its e8m0 block scale) and core/linalg.cpp's double-accumulated matmul.
#include <algorithm>
#include <cstring>

#include "core/linalg.h"
#include "cuda/kernels.h"
#include "cuda/numerics_mode.h"
#include "gpu_test_util.h"
#include "layers/norm_rope/rope.h"
#include "layers/quant/fake_quant.h"
#include "layers/quant/fp8_gemm.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

// Activations with rows of very different magnitude, a few outliers and an all-zero block (amax floor 1e-4).
std::vector<float> activations(Rng& rng, int64_t rows, int64_t k) {
  std::vector<float> x(size_t(rows * k));
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::exp(rng.uniform(-6.0f, 6.0f));
    for (int64_t i = 0; i < k; ++i) x[size_t(r * k + i)] = rng.normal(0.0f, s);
    x[size_t(r * k + rng.integer(0, int(k) - 1))] *= 50.0f;
  }
  std::fill_n(x.begin(), std::min<int64_t>(k, 32), 0.0f);
  round_to_bf16(x);
  return x;
}

struct Fp8Weight {
  std::vector<uint8_t> codes, scales;
  std::vector<float> dequant;  // the CPU reference's view: e4m3 value times the block's e8m0 scale
};

Fp8Weight random_fp8_weight(Rng& rng, int64_t n, int64_t k, int block) {
  Fp8Weight w;
  const int64_t nb = (n + block - 1) / block, kb = (k + block - 1) / block;
  w.codes.resize(size_t(n * k));
  w.scales.resize(size_t(nb * kb));
  for (auto& c : w.codes) c = float_to_e4m3(rng.normal(0.0f, 64.0f));
  for (auto& s : w.scales) s = uint8_t(rng.integer(127 - 12, 127 - 4));  // 2^-12 .. 2^-4
  w.dequant.resize(w.codes.size());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      w.dequant[size_t(r * k + c)] =
          e4m3_to_float(w.codes[size_t(r * k + c)]) * e8m0_to_float(w.scales[size_t((r / block) * kb + c / block)]);
  return w;
}

}  // namespace

TEST(GpuFp8Quantize, MatchesFakeQuantBitExactly) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  for (auto [rows, k, block] : {std::tuple{9, 4096, 128}, std::tuple{5, 5120, 32}, std::tuple{3, 2304, 32}}) {
    std::vector<float> x = activations(rng, rows, k);
    cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dq(size_t(rows) * k), ds(size_t(rows) * (k / block) * 4);
    dq.fill_bytes(0xFF);
    ds.fill_bytes(0xFF);
    cuda::fp8_quantize(dx.as<cuda::bf16>(), dq.as<uint8_t>(), ds.as<float>(), rows, k, block, nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    auto q = cuda::to_host<uint8_t>(dq, size_t(rows) * k);
    auto s = cuda::to_host<float>(ds, size_t(rows) * (k / block));

    // Reference codes and scales from the format definition, and the dequantized values from fp8_fake_quant.
    std::vector<float> ref = x;
    fp8_fake_quant(ref.data(), int64_t(ref.size()), block);
    size_t bad_codes = 0, bad_scales = 0;
    std::vector<float> deq(x.size());
    for (int r = 0; r < rows; ++r)
      for (int b = 0; b < k / block; ++b) {
        float amax = 0;
        for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[size_t(r * k + b * block + i)]));
        const float scale = pow2_ceil(std::max(amax, 1e-4f) / 448.0f);
        bad_scales += s[size_t(r * (k / block) + b)] != scale;
        for (int i = 0; i < block; ++i) {
          const size_t idx = size_t(r * k + b * block + i);
          bad_codes += q[idx] != float_to_e4m3(x[idx] / scale);
          deq[idx] = e4m3_to_float(q[idx]) * s[size_t(r * (k / block) + b)];
        }
      }
    const std::string name = "fp8_quantize k=" + std::to_string(k) + " block=" + std::to_string(block);
    report_exact(name + " codes", bad_codes, q.size());
    report_exact(name + " scales", bad_scales, s.size());
    // Bit-exact: the dequantized codes are fp8_fake_quant's output.
    check_rel_l2(name + " dequant-vs-fake_quant", deq, ref, 0.0);
  }
}

namespace {

// One product's inputs and its CPU reference matmul_nt(fake_quant(x), dequant(w)), made once where several runs
// (kernels, switches, output types) share them: at the decode shapes (n up to 32768) making the weight and the
// reference is most of a run's time.
struct Fp8Problem {
  int64_t m = 0, n = 0, k = 0;
  int block = 128;
  std::vector<float> x;  // [m, k], bf16 values
  Fp8Weight w;
  std::vector<float> ref;  // [m, n]
};

Fp8Problem fp8_problem(Rng& rng, int64_t m, int64_t n, int64_t k, int block) {
  Fp8Problem p;
  p.m = m, p.n = n, p.k = k, p.block = block;
  p.x = activations(rng, m, k);
  p.w = random_fp8_weight(rng, n, k, block);
  std::vector<float> xq = p.x;
  fp8_fake_quant(xq.data(), int64_t(xq.size()), block);
  p.ref.resize(size_t(m * n));
  matmul_nt(xq.data(), m, k, p.w.dequant.data(), n, p.ref.data());
  return p;
}

// Runs fp8_quantize + fp8_gemm on the GPU and compares with the problem's CPU reference.
// `decode` picks the kernel that reads the packed copy: Registers = v7, Stream = v8 (m <= 8; falls back to v7
// above). Returns the output's bits (f32 words, or bf16 halves widened), for comparisons between kernels.
std::vector<uint32_t> run_fp8_gemm(const Fp8Problem& p, cuda::OutType out_type, cuda::GemmPath path,
                                   const char* path_name, bool packed = false,
                                   cuda::DecodeKernel decode = cuda::DecodeKernel::Registers) {
  const int64_t m = p.m, n = p.n, k = p.k;
  const int block = p.block;
  const std::vector<float>& x = p.x;
  const Fp8Weight& w = p.w;
  const std::vector<float>& ref = p.ref;
  cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dq(size_t(m * k)), ds(size_t(m * (k / block)) * 4),
                     dw = cuda::to_device(w.codes), dws = cuda::to_device(w.scales);
  const size_t out_bytes = out_type == cuda::OutType::F32 ? 4 : 2;
  cuda::DeviceBuffer dy(size_t(m * n) * out_bytes);
  dy.fill_bytes(0xFF);
  cuda::fp8_quantize(dx.as<cuda::bf16>(), dq.as<uint8_t>(), ds.as<float>(), m, int(k), block, nullptr);
  cuda::Fp8Linear lin{dw.as<uint8_t>(), dws.as<uint8_t>(), n, k, block};
  // The decode layout is made on the GPU from the checkpoint layout the reference reads (poisoned first, so a
  // slot the repack misses shows up as NaN codes).
  cuda::DeviceBuffer dpacked(packed ? cuda::fp8_packed_bytes(n, k) : 0);
  if (packed) {
    dpacked.fill_bytes(0x7F);
    cuda::fp8_pack(lin, dpacked.as<uint8_t>(), nullptr);
    lin.packed = dpacked.as<uint8_t>();
    lin.decode = decode;
  }
  cuda::fp8_gemm(dq.as<uint8_t>(), ds.as<float>(), m, lin, dy.get(), out_type, nullptr, path);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  if (packed && out_type == cuda::OutType::F32) {
    // Deterministic split-K and batch invariance: a second run is bitwise equal, and so is token 0 computed alone.
    cuda::DeviceBuffer dy2(size_t(m * n) * 4), dy1(size_t(n) * 4);
    dy2.fill_bytes(0xFF);
    dy1.fill_bytes(0xFF);
    cuda::fp8_gemm(dq.as<uint8_t>(), ds.as<float>(), m, lin, dy2.get(), out_type, nullptr, path);
    cuda::fp8_gemm(dq.as<uint8_t>(), ds.as<float>(), 1, lin, dy1.get(), out_type, nullptr, path);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    auto a = cuda::to_host<uint32_t>(dy, size_t(m * n)), b = cuda::to_host<uint32_t>(dy2, size_t(m * n)),
         c = cuda::to_host<uint32_t>(dy1, size_t(n));
    size_t rerun = 0, alone = 0;
    for (size_t i = 0; i < a.size(); ++i) rerun += a[i] != b[i];
    for (size_t i = 0; i < c.size(); ++i) alone += a[i] != c[i];
    const std::string tag = std::string("fp8_gemm ") + path_name + " m=" + std::to_string(m) + " n=" + std::to_string(n);
    report_exact(tag + " rerun-bitwise", rerun, a.size());
    // v8 serves m <= 8 only (v7 above): token 0 alone runs v8, inside a batch of more than 8 v7, whose K split
    // differs, so the batch-invariance check applies within one kernel.
    if (decode != cuda::DecodeKernel::Stream || m <= 8) report_exact(tag + " token0-alone-bitwise", alone, c.size());
  }
  std::vector<float> out = out_type == cuda::OutType::F32 ? cuda::to_host<float>(dy, size_t(m * n))
                                                         : from_bf16(cuda::to_host<uint16_t>(dy, size_t(m * n)));
  // The products of e4m3 values are exact in fp32 and the scales are powers of two, so the only errors are
  // the accumulation order and the tensor cores' reduced-precision FP8 accumulation inside one 32- or 128-wide
  // K step (about 13 mantissa bits, DeepGEMM's reason to promote per block): a few 1e-4 relative at these K.
  // bf16 output adds one rounding (kBf16OutputBound).
  const double bound = out_type == cuda::OutType::F32 ? 1e-3 : kBf16OutputBound + 1e-3;
  check_rel_l2(std::string("fp8_gemm ") + path_name + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                   " k=" + std::to_string(k) + " block=" + std::to_string(block) +
                   (out_type == cuda::OutType::F32 ? " f32" : " bf16"),
               out, ref, bound);
  if (out_type == cuda::OutType::F32) return cuda::to_host<uint32_t>(dy, size_t(m * n));
  const std::vector<uint16_t> h = cuda::to_host<uint16_t>(dy, size_t(m * n));
  return std::vector<uint32_t>(h.begin(), h.end());
}

// The same on fresh inputs from rng.
std::vector<uint32_t> run_fp8_gemm(Rng& rng, int64_t m, int64_t n, int64_t k, int block, cuda::OutType out_type,
                                   cuda::GemmPath path, const char* path_name, bool packed = false,
                                   cuda::DecodeKernel decode = cuda::DecodeKernel::Registers) {
  return run_fp8_gemm(fp8_problem(rng, m, n, k, block), out_type, path, path_name, packed, decode);
}

}  // namespace


TEST(GpuFp8Gemm, SkinnyDecodeShapes) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_fp8_gemm(rng, 1, 4096, 4096, 128, cuda::OutType::BF16, cuda::GemmPath::Skinny, "skinny");
  run_fp8_gemm(rng, 7, 1040, 1024, 128, cuda::OutType::F32, cuda::GemmPath::Skinny, "skinny");
  run_fp8_gemm(rng, 37, 1000, 1280, 32, cuda::OutType::F32, cuda::GemmPath::Skinny, "skinny");
  run_fp8_gemm(rng, 64, 512, 5120, 32, cuda::OutType::BF16, cuda::GemmPath::Skinny, "skinny");
  run_fp8_gemm(rng, 100, 256, 2048, 128, cuda::OutType::F32, cuda::GemmPath::Skinny, "skinny");  // > 64 rows: 2 passes
}

// Decode v5: fragment-ordered weights (fp8_pack) and the split-K cluster kernel; the narrow shapes (n = 1024 /
// 1280) take the split, n = 1000 / 1040 have a partial last row tile.
TEST(GpuFp8Gemm, PackedDecodeShapes) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_fp8_gemm(rng, 1, 4096, 4096, 128, cuda::OutType::BF16, cuda::GemmPath::Skinny, "packed", true);
  run_fp8_gemm(rng, 1, 1024, 4096, 128, cuda::OutType::F32, cuda::GemmPath::Skinny, "packed", true);
  run_fp8_gemm(rng, 3, 1280, 5120, 32, cuda::OutType::F32, cuda::GemmPath::Skinny, "packed", true);
  run_fp8_gemm(rng, 7, 1040, 1024, 128, cuda::OutType::F32, cuda::GemmPath::Skinny, "packed", true);
  run_fp8_gemm(rng, 37, 1000, 1280, 32, cuda::OutType::F32, cuda::GemmPath::Skinny, "packed", true);
  run_fp8_gemm(rng, 64, 512, 5120, 32, cuda::OutType::BF16, cuda::GemmPath::Skinny, "packed", true);
  run_fp8_gemm(rng, 100, 256, 2048, 128, cuda::OutType::F32, cuda::GemmPath::Skinny, "packed", true);
}

// Decode v8: the packed weights streamed by bulk copies through a shared-memory ring (cuda/stream_gemm.cuh), against
// the CPU reference, next to the same shapes on v7 above. Covers m = 1..8, n not a multiple of the 16-row tile
// (1040, 1000, 130), k at the minimum (128: one granule of 4 steps), partial last chunks (k = 1280: 32 + 8 steps,
// k = 5120: 5 chunks), k = 8192 with 5 / 8 rows (the one-block-per-SM, more-stages configuration), 2048 tiles of
// one chunk (every block runs ~8 items: stage / parity wrap across tiles), and m = 37 (falls back to v7).
TEST(GpuFp8Gemm, StreamDecodeShapes) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  const auto S = cuda::DecodeKernel::Stream;
  run_fp8_gemm(rng, 1, 4096, 4096, 128, cuda::OutType::BF16, cuda::GemmPath::Skinny, "stream", true, S);
  run_fp8_gemm(rng, 1, 1024, 4096, 128, cuda::OutType::F32, cuda::GemmPath::Skinny, "stream", true, S);
  run_fp8_gemm(rng, 2, 32768, 1024, 128, cuda::OutType::F32, cuda::GemmPath::Skinny, "stream", true, S);
  run_fp8_gemm(rng, 3, 1280, 5120, 32, cuda::OutType::F32, cuda::GemmPath::Skinny, "stream", true, S);
  run_fp8_gemm(rng, 4, 272, 128, 128, cuda::OutType::F32, cuda::GemmPath::Skinny, "stream", true, S);
  run_fp8_gemm(rng, 5, 130, 8192, 32, cuda::OutType::F32, cuda::GemmPath::Skinny, "stream", true, S);
  run_fp8_gemm(rng, 6, 2048, 2304, 32, cuda::OutType::BF16, cuda::GemmPath::Skinny, "stream", true, S);
  run_fp8_gemm(rng, 7, 1040, 1024, 128, cuda::OutType::F32, cuda::GemmPath::Skinny, "stream", true, S);
  run_fp8_gemm(rng, 8, 1000, 1280, 32, cuda::OutType::F32, cuda::GemmPath::Skinny, "stream", true, S);
  run_fp8_gemm(rng, 8, 512, 8192, 128, cuda::OutType::F32, cuda::GemmPath::Skinny, "stream", true, S);
  run_fp8_gemm(rng, 37, 1000, 1280, 32, cuda::OutType::F32, cuda::GemmPath::Skinny, "stream", true, S);
}

// Decode v8's FP8 loop with the 128-block form fixed at compile time (DEEPINFER_STREAM_LOOP=blk128, bench/gpu/NOTES.md
// "Decode stream loop for 128-blocks"): the same operations in the same order as the generic loop, so every output bit
// equal to it (the generic loop is the reference), besides the CPU reference bound of run_fp8_gemm. Shapes:
// m = 1 (the kOne tile loop), 2, 5 and 8 rows, a partial last row tile (n = 1040), k = 128 (one granule), k = 1280
// (a partial last chunk), k = 8192 (one block per SM, more stages); block 32 keeps the generic loop under the switch.
TEST(GpuFp8Gemm, StreamBlk128LoopBitwise) {
  DI_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t m, n, k;
    int block;
  };
  const Shape shapes[] = {{1, 4096, 4096, 128}, {2, 1040, 1280, 128}, {5, 272, 128, 128},
                          {8, 512, 8192, 128},  {1, 1024, 4096, 128}, {3, 1280, 5120, 32}};
  Rng rng;
  const bool saved = cuda::stream_blk128_loop();
  for (const Shape& sh : shapes) {
    for (cuda::OutType out_type : {cuda::OutType::F32, cuda::OutType::BF16}) {
      std::vector<uint32_t> outs[2];
      const Rng inputs = rng;  // the same inputs for both loops
      rng.normal();            // and fresh ones for the next case
      for (int on = 0; on < 2; ++on) {
        cuda::set_stream_blk128_loop(on == 1);
        Rng r = inputs;
        outs[on] = run_fp8_gemm(r, sh.m, sh.n, sh.k, sh.block, out_type, cuda::GemmPath::Skinny,
                                on ? "stream-blk128" : "stream-generic", true, cuda::DecodeKernel::Stream);
      }
      cuda::set_stream_blk128_loop(saved);
      size_t diff = 0;
      for (size_t i = 0; i < outs[0].size(); ++i) diff += outs[0][i] != outs[1][i];
      report_exact("stream fp8 blk128 vs generic m=" + std::to_string(sh.m) + " n=" + std::to_string(sh.n) +
                       " k=" + std::to_string(sh.k) + " block=" + std::to_string(sh.block) +
                       (out_type == cuda::OutType::F32 ? " f32" : " bf16"),
                   diff, outs[0].size());
    }
  }
}

// Decode v8's ring depth (DEEPINFER_STREAM_STAGES, bench/gpu/NOTES.md "Decode stream: a shallow ring"): 2 stages per
// block, the default since session 13 and the reference here, against the earlier default sizing (0: up to 6 stages)
// and 3 stages, bitwise, besides run_fp8_gemm's CPU bound, rerun and token-0 checks at every depth. The depth changes
// when stages land, never the chunks or an operation. Shapes: the V4 decode products (wq_b, wo_b, shared w13 / w2,
// wq_a) and V4.1's wq_b (block 32) at m = 1 and 8 (at m = 8, k = 4096 / 8192 the earlier sizing takes one block of
// 9 / 5 stages per SM, the 2-stage ring two blocks, at k = 8192 with the activations staged as e4m3 bytes), then odd
// ones: a partial last row tile and chunk (n 1040, k 1152), one granule (k 128), m = 2 / 3 / 5 / 7. Each shape's
// inputs and CPU reference are made once and serve every depth and both output types (with a reference per run the
// test took 158 s, H200 run 78).
TEST(GpuFp8Gemm, StreamRingDepthBitwise) {
  DI_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t m, n, k;
    int block;
  };
  std::vector<Shape> shapes;
  for (int64_t m : {1, 8})
    for (Shape s : {Shape{0, 32768, 1024, 128}, Shape{0, 4096, 8192, 128}, Shape{0, 4096, 4096, 128},
                    Shape{0, 4096, 2048, 128}, Shape{0, 1024, 4096, 128}, Shape{0, 32768, 1280, 32}}) {
      s.m = m;
      shapes.push_back(s);
    }
  for (const Shape& s : {Shape{2, 4096, 4096, 128}, Shape{3, 1040, 1152, 128}, Shape{5, 272, 128, 32},
                         Shape{7, 130, 2304, 32}, Shape{1, 1040, 1152, 128}})
    shapes.push_back(s);
  Rng rng;
  const int saved = cuda::stream_ring_stages();
  const int depths[] = {2, 0, 3};  // the default (the reference), the earlier sizing, a deeper ring
  for (const Shape& sh : shapes) {
    const Fp8Problem problem = fp8_problem(rng, sh.m, sh.n, sh.k, sh.block);
    for (cuda::OutType out_type : {cuda::OutType::F32, cuda::OutType::BF16}) {
      std::vector<uint32_t> outs[3];
      for (int d = 0; d < 3; ++d) {
        cuda::set_stream_ring_stages(depths[d]);
        const std::string name = "stream-stages" + std::to_string(depths[d]);
        outs[d] = run_fp8_gemm(problem, out_type, cuda::GemmPath::Skinny, name.c_str(), true,
                               cuda::DecodeKernel::Stream);
      }
      cuda::set_stream_ring_stages(saved);
      for (int d = 1; d < 3; ++d) {
        size_t diff = 0;
        for (size_t i = 0; i < outs[0].size(); ++i) diff += outs[0][i] != outs[d][i];
        report_exact("stream fp8 stages " + std::to_string(depths[d]) + " vs 2 (default) m=" + std::to_string(sh.m) +
                         " n=" + std::to_string(sh.n) + " k=" + std::to_string(sh.k) +
                         " block=" + std::to_string(sh.block) + (out_type == cuda::OutType::F32 ? " f32" : " bf16"),
                     diff, outs[0].size());
      }
    }
  }
}

// The balanced persistent grid (the default) against the full one (DEEPINFER_STREAM_GRID=full): a block's items are computed
// the same way whichever block takes them, so the same bits. Shapes whose tile counts are not multiples of the
// slots (V4.1 wo_b 320 tiles, shared w1|w3 288, V4 wq_b 2048 on 264 slots) and small ones.
TEST(GpuFp8Gemm, StreamBalancedGridBitwise) {
  DI_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t m, n, k;
    int block;
  };
  const Shape shapes[] = {{1, 5120, 8192, 32}, {1, 4608, 5120, 32}, {1, 32768, 1024, 128}, {8, 5120, 8192, 32},
                          {3, 4240, 1152, 128}, {1, 1040, 1152, 128}};
  Rng rng;
  const bool saved = cuda::stream_balanced_grid();
  for (const Shape& sh : shapes) {
    const Fp8Problem problem = fp8_problem(rng, sh.m, sh.n, sh.k, sh.block);
    for (cuda::OutType out_type : {cuda::OutType::F32, cuda::OutType::BF16}) {
      std::vector<uint32_t> outs[2];
      for (int on = 0; on < 2; ++on) {
        cuda::set_stream_balanced_grid(on == 1);
        outs[on] = run_fp8_gemm(problem, out_type, cuda::GemmPath::Skinny, on ? "stream-balanced" : "stream-full", true,
                                cuda::DecodeKernel::Stream);
      }
      cuda::set_stream_balanced_grid(saved);
      size_t diff = 0;
      for (size_t i = 0; i < outs[0].size(); ++i) diff += outs[0][i] != outs[1][i];
      report_exact("stream fp8 balanced grid vs full m=" + std::to_string(sh.m) + " n=" + std::to_string(sh.n) +
                       " k=" + std::to_string(sh.k) + " block=" + std::to_string(sh.block) +
                       (out_type == cuda::OutType::F32 ? " f32" : " bf16"),
                   diff, outs[0].size());
    }
  }
}

// The dense stream's stamped diagnostic instantiation (stream_gemm_kernel<.., kStamps>, set_stream_fp8_stamps;
// roofline --fp8-phases) against the default kernel: the stamps only add clock reads and stores to their own buffer,
// so the products must match bit for bit, and some block must have written its start and end times.
TEST(GpuFp8Gemm, StreamStampedSameBits) {
  DI_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t m, n, k;
    int block;
  };
  Rng rng;
  int sms = 0;
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (const Shape& sh : {Shape{1, 32768, 1024, 128}, Shape{1, 4096, 8192, 128}, Shape{8, 1024, 4096, 128},
                          Shape{3, 1040, 1152, 128}, Shape{1, 32768, 1280, 32}}) {
    const Fp8Problem problem = fp8_problem(rng, sh.m, sh.n, sh.k, sh.block);
    const std::string tag = "stream fp8 stamped vs plain m=" + std::to_string(sh.m) + " n=" + std::to_string(sh.n) +
                            " k=" + std::to_string(sh.k) + " block=" + std::to_string(sh.block);
    const std::vector<uint32_t> plain =
        run_fp8_gemm(problem, cuda::OutType::F32, cuda::GemmPath::Skinny, "stream-plain", true,
                     cuda::DecodeKernel::Stream);
    cuda::DeviceBuffer stamps(size_t(2 * sms) * cuda::kFp8StampSlots * 8);  // <= two blocks per SM
    stamps.fill_bytes(0);
    cuda::set_stream_fp8_stamps(stamps.as<unsigned long long>());
    const std::vector<uint32_t> stamped =
        run_fp8_gemm(problem, cuda::OutType::F32, cuda::GemmPath::Skinny, "stream-stamped", true,
                     cuda::DecodeKernel::Stream);
    cuda::set_stream_fp8_stamps(nullptr);
    size_t diff = 0;
    for (size_t i = 0; i < plain.size(); ++i) diff += plain[i] != stamped[i];
    report_exact(tag, diff, plain.size());
    const std::vector<unsigned long long> host =
        cuda::to_host<unsigned long long>(stamps, size_t(2 * sms) * cuda::kFp8StampSlots);
    const unsigned long long start = host[cuda::kFp8StStartNs], end = host[cuda::kFp8StEndNs];
    EXPECT_GT(start, 0ull) << tag << ": block 0 wrote no start stamp (did the stamped kernel run?)";
    EXPECT_GE(end, start) << tag << ": block 0's end stamp";
  }
}

namespace {

// The decode stream kernel's K-loop and ring-depth settings, restored when a test that sweeps them ends.
struct StreamLoopSettings {
  const bool blk128 = cuda::stream_blk128_loop();
  const int stages = cuda::stream_ring_stages();
  ~StreamLoopSettings() {
    cuda::set_stream_blk128_loop(blk128);
    cuda::set_stream_ring_stages(stages);
  }
};

// A fused decode form at one row: the captured graph holds one kernel node with its switch on, two without.
void expect_one_node_fused(const char* form, const std::string& what, const int (&nodes)[2]) {
  std::printf("GPU_CHECK %s%s kernel nodes off=%d on=%d\n", form, what.c_str(), nodes[0], nodes[1]);
  EXPECT_EQ(nodes[0], 2) << what;
  EXPECT_EQ(nodes[1], 1) << what;
}

}  // namespace

// fp8_gemm_bf16 with the quantization in the decode stream kernel's prologue at every row count it takes
// (set_fp8_quant_prologue_rows(8); bench/gpu/NOTES.md "wo_b's quantization in its prologue") against fp8_quantize +
// fp8_gemm (0 rows), bit for bit, with the CPU bound on the prologue's output too: wo_b's shapes (V4: n 4096, k 8192,
// block 128; V4.1: n 5120, k 8192, block 32) at 1, 2, 5 and 8 rows, odd ones (a partial row tile, k 1152, one
// granule), under both K loops and the ring depths that stage the activations as f16 (0) and as e4m3 bytes (2, at
// k 8192 and 8 rows); 9 rows fall back to the two launches. At one row the captured graph holds one kernel node with the switch on and two without.
TEST(GpuFp8Gemm, QuantPrologueBitwise) {
  DI_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t m, n, k;
    int block;
  };
  const Shape shapes[] = {{1, 4096, 8192, 128}, {8, 4096, 8192, 128}, {2, 5120, 8192, 32}, {8, 5120, 8192, 32},
                          {5, 1040, 1152, 128}, {3, 272, 128, 32},    {9, 1024, 4096, 128}};
  Rng rng;
  const int saved_prologue = cuda::fp8_quant_prologue_rows();
  const StreamLoopSettings saved_loop;
  cudaStream_t stream = nullptr;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const Shape& sh : shapes) {
    const Fp8Problem p = fp8_problem(rng, sh.m, sh.n, sh.k, sh.block);
    cuda::DeviceBuffer dx = cuda::to_device(to_bf16(p.x)), dq(size_t(p.m * p.k)),
                       ds(size_t(p.m * (p.k / p.block)) * 4), dw = cuda::to_device(p.w.codes),
                       dws = cuda::to_device(p.w.scales), dpacked(cuda::fp8_packed_bytes(p.n, p.k));
    cuda::Fp8Linear lin{dw.as<uint8_t>(), dws.as<uint8_t>(), p.n, p.k, p.block};
    dpacked.fill_bytes(0x7F);
    cuda::fp8_pack(lin, dpacked.as<uint8_t>(), nullptr);
    // The fill and the pack ran on the legacy stream, which the non-blocking `stream` does not wait for (run 118:
    // the first case of a shape read a half-packed weight, 3,217 of 3,264 outputs off).
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    lin.packed = dpacked.as<uint8_t>();
    lin.decode = cuda::DecodeKernel::Stream;
    for (const cuda::OutType out_type : {cuda::OutType::F32, cuda::OutType::BF16})
      for (const bool blk128 : {true, false})
        for (const int stages : {2, 0}) {
          cuda::set_stream_blk128_loop(blk128);
          cuda::set_stream_ring_stages(stages);
          const size_t out_bytes = out_type == cuda::OutType::F32 ? 4 : 2, count = size_t(p.m * p.n);
          std::vector<uint8_t> y[2];
          int nodes[2] = {0, 0};
          for (const bool on : {false, true}) {
            cuda::set_fp8_quant_prologue_rows(on ? 8 : 0);
            cuda::DeviceBuffer dy(count * out_bytes);
            // On `stream`: fill_bytes' cudaMemset runs on the legacy stream, which a non-blocking stream does not
            // wait for (run 104: one case of the RoPE test below read a half-filled output).
            DI_CUDA_CHECK(cudaMemsetAsync(dy.get(), 0xFF, count * out_bytes, stream));
            DI_CUDA_CHECK(cudaMemsetAsync(dq.get(), 0xFF, size_t(p.m * p.k), stream));
            auto gemm = [&](cudaStream_t st) {
              cuda::fp8_gemm_bf16(dx.as<cuda::bf16>(), p.m, lin, dy.get(), out_type, dq.as<uint8_t>(), ds.as<float>(),
                                  st);
            };
            gemm(stream);
            DI_CUDA_CHECK(cudaStreamSynchronize(stream));
            y[on] = cuda::to_host<uint8_t>(dy, count * out_bytes);
            if (p.m == 1) nodes[on] = captured_kernel_nodes(stream, [&] { gemm(stream); });
          }
          const std::string what = " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                                   " k=" + std::to_string(p.k) + " block=" + std::to_string(p.block) +
                                   (out_type == cuda::OutType::F32 ? " f32" : " bf16") +
                                   (blk128 ? " blk128" : " generic") + " stages=" + std::to_string(stages);
          report_exact("fp8_gemm_bf16 prologue vs fp8_quantize + fp8_gemm" + what, bitwise_mismatches(y[1], y[0]),
                       y[0].size());
          std::vector<float> out(count);
          for (size_t i = 0; i < count; ++i) {
            if (out_type == cuda::OutType::F32) {
              std::memcpy(&out[i], y[1].data() + 4 * i, 4);
            } else {
              const uint32_t u = uint32_t(y[1][2 * i] | y[1][2 * i + 1] << 8) << 16;
              std::memcpy(&out[i], &u, 4);
            }
          }
          check_rel_l2("fp8_gemm_bf16 prologue" + what, out, p.ref,
                       out_type == cuda::OutType::F32 ? 1e-3 : kBf16OutputBound + 1e-3);
          if (p.m == 1) expect_one_node_fused("fp8_gemm_bf16", what, nodes);
        }
  }
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
  cuda::set_fp8_quant_prologue_rows(saved_prologue);
}

// A decode stream product's device inputs: p's rows quantized on `stream` (dq / ds), p's weight packed for the
// decode stream kernel (lin, DecodeKernel::Stream; the pack buffer poisoned first), and a RoPE epilogue over
// head_dim-wide heads at `positions` with `inv_freq`.
struct StreamDecodeProblem {
  cuda::DeviceBuffer dx, dq, ds, dw, dws, dpacked, dpos, dfreq;
  cuda::Fp8Linear lin;
  cuda::RopeEpilogue rope;
  StreamDecodeProblem(const Fp8Problem& p, const std::vector<int32_t>& positions, const std::vector<float>& inv_freq,
                      int head_dim, int rope_dim, cudaStream_t stream)
      : dx(cuda::to_device(to_bf16(p.x))), dq(size_t(p.m * p.k)), ds(size_t(p.m * (p.k / p.block)) * 4),
        dw(cuda::to_device(p.w.codes)), dws(cuda::to_device(p.w.scales)), dpacked(cuda::fp8_packed_bytes(p.n, p.k)),
        dpos(cuda::to_device(positions)), dfreq(cuda::to_device(inv_freq)),
        lin{dw.as<uint8_t>(), dws.as<uint8_t>(), p.n, p.k, p.block},
        rope{dpos.as<int32_t>(), dfreq.as<float>(), head_dim, rope_dim} {
    cuda::fp8_quantize(dx.as<cuda::bf16>(), dq.as<uint8_t>(), ds.as<float>(), p.m, int(p.k), p.block, stream);
    dpacked.fill_bytes(0x7F);
    cuda::fp8_pack(lin, dpacked.as<uint8_t>(), nullptr);
    // The fill and the pack ran on the legacy stream, which a non-blocking `stream` does not wait for.
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    lin.packed = dpacked.as<uint8_t>();
    lin.decode = cuda::DecodeKernel::Stream;
  }
};

// The query RoPE in wq_b's decode epilogue (cuda::fp8_gemm_rope, DEEPINFER_Q_ROPE_EPILOGUE, bench/gpu/NOTES.md "The
// query RoPE in wq_b's epilogue") against fp8_gemm (bf16 out) + rope() (the switch off), bit for bit: V4.1's wq_b
// (64 heads of 512, rope_dim 64, k 1280, block 32) at 1, 2, 3 and 8 rows; a 128-block weight at 8 rows and k 8192 under
// both K loops and the ring depths that stage the activations as f16 (0) and as e4m3 bytes (2); odd heads (head_dim 24,
// rope_dim 8: heads across the 16-column tiles, a partial last tile). Positions per row: small, large (the accurate
// sincosf's slow path above |angle| ~ 1e5, inv_freq[0] = 1), 2^31 - 1 and 0. 9 rows fall back to the two launches
// (fp8_gemm_rope returns false). At one row the captured graph holds one kernel node with the epilogue and two without.
TEST(GpuFp8Gemm, RopeEpilogueBitwise) {
  DI_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t m, n, k;
    int block, head_dim, rope_dim;
  };
  const Shape shapes[] = {{1, 32768, 1280, 32, 512, 64}, {2, 32768, 1280, 32, 512, 64}, {3, 32768, 1280, 32, 512, 64},
                          {8, 32768, 1280, 32, 512, 64}, {8, 4096, 8192, 128, 512, 64}, {1, 120, 256, 32, 24, 8},
                          {5, 120, 256, 128, 24, 8},     {9, 4096, 1280, 32, 512, 64}};
  Rng rng;
  YarnScaling yarn;  // V4.1's compressed layers: compress_rope_theta + YaRN (as GpuRope.MatchesReferenceBitwise)
  yarn.factor = 16.0f;
  yarn.original_max_position_embeddings = 65536;
  const bool saved_epilogue = cuda::q_rope_epilogue();
  const StreamLoopSettings saved_loop;
  cudaStream_t stream = nullptr;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const Shape& sh : shapes) {
    const Fp8Problem p = fp8_problem(rng, sh.m, sh.n, sh.k, sh.block);
    const Rope freq(sh.rope_dim, 160000.0f, &yarn);
    std::vector<int32_t> positions(size_t(p.m));
    for (int64_t r = 0; r < p.m; ++r) {
      const int kind = int((r + p.m) % 4);
      positions[size_t(r)] =
          kind == 0 ? rng.integer(1, 4096) : kind == 1 ? rng.integer(200000, 1 << 24) : kind == 2 ? 2147483647 : 0;
    }
    const StreamDecodeProblem d(p, positions, freq.inv_freq(), sh.head_dim, sh.rope_dim, stream);
    const cuda::Fp8Linear& lin = d.lin;
    const cuda::RopeEpilogue& rope = d.rope;
    const cuda::DeviceBuffer &dq = d.dq, &ds = d.ds;
    const int heads = int(p.n / sh.head_dim);
    for (const bool blk128 : {true, false})
      for (const int stages : {2, 0}) {
        cuda::set_stream_blk128_loop(blk128);
        cuda::set_stream_ring_stages(stages);
        const size_t count = size_t(p.m * p.n);
        std::vector<uint8_t> y[2];
        bool fused[2] = {false, false};
        int nodes[2] = {0, 0};
        for (const bool on : {false, true}) {
          cuda::set_q_rope_epilogue(on);
          cuda::DeviceBuffer dy(count * 2);
          DI_CUDA_CHECK(cudaMemsetAsync(dy.get(), 0xFF, count * 2, stream));  // on `stream`: see QuantPrologueBitwise
          auto gemm = [&](cudaStream_t st) {
            const bool rotated = cuda::fp8_gemm_rope(dq.as<uint8_t>(), ds.as<float>(), p.m, lin, dy.as<cuda::bf16>(),
                                                     rope, st);
            if (!rotated)
              cuda::rope(dy.as<cuda::bf16>(), p.n, rope.positions, rope.inv_freq, p.m, heads, sh.head_dim,
                         sh.rope_dim, false, st);
            return rotated;
          };
          fused[on] = gemm(stream);
          DI_CUDA_CHECK(cudaStreamSynchronize(stream));
          y[on] = cuda::to_host<uint8_t>(dy, count * 2);
          if (p.m == 1) nodes[on] = captured_kernel_nodes(stream, [&] { gemm(stream); });
        }
        const std::string what = " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                                 " k=" + std::to_string(p.k) + " block=" + std::to_string(p.block) +
                                 " head_dim=" + std::to_string(sh.head_dim) + " rope_dim=" +
                                 std::to_string(sh.rope_dim) + (blk128 ? " blk128" : " generic") +
                                 " stages=" + std::to_string(stages);
        EXPECT_FALSE(fused[0]) << what;
        EXPECT_EQ(fused[1], p.m <= 8) << what;
        report_exact("fp8_gemm_rope epilogue vs fp8_gemm + rope" + what, bitwise_mismatches(y[1], y[0]),
                     y[0].size());
        if (p.m == 1) expect_one_node_fused("fp8_gemm_rope", what, nodes);
      }
  }
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
  cuda::set_q_rope_epilogue(saved_epilogue);
}

// The dense stream's launch order, bit for bit, in a chain whose every product reads its predecessor's output: y1 =
// W1 x (bf16), y2 = W2 y1 (bf16, quantized in the prologue), y3 = W3 y2 (f32), captured in a graph and replayed three
// times with y1 / y2 / y3 poisoned before each replay. A dependent that read its input before the predecessor had
// finished would see the poison. The orders: the PDL trigger at each block's last item (DEEPINFER_STREAM_TRIGGER=last,
// the reference) or at the top (the default; set_stream_entry_trigger). (The early weight flood limited before the
// producer's pdl_wait, DEEPINFER_STREAM_EARLY, was an order here until removed: bench/gpu/NOTES.md, run 147.) Rows 1
// and 8, 4096-wide products at blocks 128 (V4) and 32 (V4.1).
TEST(GpuFp8Gemm, StreamEntryTriggerChainBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  const bool saved_trigger = cuda::stream_entry_trigger();
  struct Order {
    const char* name;
    bool entry;
  };
  const Order orders[] = {{"last", false}, {"entry", true}};
  constexpr int kOrders = int(sizeof(orders) / sizeof(orders[0]));
  const int saved_prologue = cuda::fp8_quant_prologue_rows();
  cuda::set_fp8_quant_prologue_rows(8);
  cudaStream_t stream = nullptr;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::vector<int32_t> no_positions(8, 0);
  const std::vector<float> no_freq(1, 1.0f);
  for (const int block : {128, 32})
    for (const int64_t m : {1, 8}) {
      const int64_t n = 4096;
      const Fp8Problem p1 = fp8_problem(rng, m, n, n, block), p2 = fp8_problem(rng, m, n, n, block),
                       p3 = fp8_problem(rng, m, n, n, block);
      const StreamDecodeProblem d1(p1, no_positions, no_freq, 16, 2, stream),
          d2(p2, no_positions, no_freq, 16, 2, stream), d3(p3, no_positions, no_freq, 16, 2, stream);
      cuda::DeviceBuffer y1(size_t(m * n) * 2), y2(size_t(m * n) * 2), y3(size_t(m * n) * 4), q(size_t(m * n)),
          qs(size_t(m * (n / block)) * 4);
      std::vector<uint8_t> out[kOrders];
      for (int o = 0; o < kOrders; ++o) {
        cuda::set_stream_entry_trigger(orders[o].entry);
        cudaGraphExec_t exec = capture_exec(
            stream,
            [&] {
              cuda::fp8_gemm(d1.dq.as<uint8_t>(), d1.ds.as<float>(), m, d1.lin, y1.get(), cuda::OutType::BF16, stream,
                             cuda::GemmPath::Skinny);
              cuda::fp8_gemm_bf16(y1.as<cuda::bf16>(), m, d2.lin, y2.get(), cuda::OutType::BF16, q.as<uint8_t>(),
                                  qs.as<float>(), stream);
              cuda::fp8_gemm_bf16(y2.as<cuda::bf16>(), m, d3.lin, y3.get(), cuda::OutType::F32, q.as<uint8_t>(),
                                  qs.as<float>(), stream);
            },
            cudaStreamCaptureModeThreadLocal);
        for (int rep = 0; rep < 3; ++rep) {
          for (cuda::DeviceBuffer* b : {&y1, &y2, &y3})
            DI_CUDA_CHECK(cudaMemsetAsync(b->get(), 0xFF, b->bytes(), stream));
          DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
          DI_CUDA_CHECK(cudaStreamSynchronize(stream));
          const std::vector<uint8_t> y = cuda::to_host<uint8_t>(y3, size_t(m * n) * 4);
          if (rep == 0) out[o] = y;
          report_exact(std::string("stream fp8 chain replay vs first, ") + orders[o].name + " m=" + std::to_string(m) +
                           " block=" + std::to_string(block) + " replay " + std::to_string(rep),
                       bitwise_mismatches(y, out[o]), y.size());
        }
        DI_CUDA_CHECK(cudaGraphExecDestroy(exec));
      }
      for (int o = 1; o < kOrders; ++o)
        report_exact(std::string("stream fp8 chain ") + orders[o].name + " vs last m=" + std::to_string(m) +
                         " block=" + std::to_string(block),
                     bitwise_mismatches(out[o], out[0]), out[0].size());
      size_t poisoned = 0;  // 0xFFFFFFFF (a NaN): an output the chain never wrote
      for (size_t i = 0; i + 4 <= out[0].size(); i += 4)
        poisoned += out[0][i] == 0xFF && out[0][i + 1] == 0xFF && out[0][i + 2] == 0xFF && out[0][i + 3] == 0xFF;
      EXPECT_EQ(poisoned, 0u) << "m=" << m << " block=" << block;
    }
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
  cuda::set_stream_entry_trigger(saved_trigger);
  cuda::set_fp8_quant_prologue_rows(saved_prologue);
}

namespace {

// The grid of the one kernel node that `enqueue` captures on `stream`.
unsigned captured_grid_x(cudaStream_t stream, const std::function<void()>& enqueue) {
  cudaGraph_t graph = capture_graph(stream, enqueue, cudaStreamCaptureModeThreadLocal);
  size_t count = 0;
  DI_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  DI_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  unsigned grid = 0;
  int kernels = 0;
  for (cudaGraphNode_t n : nodes) {
    cudaGraphNodeType t;
    DI_CUDA_CHECK(cudaGraphNodeGetType(n, &t));
    if (t != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeParams params{};
    DI_CUDA_CHECK(cudaGraphKernelNodeGetParams(n, &params));
    grid = params.gridDim.x;
    ++kernels;
  }
  DI_CUDA_CHECK(cudaGraphDestroy(graph));
  EXPECT_EQ(kernels, 1);
  return grid;
}

}  // namespace

namespace {

// The stream kernel's persistent grid for `items` work items on `slots` resident blocks: min(items, slots) blocks,
// or with the balanced grid (the default; cuda::stream_balanced_grid) as few blocks as take the same longest share,
// ceil(items / ceil(items / min(items, slots))), so every block takes the same number of items.
int64_t persistent_grid(int64_t items, int64_t slots) {
  const int64_t blocks = std::min(items, slots);
  if (!cuda::stream_balanced_grid() || blocks <= 0) return blocks;
  const int64_t per_block = (items + blocks - 1) / blocks;
  return (items + per_block - 1) / per_block;
}

}  // namespace

// The decode stream kernel with a capped grid (cuda::StreamGrid: fp8_gemm_grid, fp8_gemm_rope; the model's
// DEEPINFER_BRANCH_GEMV_BLOCKS_PER_SM / _SPARE_SMS for wq_b on the query branch) against its own grid, bit for bit:
// a work item is one 16-row tile over all of k in one block, so the grid moves tiles between blocks and nothing else.
// V4's wq_b (n 32768, k 1024, block 128) and V4.1's (k 1280, block 32; fp8_gemm_rope's epilogue too: 64 heads of 512,
// rope_dim 64) at 1, 2 and 8 rows, f32 and bf16, under the default ring (2 stages) and the earlier sizing (0): one
// block per SM, 8 SMs with one block fewer, both, and a single block. The captured launch's grid is the one asked for.
TEST(GpuFp8Gemm, StreamGridCapBitwise) {
  DI_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t m, n, k;
    int block;
  };
  std::vector<Shape> shapes;
  for (int64_t m : {1, 2, 8})
    for (Shape s : {Shape{0, 32768, 1024, 128}, Shape{0, 32768, 1280, 32}}) {
      s.m = m;
      shapes.push_back(s);
    }
  const cuda::StreamGrid grids[] = {{1, 0}, {0, 8}, {1, 8}, {1, 1 << 20}};
  int sms = 0;
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Rng rng;
  const bool saved_epilogue = cuda::q_rope_epilogue();
  const StreamLoopSettings saved_loop;
  cuda::set_q_rope_epilogue(true);
  cudaStream_t stream = nullptr;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const Shape& sh : shapes) {
    const Fp8Problem p = fp8_problem(rng, sh.m, sh.n, sh.k, sh.block);
    std::vector<int32_t> positions(size_t(p.m));
    for (int64_t r = 0; r < p.m; ++r) positions[size_t(r)] = rng.integer(1, 1 << 20);
    std::vector<float> inv_freq(32);
    for (int i = 0; i < 32; ++i) inv_freq[size_t(i)] = std::pow(10000.0f, -float(i) / 32.0f);
    const StreamDecodeProblem d(p, positions, inv_freq, 512, 64, stream);
    const cuda::Fp8Linear& lin = d.lin;
    const cuda::RopeEpilogue& rope = d.rope;
    const cuda::DeviceBuffer &dq = d.dq, &ds = d.ds;
    const int64_t items = (p.n + 15) / 16;
    // 0: fp8_gemm_grid f32, 1: bf16, 2: fp8_gemm_rope (V4.1's block only, as the model calls it).
    for (int form = 0; form < (p.block == 32 ? 3 : 2); ++form)
      for (const int stages : {2, 0}) {
        cuda::set_stream_ring_stages(stages);
        const size_t count = size_t(p.m * p.n), out_bytes = form == 0 ? 4 : 2;
        cuda::DeviceBuffer dy(count * out_bytes);
        auto gemm = [&](const cuda::StreamGrid& g, cudaStream_t st) {
          if (form == 2)
            EXPECT_TRUE(cuda::fp8_gemm_rope(dq.as<uint8_t>(), ds.as<float>(), p.m, lin, dy.as<cuda::bf16>(), rope, st,
                                            g));
          else
            cuda::fp8_gemm_grid(dq.as<uint8_t>(), ds.as<float>(), p.m, lin, dy.get(),
                                form == 0 ? cuda::OutType::F32 : cuda::OutType::BF16, st, g);
        };
        auto run = [&](const cuda::StreamGrid& g) {
          // On `stream`: see QuantPrologueBitwise.
          DI_CUDA_CHECK(cudaMemsetAsync(dy.get(), 0xFF, count * out_bytes, stream));
          gemm(g, stream);
          DI_CUDA_CHECK(cudaStreamSynchronize(stream));
          return cuda::to_host<uint8_t>(dy, count * out_bytes);
        };
        const std::vector<uint8_t> y0 = run({});
        const unsigned grid0 = captured_grid_x(stream, [&] { gemm({}, stream); });
        // The default grid is the persistent grid over one or two blocks per SM: find which.
        int per_sm = 0;
        for (int b = 1; b <= 2 && !per_sm; ++b)
          if (grid0 == unsigned(persistent_grid(items, int64_t(sms) * b))) per_sm = b;
        EXPECT_GE(per_sm, 1) << grid0;
        per_sm = std::max(per_sm, 1);
        for (const cuda::StreamGrid& g : grids) {
          const std::string what = std::string(form == 2 ? "fp8_gemm_rope" : "fp8_gemm_grid") + " m=" +
                                   std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
                                   " block=" + std::to_string(p.block) + (form == 0 ? " f32" : " bf16") +
                                   " stages=" + std::to_string(stages) + " blocks_per_sm=" +
                                   std::to_string(g.blocks_per_sm) + " spare_sms=" + std::to_string(g.spare_sms);
          report_exact("stream grid capped vs default " + what, bitwise_mismatches(run(g), y0), y0.size());
          const int64_t slots = std::max<int64_t>(
              1, int64_t(sms) * std::min(per_sm, g.blocks_per_sm > 0 ? g.blocks_per_sm : per_sm) -
                     std::min(g.spare_sms, sms));
          const unsigned grid = captured_grid_x(stream, [&] { gemm(g, stream); });
          std::printf("GPU_CHECK %s grid %u (default %u)\n", what.c_str(), grid, grid0);
          EXPECT_EQ(grid, unsigned(persistent_grid(items, slots))) << what;
        }
      }
  }
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
  cuda::set_q_rope_epilogue(saved_epilogue);
}

TEST(GpuFp8Gemm, WgmmaPrefillShapes) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_fp8_gemm(rng, 256, 512, 1024, 128, cuda::OutType::F32, cuda::GemmPath::Wgmma, "wgmma");
  run_fp8_gemm(rng, 300, 592, 2048, 128, cuda::OutType::BF16, cuda::GemmPath::Wgmma, "wgmma");  // ragged m, n
  run_fp8_gemm(rng, 200, 624, 1280, 32, cuda::OutType::F32, cuda::GemmPath::Wgmma, "wgmma");
  run_fp8_gemm(rng, 5, 384, 512, 128, cuda::OutType::F32, cuda::GemmPath::Wgmma, "wgmma");  // a decode size
}

// FP8 GEMMs at 9-256 rows (bench/gpu/NOTES.md "FP8 GEMMs at 9-256 rows (session 5, H9)"): the mid kernel
// (cuda/stream_gemm.cuh stream_mid_kernel, DEEPINFER_FP8_GEMM_MID=new) against
//  - decode v8 bitwise: every row of the mid product equals v8 computing it in a group of <= 8 rows (fp8_gemm on
//    row slices of <= 8 with the switch at old and DecodeKernel::Stream), i.e. the same per-element K order;
//  - itself: a rerun, a CUDA graph replay (graph = eager) and rows 0..8 alone (m = 9: batch invariance);
//  - the CPU reference within run_fp8_gemm's bounds;
//  - batch-invariant mode: the switch is ignored there; the product equals the wgmma kernel's bitwise when
//    batch_invariant_fp8 is Wgmma, and this mid form's when it is Mid / MidSplit (fp8_gemm.h).
namespace {

struct MidScope {
  explicit MidScope(cuda::Fp8GemmMid m) : saved(cuda::fp8_gemm_mid()) { cuda::set_fp8_gemm_mid(m); }
  ~MidScope() { cuda::set_fp8_gemm_mid(saved); }
  cuda::Fp8GemmMid saved;
};

// mode New: the mid kernel, every row v8's bits. Split: k over a cluster of S = pow2floor(k / 1024) blocks (1..8,
// from k alone): v8's bits where S = 1 (k < 2048), else a fixed order of its own (CPU bounds, rerun, graph, rows
// alone still bitwise).
void run_fp8_mid(Rng& rng, int64_t m, int64_t n, int64_t k, int block, cuda::OutType out_type,
                 cuda::Fp8GemmMid mode = cuda::Fp8GemmMid::New) {
  std::vector<float> x = activations(rng, m, k);
  Fp8Weight w = random_fp8_weight(rng, n, k, block);
  std::vector<float> xq = x, ref(size_t(m * n));
  fp8_fake_quant(xq.data(), int64_t(xq.size()), block);
  matmul_nt(xq.data(), m, k, w.dequant.data(), n, ref.data());

  const int64_t xb = k / block;
  const size_t ob = out_type == cuda::OutType::F32 ? 4 : 2;
  cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dq(size_t(m * k)), ds(size_t(m * xb) * 4),
                     dw = cuda::to_device(w.codes), dws = cuda::to_device(w.scales),
                     dpacked(cuda::fp8_packed_bytes(n, k));
  cuda::fp8_quantize(dx.as<cuda::bf16>(), dq.as<uint8_t>(), ds.as<float>(), m, int(k), block, nullptr);
  cuda::Fp8Linear lin{dw.as<uint8_t>(), dws.as<uint8_t>(), n, k, block};
  dpacked.fill_bytes(0x7F);
  cuda::fp8_pack(lin, dpacked.as<uint8_t>(), nullptr);
  lin.packed = dpacked.as<uint8_t>();
  lin.decode = cuda::DecodeKernel::Stream;

  auto buffer = [&](int64_t rows) {
    cuda::DeviceBuffer b(size_t(rows * n) * ob);
    b.fill_bytes(0xFF);
    return b;
  };
  auto gemm = [&](int64_t r0, int64_t rows, void* y, cudaStream_t st, cuda::GemmPath path = cuda::GemmPath::Auto) {
    cuda::fp8_gemm(dq.as<uint8_t>() + r0 * k, ds.as<float>() + r0 * xb, rows, lin,
                   static_cast<uint8_t*>(y) + size_t(r0 * n) * ob, out_type, st, path);
  };
  auto bits = [&](const cuda::DeviceBuffer& b, int64_t rows) {
    std::vector<uint8_t> v = cuda::to_host<uint8_t>(b, size_t(rows * n) * ob);
    return v;
  };
  auto count = [](const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, size_t unit) {
    size_t bad = 0;
    for (size_t i = 0; i + unit <= std::min(a.size(), b.size()); i += unit)
      bad += std::memcmp(a.data() + i, b.data() + i, unit) != 0;
    return bad;
  };
  const bool v8_bits = mode == cuda::Fp8GemmMid::New || k < 2048;
  const std::string tag = std::string(mode == cuda::Fp8GemmMid::Split ? "fp8_gemm mid-split" : "fp8_gemm mid") +
                          " m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" +
                          std::to_string(k) + " block=" + std::to_string(block) +
                          (out_type == cuda::OutType::F32 ? " f32" : " bf16");

  cuda::DeviceBuffer y_new = buffer(m), y_again = buffer(m), y_graph = buffer(m), y_v8 = buffer(m), y_9 = buffer(9);
  {
    MidScope mid(mode);
    gemm(0, m, y_new.get(), nullptr);
    gemm(0, m, y_again.get(), nullptr);
    gemm(0, std::min<int64_t>(m, 9), y_9.get(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());  // the legacy stream's work before the non-blocking `st` reads it
    cudaStream_t st = nullptr;
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraphExec_t exec = capture_exec(st, [&] { gemm(0, m, y_graph.get(), st); });
    DI_CUDA_CHECK(cudaGraphLaunch(exec, st));
    DI_CUDA_CHECK(cudaStreamSynchronize(st));
    DI_CUDA_CHECK(cudaGraphExecDestroy(exec));
    DI_CUDA_CHECK(cudaStreamDestroy(st));
  }
  {
    MidScope old(cuda::Fp8GemmMid::Old);
    for (int64_t r0 = 0; r0 < m; r0 += 8) gemm(r0, std::min<int64_t>(8, m - r0), y_v8.get(), nullptr);  // v8
  }
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> a = bits(y_new, m);
  if (v8_bits) report_exact(tag + " vs-v8-groups-of-8-bitwise", count(a, bits(y_v8, m), ob), size_t(m * n));
  report_exact(tag + " rerun-bitwise", count(a, bits(y_again, m), ob), size_t(m * n));
  report_exact(tag + " graph-vs-eager-bitwise", count(a, bits(y_graph, m), ob), size_t(m * n));
  const int64_t m9 = std::min<int64_t>(m, 9);
  report_exact(tag + " rows0-8-alone-bitwise", count(std::vector<uint8_t>(a.begin(), a.begin() + m9 * n * ob),
                                                     bits(y_9, m9), ob),
               size_t(m9 * n));

  // Batch-invariant mode: this switch does not apply; the product is the kernel fp8_gemm.h batch_invariant_fp8
  // names: the wgmma kernel's bits under Wgmma, this mid form's (the launch above) under Mid / MidSplit.
  {
    using Kernel = cuda::InvariantFp8Kernel;
    MidScope mid(mode);
    auto invariant_gemm = [&](Kernel kernel, void* y) {
      SwitchScope<Kernel, cuda::batch_invariant_fp8, cuda::set_batch_invariant_fp8> choice(kernel);
      SwitchScope<bool, cuda::batch_invariant, cuda::set_batch_invariant> invariant(true);
      gemm(0, m, y, nullptr);
    };
    cuda::DeviceBuffer y_bi_wgmma = buffer(m), y_bi_mid = buffer(m), y_wg = buffer(m);
    invariant_gemm(Kernel::Wgmma, y_bi_wgmma.get());
    invariant_gemm(mode == cuda::Fp8GemmMid::Split ? Kernel::MidSplit : Kernel::Mid, y_bi_mid.get());
    gemm(0, m, y_wg.get(), nullptr, cuda::GemmPath::Wgmma);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    report_exact(tag + " batch-invariant-wgmma-is-wgmma-bitwise", count(bits(y_bi_wgmma, m), bits(y_wg, m), ob),
                 size_t(m * n));
    report_exact(tag + " batch-invariant-mid-is-mid-bitwise", count(bits(y_bi_mid, m), a, ob), size_t(m * n));
  }

  std::vector<float> out = out_type == cuda::OutType::F32 ? cuda::to_host<float>(y_new, size_t(m * n))
                                                         : from_bf16(cuda::to_host<uint16_t>(y_new, size_t(m * n)));
  const double bound = out_type == cuda::OutType::F32 ? 1e-3 : kBf16OutputBound + 1e-3;
  check_rel_l2(tag, out, ref, bound);
}

}  // namespace

// Shapes: every rows_cap (16 / 32 / 64) with partial sub-groups (9, 17, 37, 63 rows), several groups (100, 256
// rows at k = 1024; 64 rows at k = 8192, where 16-row groups are all that fit), n not a multiple of 16 (1040, 1000,
// 130), 32-blocks (V4.1), minimum k (128), partial last chunks (k = 1280), the V4 / V4.1 attention shapes.
TEST(GpuFp8Gemm, MidRowsShapes) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_fp8_mid(rng, 9, 1024, 4096, 128, cuda::OutType::F32);
  run_fp8_mid(rng, 16, 1040, 1024, 128, cuda::OutType::F32);
  run_fp8_mid(rng, 17, 1000, 1280, 32, cuda::OutType::F32);
  run_fp8_mid(rng, 37, 4096, 1024, 128, cuda::OutType::BF16);
  run_fp8_mid(rng, 63, 130, 8192, 32, cuda::OutType::F32);
  run_fp8_mid(rng, 64, 512, 4096, 128, cuda::OutType::F32);
  run_fp8_mid(rng, 64, 4096, 8192, 128, cuda::OutType::BF16);
  run_fp8_mid(rng, 100, 272, 128, 128, cuda::OutType::F32);
  run_fp8_mid(rng, 256, 2048, 1024, 128, cuda::OutType::F32);
  run_fp8_mid(rng, 256, 1280, 5120, 32, cuda::OutType::BF16);
}

// The split form (DEEPINFER_FP8_GEMM_MID=split): S = 1 at k = 1024 / 1280 (v8's bits), 2 at 2048 / 2304, 4 at 4096 /
// 5120 (5120: slices of 40 steps, a partial second chunk), 8 at 8192; narrow n (512: 32 tiles x S blocks), several
// groups (100, 256 rows), every rows_cap, 32-blocks.
TEST(GpuFp8Gemm, MidSplitRowsShapes) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  const auto X = cuda::Fp8GemmMid::Split;
  run_fp8_mid(rng, 9, 1024, 4096, 128, cuda::OutType::F32, X);
  run_fp8_mid(rng, 16, 1040, 1024, 128, cuda::OutType::F32, X);
  run_fp8_mid(rng, 17, 1000, 1280, 32, cuda::OutType::F32, X);
  run_fp8_mid(rng, 37, 4096, 2048, 128, cuda::OutType::BF16, X);
  run_fp8_mid(rng, 63, 130, 8192, 32, cuda::OutType::F32, X);
  run_fp8_mid(rng, 64, 512, 4096, 128, cuda::OutType::F32, X);
  run_fp8_mid(rng, 64, 4096, 8192, 128, cuda::OutType::BF16, X);
  run_fp8_mid(rng, 64, 1280, 5120, 32, cuda::OutType::F32, X);
  run_fp8_mid(rng, 100, 2304, 2304, 32, cuda::OutType::F32, X);
  run_fp8_mid(rng, 256, 1024, 4096, 128, cuda::OutType::BF16, X);
}

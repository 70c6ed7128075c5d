// The FP8 decode stream on wgmma (cuda/stream_fp8_wgmma.cuh, DEEPINFER_STREAM_FP8=wgmma; bench/gpu/NOTES.md "FP8
// decode stream on wgmma (session 9, H73)"): the dense W8A8 product through the public entry (fp8_gemm, packed
// weights, DecodeKernel::Stream) against the CPU reference (checkpoint codes times their e8m0 block scales,
// activations through fp8_fake_quant, double-accumulated matmul_nt) and against today's stream kernel (decode v8,
// the switch off), on V4-Flash (128 x 128 weight blocks, activation block 128) and V4.1 (32 / 32) shapes at 1..8
// rows; rerun and batch invariance bitwise; the split-K edges (phantom batches, partial items); the declined cases
// bitwise today's kernel.
#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/linalg.h"
#include "cuda/kernels.h"
#include "cuda/numerics_mode.h"
#include "cuda/stream_fp8_wgmma.h"
#include "gpu_test_util.h"
#include "layers/quant/fake_quant.h"
#include "mxfp4_experts_ref.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

// Sets the process-wide switch (and batch-invariant mode, in which the wgmma form declines) for a scope.
struct WgmmaSwitch {
  SwitchScope<bool, cuda::stream_fp8_wgmma, cuda::set_stream_fp8_wgmma> wgmma;
  SwitchScope<bool, cuda::batch_invariant, cuda::set_batch_invariant> invariant;
  explicit WgmmaSwitch(bool on, bool invariant_mode = false) : wgmma(on), invariant(invariant_mode) {}
};

// The bound of ||wgmma form - exact|| / ||exact||. The e4m3 x e4m3 products are exact and every scale is a power of
// two; what rounds: (1) the FP8 tensor path's sum inside one accumulation chain keeps ~14 bits of the running sum
// (DeepGEMM's measurement on Hopper, the reason it promotes to fp32 every 128 K): an error <= ~2^-14 x (sum of
// |products|) of the chain, of either sign from chain to chain; a chain is 128 products with 128-wide blocks (4
// wgmmas chained) and 32 with 32-wide ones; with the output a sum of k random-sign terms (~sqrt(k) |p|) and k / C
// chains of C |p| each, that is ~2^-14 sqrt(C) relative; (2) the fp32 sums over the chains, the ranks and the two
// warpgroups: <= k 2^-24. A factor 4 on (1) for the tail. bf16 output adds its rounding (kBf16OutputBound).
double wgmma_bound(int64_t k, int block, bool bf16) {
  return 4.0 * std::sqrt(double(block)) * std::ldexp(1.0, -14) + double(k) * std::ldexp(1.0, -24) +
         (bf16 ? kBf16OutputBound : 0.0);
}

struct Case {
  int64_t m = 1, n = 0, k = 0;
  int block = 128;
  cuda::OutType out = cuda::OutType::F32;
  std::vector<float> ref;  // the CPU product
  cuda::DeviceBuffer dq, ds, dw, dws, dpacked;
  cuda::Fp8Linear lin;
};

// Random weights (codes N(0, 64) as e4m3, e8m0 block scales 2^-12 .. 2^-4, as test_quant_gemm.cpp draws them),
// packed for decode on the GPU (the pack poisoned with NaN codes first), activations quantized on the GPU
// (fp8_quantize) and on the CPU (fp8_fake_quant: the same values), the CPU product.
void make_case(Case& c, Rng& rng, int64_t m, int64_t n, int64_t k, int block, cuda::OutType out) {
  c.m = m, c.n = n, c.k = k, c.block = block, c.out = out;
  const int64_t nb = (n + block - 1) / block, kb = (k + block - 1) / block;
  std::vector<uint8_t> codes(size_t(n * k)), scales(size_t(nb * kb));
  for (auto& v : codes) v = float_to_e4m3(rng.normal(0.0f, 64.0f));
  for (auto& s : scales) s = uint8_t(rng.integer(127 - 12, 127 - 4));
  std::vector<float> dequant(codes.size());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < k; ++i)
      dequant[size_t(r * k + i)] =
          e4m3_to_float(codes[size_t(r * k + i)]) * e8m0_to_float(scales[size_t((r / block) * kb + i / block)]);
  const std::vector<float> x = random_activation_rows(rng, m, k);
  std::vector<float> xq = x;
  fp8_fake_quant(xq.data(), int64_t(xq.size()), block);
  c.ref.assign(size_t(m * n), 0.0f);
  matmul_nt(xq.data(), m, k, dequant.data(), n, c.ref.data());
  cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x));
  c.dq = cuda::DeviceBuffer(size_t(m * k));
  c.ds = cuda::DeviceBuffer(size_t(m * (k / block)) * 4);
  cuda::fp8_quantize(dx.as<cuda::bf16>(), c.dq.as<uint8_t>(), c.ds.as<float>(), m, int(k), block, nullptr);
  c.dw = cuda::to_device(codes);
  c.dws = cuda::to_device(scales);
  c.lin = cuda::Fp8Linear{c.dw.as<uint8_t>(), c.dws.as<uint8_t>(), n, k, block};
  c.dpacked = cuda::DeviceBuffer(cuda::fp8_packed_bytes(n, k));
  c.dpacked.fill_bytes(0x7F);
  cuda::fp8_pack(c.lin, c.dpacked.as<uint8_t>(), nullptr);
  c.lin.packed = c.dpacked.as<uint8_t>();
  c.lin.decode = cuda::DecodeKernel::Stream;
  DI_CUDA_CHECK(cudaDeviceSynchronize());
}

// The product of rows [r0, r0 + rows) through fp8_gemm (decode path) with the switch as given, the output poisoned
// first; f32 outputs, or bf16 outputs widened.
std::vector<float> run(const Case& c, bool wgmma, bool invariant = false, int64_t r0 = 0, int64_t rows = -1) {
  if (rows < 0) rows = c.m;
  WgmmaSwitch sw(wgmma, invariant);
  const bool f32 = c.out == cuda::OutType::F32;
  cuda::DeviceBuffer dy(size_t(rows * c.n) * (f32 ? 4 : 2));
  dy.fill_bytes(0xFF);
  cuda::fp8_gemm(c.dq.as<uint8_t>() + r0 * c.k, c.ds.as<float>() + r0 * (c.k / c.block), rows, c.lin, dy.get(),
                 c.out, nullptr, cuda::GemmPath::Skinny);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  return f32 ? cuda::to_host<float>(dy, size_t(rows * c.n))
             : from_bf16(cuda::to_host<uint16_t>(dy, size_t(rows * c.n)));
}

size_t bit_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  size_t d = a.size() == b.size() ? 0 : std::max(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d += float_to_bits(a[i]) != float_to_bits(b[i]);
  return d;
}

std::string case_name(const Case& c) {
  return "stream_fp8_wgmma m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " block=" + std::to_string(c.block) + (c.out == cuda::OutType::F32 ? " f32" : " bf16");
}

// The wgmma form against the CPU and against today's kernel (both within wgmma_bound: today's is exact up to fp32
// ordering and the f16 mma's fp32 accumulation), rerun bitwise, and every row alone = the same row in the batch.
void check_case(Rng& rng, int64_t m, int64_t n, int64_t k, int block, cuda::OutType out = cuda::OutType::F32) {
  Case c;
  make_case(c, rng, m, n, k, block, out);
  const std::string name = case_name(c);
  const bool bf16 = out == cuda::OutType::BF16;
  const double bound = wgmma_bound(k, block, bf16);
  std::printf("  %s: bound %.3e = 4 sqrt(%d) 2^-14 (FP8 tensor-path chain) + k 2^-24 (fp32)%s\n", name.c_str(), bound,
              block, bf16 ? " + bf16 output" : "");
  const std::vector<float> old = run(c, false), wg = run(c, true), wg2 = run(c, true);
  check_rel_l2(name + " vs CPU", wg, c.ref, bound);
  check_rel_l2(name + " vs stream v8", wg, old, bound);
  // Not asserted, a sign that the wgmma form ran at all (a declined launch gives v8's bits).
  std::printf("  %s: %zu of %zu elements differ from v8 in bits\n", name.c_str(), bit_mismatches(wg, old), wg.size());
  check_rel_l2(name + " (v8) vs CPU", old, c.ref, bf16 ? kBf16OutputBound + 1e-3 : 1e-3);  // test_quant_gemm's bound
  report_exact(name + " rerun-bitwise", bit_mismatches(wg, wg2), wg.size());
  if (m > 1) {
    size_t differ = 0;
    for (int64_t r = 0; r < m; ++r) {
      const std::vector<float> alone = run(c, true, false, r, 1);
      differ += bit_mismatches(alone, std::vector<float>(wg.begin() + r * n, wg.begin() + (r + 1) * n));
    }
    report_exact(name + " each row alone vs in the batch", differ, wg.size());
  }
}

}  // namespace

// V4-Flash's dense FP8 products (128 x 128 weight blocks, activation block 128) at batch 1 and 8: wq_a (n = 1024:
// 16 items, split over 8 ranks, or 4 where 16 clusters of 8 are not resident), wq_b (32768 x 1024: 512 items, no
// split), wo_b (4096 x 8192: 2 ranks of 4096),
// the shared expert's w1|w3 (4096 x 4096) and w2 (4096 x 2048); bf16 and f32 outputs.
TEST(GpuStreamFp8Wgmma, V4Shapes) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  check_case(rng, 1, 1024, 4096, 128, cuda::OutType::BF16);
  check_case(rng, 1, 32768, 1024, 128);
  check_case(rng, 1, 4096, 8192, 128, cuda::OutType::BF16);
  check_case(rng, 1, 4096, 4096, 128);
  check_case(rng, 1, 4096, 2048, 128);
  check_case(rng, 8, 1024, 4096, 128);
  check_case(rng, 8, 4096, 8192, 128);
  check_case(rng, 5, 4096, 2048, 128, cuda::OutType::BF16);
}

// V4.1 shapes (32 x 32 weight blocks, activation block 32: one wgmma and one scale pair per K step): k = 5120 (10
// stages), k = 2304 (4.5 stages: a half last stage, warpgroup 1's batches phantoms), k = 8192 at n = 130 (3 items,
// the last with one live tile of 2 rows).
TEST(GpuStreamFp8Wgmma, V41Shapes) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  check_case(rng, 1, 1280, 5120, 32);
  check_case(rng, 3, 2048, 2304, 32, cuda::OutType::BF16);
  check_case(rng, 8, 130, 8192, 32);
  check_case(rng, 2, 4096, 4096, 32);
}

// Edges: n = 1000 / 1040 / 272 (a partial last item, a partial last tile), k = 1152 (36 steps: 2 ranks, the second's
// last stage of 4 steps: both of warpgroup 1's batches and warpgroup 0's second are phantoms, filled from the
// tile's first steps), k = 128 (one stage of 4 steps, fill larger than the tile's k: pieces), k = 1280; 1..8 rows.
TEST(GpuStreamFp8Wgmma, EdgeShapes) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  check_case(rng, 1, 1000, 1152, 128);
  check_case(rng, 7, 1040, 1024, 128);
  check_case(rng, 4, 272, 128, 128);
  check_case(rng, 2, 1000, 1280, 32);
  check_case(rng, 6, 64, 1152, 32, cuda::OutType::BF16);
}

// Declined cases run today's kernel, the same bits with the switch on or off: batch-invariant mode (the stream at
// 1..8 rows and the wgmma kernel above: a row's bits must not depend on the row count), and 9 rows (not the
// stream: v7 / the mid kernel).
TEST(GpuStreamFp8Wgmma, Declines) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  {
    Case c;
    make_case(c, rng, 3, 1024, 4096, 128, cuda::OutType::F32);
    report_exact(case_name(c) + " batch-invariant mode: declined, switch on vs off",
                 bit_mismatches(run(c, true, true), run(c, false, true)), size_t(c.m * c.n));
  }
  {
    Case c;
    make_case(c, rng, 9, 1024, 2048, 128, cuda::OutType::F32);
    report_exact(case_name(c) + " 9 rows: declined, switch on vs off", bit_mismatches(run(c, true), run(c, false)),
                 size_t(c.m * c.n));
  }
}

// Grouped MXFP4 prefill GEMM, all kernels (v1: bf16 operands; v3: weights as wgmma's register A side, tokens as N,
// reading the decode-packed experts; v5: v3's numerics with the token scales by TMA and a lean consumer path for clean
// items, bitwise equal to v3; v8: v5 with three consumer warpgroups (items of 192 weight rows) and each stage's pieces
// (a warpgroup's weight slice, the tokens) as one TMA box each on barriers of their own, bitwise equal to v3; v9: v8's
// stage pieces with items of 128 weight rows x up to 192 tokens for wide groups, bitwise equal to v3; v13: v9 with a
// lean epilogue, bitwise equal to v9; bench/gpu/NOTES.md) against the CPU reference of test_experts.cpp
// (mxfp4_experts_ref.h): expert weights decoded as model/weight_formats.cpp reads them (e2m1 code times its e8m0 scale
// per 32 along K), activations through fp8_fake_quant, core/linalg.cpp's matmul.
#include <algorithm>
#include <numeric>

#include "core/linalg.h"
#include "cuda/kernels.h"
#include "gpu_test_util.h"
#include "layers/quant/fake_quant.h"
#include "mxfp4_experts_ref.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

struct Case {
  int experts;
  int64_t n, k;
  int act_block;
  std::vector<int> group_rows;
  // Fraction of (row, 128-wide K tile) pairs whose 4 per-32 scales span `span` binades: the scale of one 32-block
  // is raised by `span` and its codes zeroed, so the output rests entirely on the blocks 2^span below the tile's
  // maximum. span <= 11 is folded exactly (the smallest code, 0.5 x 2^-5, is an e4m3 normal); span >= 12 puts the
  // tile's item on the packed kernels' per-32 path (each 32-block its own pass and factor). A wrong fold flushes or
  // rounds exactly the values that carry the result, so the relative L2 check sees it.
  double wide_fraction = 0.0;
  std::vector<int> spans;
  // v3 folds against the row's largest scale over the whole K: with lift > 0 every row gets one 128-wide K tile
  // whose 4 scales are raised by `lift` binades (codes zeroed), so that the row's other tiles sit up to lift + 8
  // binades below its maximum (SwappedRowLift).
  int lift = 0;
};
Case make_case(int experts, int64_t n, int64_t k, int act_block, std::vector<int> rows, double wide_fraction = 0.0,
               std::vector<int> spans = {}) {
  return Case{experts, n, k, act_block, std::move(rows), wide_fraction, std::move(spans), 0};
}

void run_case(Rng& rng, const Case& c) {
  const int experts = c.experts;
  const int64_t n = c.n, k = c.k;
  Mxfp4Experts wts = random_mxfp4_experts(rng, experts, n, k);
  std::vector<uint8_t>& codes = wts.codes;
  std::vector<uint8_t>& scales = wts.scales;
  int wide = 0;
  if (c.wide_fraction > 0) {
    for (int64_t row = 0; row < int64_t(experts) * n; ++row)
      for (int64_t t = 0; t < k / 128; ++t) {
        if (rng.uniform(0.0f, 1.0f) >= c.wide_fraction) continue;
        const int j = rng.integer(0, 3);
        const int span = c.spans[size_t(rng.integer(0, int(c.spans.size()) - 1))];
        uint8_t* sc = &scales[size_t(row * (k / 32) + t * 4)];
        const int lo = *std::min_element(sc, sc + 4);
        sc[j] = uint8_t(std::min(254, lo + span));  // the block the others fold against, 2^span above the lowest
        std::fill_n(&codes[size_t(row * (k / 2) + t * 64 + j * 16)], 16, uint8_t(0));
        ++wide;
      }
  }
  if (c.lift > 0) {
    for (int64_t row = 0; row < int64_t(experts) * n; ++row) {
      const int64_t t = rng.integer(0, int(k / 128) - 1);
      for (int j = 0; j < 4; ++j) scales[size_t(row * (k / 32) + t * 4 + j)] += uint8_t(c.lift);
      std::fill_n(&codes[size_t(row * (k / 2) + t * 64)], 64, uint8_t(0));
    }
  }
  const ExpertGroups grp = random_expert_groups(rng, experts, c.group_rows);
  const auto& [ids, offsets, groups, rows, max_rows] = grp;

  const std::vector<float> x = random_activation_rows(rng, rows, k);
  std::vector<float> xq = x;
  fp8_fake_quant(xq.data(), int64_t(xq.size()), c.act_block);
  const std::vector<float> ref = grouped_reference(wts, grp, c.group_rows, xq.data());

  std::vector<int32_t> ids32(ids.begin(), ids.end());
  cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dq(size_t(rows * k)),
                     ds(size_t(rows * (k / c.act_block)) * 4), dw = cuda::to_device(codes),
                     dws = cuda::to_device(scales), dids = cuda::to_device(ids32), doff = cuda::to_device(offsets);
  cuda::fp8_quantize(dx.as<cuda::bf16>(), dq.as<uint8_t>(), ds.as<float>(), rows, int(k), c.act_block, nullptr);

  std::string shape = " n=" + std::to_string(n) + " k=" + std::to_string(k) + " act_block=" +
                      std::to_string(c.act_block) + " groups=" + std::to_string(groups) + " max_rows=" +
                      std::to_string(max_rows);
  if (c.wide_fraction > 0) shape += " wide_tiles=" + std::to_string(wide);
  if (c.lift > 0) shape += " lift=" + std::to_string(c.lift);

  // v3 reads the decode-packed copy (mxfp4_pack of the layout the reference dequantizes, into poisoned buffers)
  // and gets no checkpoint pointers: were it not to launch, the fallback's check would fail the test.
  cuda::DeviceBuffer dpw(cuda::mxfp4_packed_weight_bytes(experts, n, k)),
      dps(cuda::mxfp4_packed_scale_bytes(experts, n, k));
  dpw.fill_bytes(0xFF);
  dps.fill_bytes(0xFF);
  cuda::mxfp4_pack(cuda::Fp4Experts{dw.as<uint8_t>(), dws.as<uint8_t>(), experts, n, k}, dpw.as<uint8_t>(),
                   dps.as<uint8_t>(), nullptr);

  // v5 (token scales by TMA, lean consumer path for clean items), v8, v9 and v13 must give v3's bits: the same
  // codes, wgmmas and promotions in v3's order.
  std::vector<uint32_t> v3_bits, v9_bits;
  for (cuda::PrefillKernel kind :
       {cuda::PrefillKernel::Bf16, cuda::PrefillKernel::Fp8Swapped, cuda::PrefillKernel::Fp8SwappedV5,
        cuda::PrefillKernel::Fp8SwappedV8, cuda::PrefillKernel::Fp8SwappedV9, cuda::PrefillKernel::Fp8SwappedV13}) {
    // v5, v8, v9 and v13 must give v3's bits (where k / act_block is not a multiple of 4 they run v3 itself).
    const bool vs_v3 = kind == cuda::PrefillKernel::Fp8SwappedV5 || kind == cuda::PrefillKernel::Fp8SwappedV8 ||
                       kind == cuda::PrefillKernel::Fp8SwappedV9 || kind == cuda::PrefillKernel::Fp8SwappedV13;
    const bool packed = vs_v3 || kind == cuda::PrefillKernel::Fp8Swapped;
    cuda::Fp4Experts w{dw.as<uint8_t>(), dws.as<uint8_t>(), experts, n, k};
    if (packed) {
      w.weight = w.scale = nullptr;
      w.packed_weight = dpw.as<uint8_t>();
      w.packed_scale = dps.as<uint8_t>();
    }
    w.prefill = kind;
    const bool v5_runs = (k / c.act_block) % 4 == 0;
    // v8 runs where v5 does and the groups average <= 112 rows (mxfp4_prefill.cu v8_applies); on wider groups it
    // takes `Auto`'s path there (v13, v9 at act block 32), else v5 / v3.
    const bool v8_runs = v5_runs && rows <= int64_t(112) * groups;
    // v9 runs where v5 does, on any grouping (asked for explicitly; chunks of <= 192 rows), else v3; v13 is v9 with
    // the lean epilogue on clean items at act block 128 (act block 32: v9's kernel).
    const std::string name = std::string(kind == cuda::PrefillKernel::Fp8SwappedV13
                                             ? (!v5_runs               ? "mxfp4_prefill v13(=v3: k/act_block % 4 != 0)"
                                                : c.act_block == 32 ? "mxfp4_prefill v13(=v9: act block 32)"
                                                                    : "mxfp4_prefill v13")
                                         : kind == cuda::PrefillKernel::Fp8SwappedV9
                                             ? (v5_runs ? "mxfp4_prefill v9"
                                                        : "mxfp4_prefill v9(=v3: k/act_block % 4 != 0)")
                                         : kind == cuda::PrefillKernel::Fp8SwappedV8
                                             ? (v8_runs               ? "mxfp4_prefill v8"
                                                : !v5_runs            ? "mxfp4_prefill v8(=v3: k/act_block % 4 != 0)"
                                                : c.act_block == 32 ? "mxfp4_prefill v8(=v9: > 112 rows per group)"
                                                                    : "mxfp4_prefill v8(=v13: > 112 rows per group)")
                                         : kind == cuda::PrefillKernel::Fp8SwappedV5
                                             ? (v5_runs ? "mxfp4_prefill v5" : "mxfp4_prefill v5(=v3: k/act_block % 4 != 0)")
                                         : kind == cuda::PrefillKernel::Fp8Swapped ? "mxfp4_prefill v3-swapped"
                                                                                   : "mxfp4_prefill v1-bf16") +
                             shape;
    auto run = [&](cuda::DeviceBuffer& dy, cuda::OutType y_type = cuda::OutType::F32) {
      // Fresh poisoned buffers each run: a stale tile list or an output never written shows up.
      cuda::DeviceBuffer work(cuda::mxfp4_prefill_workspace_bytes(rows, k));
      work.fill_bytes(0xFF);
      dy.fill_bytes(0xFF);
      cuda::mxfp4_grouped_gemm_prefill(dq.as<uint8_t>(), ds.as<float>(), rows, c.act_block, w, dids.as<int32_t>(),
                                       doff.as<int32_t>(), groups, max_rows, dy.get(), y_type, work.get(), nullptr);
      DI_CUDA_CHECK(cudaDeviceSynchronize());
    };
    cuda::DeviceBuffer dy(size_t(std::max<int64_t>(rows * n, 1)) * 4), dy2(size_t(std::max<int64_t>(rows * n, 1)) * 4);
    run(dy);
    if (rows == 0) continue;
    std::vector<float> out = cuda::to_host<float>(dy, size_t(rows * n));
    // Fixed tiles and K order, no atomics: a second run gives the same bits.
    run(dy2);
    auto a = cuda::to_host<uint32_t>(dy, size_t(rows * n)), b = cuda::to_host<uint32_t>(dy2, size_t(rows * n));
    size_t rerun = 0;
    for (size_t i = 0; i < a.size(); ++i) rerun += a[i] != b[i];
    report_exact(name + " rerun-bitwise", rerun, a.size());
    // The bf16 output (y_type BF16, the MoE's prefill path): each fp32 product rounded to nearest even, nothing else.
    run(dy2, cuda::OutType::BF16);
    const auto z = cuda::to_host<uint16_t>(dy2, size_t(rows * n));
    size_t rounded = 0;
    for (size_t i = 0; i < a.size(); ++i) rounded += z[i] != float_to_bf16(out[i]);
    report_exact(name + " bf16-out-vs-rounded-f32", rounded, a.size());
    if (kind == cuda::PrefillKernel::Fp8Swapped) v3_bits = a;
    if (kind == cuda::PrefillKernel::Fp8SwappedV9) v9_bits = a;
    if (kind == cuda::PrefillKernel::Fp8SwappedV13) {  // v13 is v9 with another epilogue: the same bits, directly
      size_t diff = 0;
      for (size_t i = 0; i < a.size(); ++i) diff += a[i] != v9_bits[i];
      report_exact(name + " bitwise-vs-v9", diff, a.size());
    }
    if (vs_v3) {
      size_t diff = 0;
      for (size_t i = 0; i < a.size(); ++i) diff += a[i] != v3_bits[i];
      report_exact(name + " bitwise-vs-v3", diff, a.size());
    }
    // Bound. All kernels multiply exact operands: v1 bf16 values e2m1 x 2^e and e4m3 x 2^e; v3 (and the kernels
    // bitwise equal to it) e4m3 codes that are exactly e2m1 x 2^(6 - d) (the fold is exact by construction: d <= 11
    // against the row's maximum or the tile's, d = 0 on the per-32 fallback) and the activations' own e4m3 codes; the
    // scales applied at promotion and in v3's epilogue are powers of two. What remains: fp32
    // summation over K <= 2304 terms (~K x 2^-24 of the sum of magnitudes at worst) and, on v3, the tensor cores'
    // reduced-precision FP8 accumulation inside one 128- (or 32-) wide block, ~13 mantissa bits (DeepGEMM's
    // reason to promote per block), i.e. a few 1e-4 relative, the same bound as the dense FP8 wgmma GEMM's test.
    check_rel_l2(name, out, ref, 1e-3);
  }
}

}  // namespace

// V4 shapes scaled down (activation blocks 128 and 32): group sizes around the tile boundaries (0, 1, 63, 64, 65
// and 300 = three 100-row chunks), n = 512 (four 128-row items per chunk), k = 1024 (8 K steps: the stage rings
// wrap).
TEST(GpuMoePrefillGemm, V4Groups) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_case(rng, make_case(8, 512, 1024, 128, {0, 1, 63, 64, 65, 300}));
  run_case(rng, make_case(8, 512, 1024, 32, {0, 1, 63, 64, 65, 300}));
}

// A minimal shape: n = 256 (two 128-row items per chunk), k = 128 (one K step: every step of a block belongs to a
// different item).
TEST(GpuMoePrefillGemm, MinimumShape) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_case(rng, make_case(6, 256, 128, 128, {64, 1, 0, 130, 65}));
  run_case(rng, make_case(6, 256, 128, 32, {64, 1, 0, 130, 65}));
}

// Many items per persistent block (~40 groups x 4-8 items on 132 blocks), k = 256 (2 steps per item: stages and
// mbarrier phases cross item boundaries mid-ring), both activation blocks.
TEST(GpuMoePrefillGemm, ManyItemsPerBlock) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  std::vector<int> rows(40);
  for (int& r : rows) r = rng.integer(0, 200);
  run_case(rng, make_case(48, 1024, 256, 128, rows));
  run_case(rng, make_case(48, 1024, 256, 32, rows));
}

// Scale spans inside a 128-wide K tile: 11 binades (the widest fold, smallest codes), 12 and 20 (per-32 fallback
// for that tile; also beyond the 2^8 of a fold relative to the maximum without headroom), on a quarter of the
// (row, tile) pairs so that fast and fallback tiles alternate in one launch; activation blocks 128 and 32.
TEST(GpuMoePrefillGemm, WideScaleSpans) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  Case c = make_case(6, 512, 512, 128, {70, 0, 33, 200}, 0.25, {11, 12, 20});
  run_case(rng, c);
  c.act_block = 32;
  run_case(rng, c);
  // Every tile at the fold limit: all tiles fast, the smallest codes everywhere.
  Case only11 = make_case(4, 256, 256, 128, {100, 20}, 1.0, {11});
  run_case(rng, only11);
}

// V4.1-like widths (n = 768 = 3 x 256, k = 1152 = 9 K steps, activation block 32).
TEST(GpuMoePrefillGemm, V41Groups) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_case(rng, make_case(8, 768, 1152, 32, {129, 300, 5, 0, 64}));
}

// v3's own boundaries: groups cut into chunks of <= 128 rows on 16-row boundaries (layers/moe/prefill_chunks.h; the
// last chunk's N rounded up to 16: 1, 15, 16, 17, 128, 129 = 80 + 49, 255, 256, 257 = 96 + 96 + 65, 400 rows),
// n = 128 (one 128-row item per chunk), k = 384 (3 K tiles: the odd tail of the two register sets), both activation
// blocks.
TEST(GpuMoePrefillGemm, SwappedChunks) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  const std::vector<int> rows{1, 15, 16, 17, 128, 129, 255, 256, 257, 400};
  run_case(rng, make_case(12, 128, 384, 128, rows));
  run_case(rng, make_case(12, 128, 384, 32, rows));
  // v5 needs k / act_block % 4 == 0 to run itself (its token-scale TMA rows are 16 bytes): k = 512 at act block 128
  // puts its clean path and the chunk boundaries (N = 16..128, 1..16 valid rows of a box) under the bitwise check.
  run_case(rng, make_case(12, 512, 512, 128, rows));
  // v8 runs only where groups average <= 112 rows (1474 rows over 10 groups do not): four more 1-row groups
  // (1478 / 14) put the same chunk boundaries (N = 16..128, the N = 128 loop included) under its bitwise check;
  // n = 512 = 8 units of 64 rows (items of 3, 3, 2 units: the third warpgroup idle on every chunk's last item), and
  // act block 32 at n = 768 (4 full items).
  std::vector<int> rows_v8 = rows;
  rows_v8.insert(rows_v8.end(), {1, 1, 1, 1});
  run_case(rng, make_case(16, 512, 512, 128, rows_v8));
  run_case(rng, make_case(16, 768, 512, 32, rows_v8));
}

// v3's reference R is a row's largest scale over K: one tile per row lifted 14 binades (codes zeroed) puts the
// row's other tiles 6..22 binades below R, so most of them fold against their own maximum with a factor 2^-6..-14
// (V4.1: their blocks below R - 11 take d = 0 and a per-block factor); lifted 11, tiles within 11 binades of R
// (the smallest codes) and tiles folded against their own maximum alternate. Both activation blocks.
TEST(GpuMoePrefillGemm, SwappedRowLift) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  for (int lift : {14, 11})
    for (int act_block : {128, 32}) {
      Case c = make_case(6, 256, 1024, act_block, {90, 3, 140});
      c.lift = lift;
      run_case(rng, c);
    }
}

// v9's wide groups (> 112 rows on average, where v8 hands over to v9 / v13): chunks of <= 192 rows on 16-row
// boundaries around its boundaries (1, 16, 17, 100 = NT 7, 150 = NT 10, 170 = NT 11, 176, 191, 192 = NT 12, 193 =
// 112 + 81 (NT 7 + 6), 384 = 2 x 192, 385 = 144 + 128 + 113 (NT 9 + 8 + 8), 400, 576 = 3 x 192), n = 256 (two
// 128-row items per chunk), k = 1024 (8 K tiles: v9's 6-stage ring wraps within an item), both activation blocks;
// then items that are not clean (32-blocks 12 / 20 binades below the tile's maximum; a tile lifted 14 binades above
// the row's others) through v9's non-clean consumer (v3's consume_item at N up to 192).
TEST(GpuMoePrefillGemm, WideGroups) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  const std::vector<int> rows{1, 16, 17, 100, 150, 170, 176, 191, 192, 193, 384, 385, 400, 576};
  run_case(rng, make_case(14, 256, 1024, 128, rows));
  run_case(rng, make_case(14, 256, 1024, 32, rows));
  Case spans = make_case(6, 256, 512, 128, {200, 0, 384, 150}, 0.25, {11, 12, 20});
  run_case(rng, spans);
  spans.act_block = 32;
  run_case(rng, spans);
  for (int act_block : {128, 32}) {
    Case c = make_case(4, 256, 1024, act_block, {200, 390});
    c.lift = 14;
    run_case(rng, c);
  }
}

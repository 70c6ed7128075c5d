// The W8A16 grouped linear of V4's wo_a (layers/quant/w8a16_gemv.h) against a CPU matmul of the dequantized weight
// (e4m3 code times its e8m0 block scale, core/linalg.cpp's double-accumulated dot), on both of its paths (the
// decode kernel, gemm_bf16 on the bf16 copy for larger row counts), the device dequantization of that copy, and
// batch invariance: a row's bits do not depend on the other rows of the call. (The fused mHC site and norm ->
// quantization are in test_mhc.cpp and test_norm_rope.cpp, checked bitwise against the kernel chains they replace.)
#include <algorithm>
#include <cstring>

#include "core/linalg.h"
#include "cuda/blas.h"
#include "cuda/kernels.h"
#include "cuda/numerics_mode.h"
#include "gpu_test_util.h"
#include "layers/quant/w8a16_gemv.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

struct GroupedCase {
  int groups;
  int64_t n_group, k;
  int block = 128;
};

struct GroupedData {
  std::vector<uint8_t> codes, scales;
  std::vector<float> dequant;  // [groups * n_group, k]
  cuda::DeviceBuffer dcodes, dscales;
  cuda::Fp8Linear lin;
};

GroupedData make_weight(Rng& rng, const GroupedCase& c) {
  GroupedData d;
  const int64_t n = c.groups * c.n_group, nb = (n + c.block - 1) / c.block, kb = (c.k + c.block - 1) / c.block;
  d.codes.resize(size_t(n * c.k));
  d.scales.resize(size_t(nb * kb));
  for (auto& v : d.codes) v = float_to_e4m3(rng.normal(0.0f, 64.0f));
  for (auto& v : d.scales) v = uint8_t(rng.integer(127 - 14, 127 - 8));  // 2^-14 .. 2^-8
  d.dequant.resize(d.codes.size());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t col = 0; col < c.k; ++col)
      d.dequant[size_t(r * c.k + col)] =
          e4m3_to_float(d.codes[size_t(r * c.k + col)]) * e8m0_to_float(d.scales[size_t((r / c.block) * kb + col / c.block)]);
  d.dcodes = cuda::to_device(d.codes);
  d.dscales = cuda::to_device(d.scales);
  d.lin.weight = d.dcodes.as<uint8_t>();
  d.lin.scale = d.dscales.as<uint8_t>();
  d.lin.n = n;
  d.lin.k = c.k;
  d.lin.block = c.block;
  return d;
}

// x [rows, groups * k]: bf16 values, rows of different magnitude.
std::vector<float> make_input(Rng& rng, int64_t rows, const GroupedCase& c) {
  std::vector<float> x(size_t(rows * c.groups * c.k));
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::exp(rng.uniform(-3.0f, 3.0f));
    for (int64_t i = 0; i < c.groups * c.k; ++i) x[size_t(r * c.groups * c.k + i)] = rng.normal(0.0f, s);
  }
  round_to_bf16(x);
  return x;
}

std::vector<float> reference(const std::vector<float>& x, int64_t rows, const GroupedCase& c,
                             const std::vector<float>& w) {
  const int64_t n = c.groups * c.n_group;
  std::vector<float> y(size_t(rows * n));
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t r = 0; r < n; ++r) {
      const int64_t g = r / c.n_group;
      y[size_t(t * n + r)] = float(dot(x.data() + t * c.groups * c.k + g * c.k, w.data() + r * c.k, c.k));
    }
  return y;
}

// Runs the product for `rows` rows (the decode kernel alone, or the dispatcher with the bf16 copy w_bf16), returns
// the bf16 bits.
std::vector<uint16_t> run(const std::vector<float>& x, int64_t rows, const GroupedCase& c, const GroupedData& w,
                          const cuda::bf16* w_bf16, cuda::BlasHandle* blas) {
  const int64_t n = c.groups * c.n_group;
  cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dy(size_t(rows * n) * 2);
  dy.fill_bytes(0xFF);
  if (blas)
    cuda::w8a16_grouped_linear(blas->get(), dx.as<cuda::bf16>(), rows, w.lin, w_bf16, c.groups, dy.as<cuda::bf16>(),
                               nullptr);
  else
    cuda::w8a16_grouped_gemv(dx.as<cuda::bf16>(), rows, w.lin, c.groups, dy.as<cuda::bf16>(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  return cuda::to_host<uint16_t>(dy, size_t(rows * n));
}

std::string label(const GroupedCase& c, int64_t rows) {
  return " groups=" + std::to_string(c.groups) + " n_group=" + std::to_string(c.n_group) + " k=" +
         std::to_string(c.k) + " block=" + std::to_string(c.block) + " rows=" + std::to_string(rows);
}

void check_against_cpu(const std::string& name, const std::vector<uint16_t>& out, const std::vector<float>& ref) {
  const std::vector<float> y = from_bf16(out);
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    max_err = std::max(max_err, std::fabs(double(y[i]) - ref[i]));
    max_ref = std::max(max_ref, std::fabs(double(ref[i])));
  }
  std::printf("  %s: max |err| %.3e of max |ref| %.3e\n", name.c_str(), max_err, max_ref);
  // fp32 accumulation (~sqrt(k) * 2^-24 relative) under one bf16 rounding of the output.
  check_rel_l2(name, y, ref, kBf16OutputBound);
}

size_t row_mismatches(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int64_t row, int64_t n) {
  size_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += a[size_t(row * n + i)] != b[size_t(row * n + i)];
  return bad;
}

}  // namespace

TEST(GpuW8A16, GroupedGemvMatchesDequantizedMatmul) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  // V4-Flash wo_a (8 groups of 1024 rows over 4096 columns); an odd shape: scale blocks straddling groups
  // (n_group 96), k not a multiple of the 512-column warp step; V4.1's 32-blocks.
  for (const GroupedCase& c : {GroupedCase{8, 1024, 4096}, GroupedCase{4, 96, 384}, GroupedCase{2, 64, 256, 32}}) {
    const GroupedData w = make_weight(rng, c);
    for (int64_t rows : {1, 2, 3, 8, 13}) {
      const std::vector<float> x = make_input(rng, rows, c);
      check_against_cpu("w8a16_grouped_gemv" + label(c, rows), run(x, rows, c, w, nullptr, nullptr),
                        reference(x, rows, c, w.dequant));
    }
  }
}

TEST(GpuW8A16, DispatchPathsAndBatchInvariance) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  cuda::BlasHandle blas;
  const GroupedCase c{8, 1024, 4096};
  const int64_t n = c.groups * c.n_group;
  const GroupedData w = make_weight(rng, c);
  // The bf16 copy of the larger row counts, dequantized on the device: exactly the CPU's dequantized values.
  cuda::DeviceBuffer dwb(w.dequant.size() * 2);
  cuda::fp8_dequantize_bf16(w.lin, dwb.as<cuda::bf16>(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> wb = cuda::to_host<uint16_t>(dwb, w.dequant.size());
  size_t bad = 0;
  for (size_t i = 0; i < wb.size(); ++i) bad += bf16_to_float(wb[i]) != w.dequant[i];
  report_exact("fp8_dequantize_bf16 vs the CPU dequantization", bad, wb.size());
  const cuda::bf16* w_bf16 = dwb.as<cuda::bf16>();

  const int64_t big = 41;
  const std::vector<float> x = make_input(rng, big, c);
  const std::vector<float> ref = reference(x, big, c, w.dequant);
  for (int64_t rows : {int64_t(1), cuda::kW8A16GemvMaxRows, cuda::kW8A16GemvMaxRows + 1, big}) {
    const std::vector<float> xr(x.begin(), x.begin() + rows * c.groups * c.k);
    const std::vector<float> rr(ref.begin(), ref.begin() + rows * n);
    check_against_cpu("w8a16_grouped_linear" + label(c, rows), run(xr, rows, c, w, w_bf16, &blas), rr);
  }

  // Batch invariance of the decode kernel: row 0 alone, and among 2 .. 13 rows (tile sizes 1, 2, 4 and several
  // tiles), gives the same bits.
  const std::vector<float> x0(x.begin(), x.begin() + c.groups * c.k);
  const std::vector<uint16_t> alone = run(x0, 1, c, w, nullptr, nullptr);
  for (int64_t rows : {2, 3, 5, 13}) {
    const std::vector<float> xr(x.begin(), x.begin() + rows * c.groups * c.k);
    report_exact("w8a16_grouped_gemv row 0 alone vs among" + label(c, rows),
                 row_mismatches(run(xr, rows, c, w, nullptr, nullptr), alone, 0, n), size_t(n));
  }
  // In batch-invariant mode the dispatcher takes one kernel (gemm_bf16's invariant one) for every row count.
  cuda::set_batch_invariant(true);
  const std::vector<uint16_t> inv_alone = run(x0, 1, c, w, w_bf16, &blas), inv_big = run(x, big, c, w, w_bf16, &blas);
  cuda::set_batch_invariant(false);
  report_exact("w8a16_grouped_linear batch-invariant row 0 alone vs among" + label(c, big),
               row_mismatches(inv_big, inv_alone, 0, n), size_t(n));
  check_against_cpu("w8a16_grouped_linear (batch-invariant)" + label(c, big), inv_big, ref);
}

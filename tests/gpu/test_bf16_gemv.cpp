// The bf16 decode GEMV pair (cuda/bf16_gemv.h: the compressors' kv / gate projections at a few rows) against
// a CPU double-accumulated reference, with the bound that fp32 accumulation of exact bf16 products allows; batch
// invariance (a row alone vs the same row among others, bitwise: the one-row kernel against the staged form at 2-8
// rows per pass and its splits); CUDA graph replay (bitwise); and gemm_bf16_pair's dispatch (cuda/blas.h): the GEMV
// up to kBf16GemvMaxRows (4) rows, cuBLAS above, and batch-invariant mode keeps its kernel.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda/blas.h"
#include "cuda/launch.h"
#include "cuda/numerics_mode.h"
#include "gpu_test_util.h"
#include "cuda/bf16_gemv.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

using InvariantScope = SwitchScope<bool, cuda::batch_invariant, cuda::set_batch_invariant>;
using PdlScope = SwitchScope<bool, cuda::pdl_enabled, cuda::set_pdl>;

struct Shape {
  int64_t n, k;
  int64_t ldx = 0, ldy = 0;  // 0: k, n
  int64_t lx() const { return ldx ? ldx : k; }
  int64_t ly() const { return ldy ? ldy : n; }
};

std::string label(const Shape& s, int64_t m, cuda::OutType out) {
  return " m=" + std::to_string(m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
         (s.ldx ? " ldx=" + std::to_string(s.ldx) : "") + (s.ldy ? " ldy=" + std::to_string(s.ldy) : "") +
         (out == cuda::OutType::F32 ? " f32" : " bf16");
}

// The pair's host data: x [m, ldx] (rows of different magnitude), w1 / w2 [n, k] ~ N(0, 0.02^2), all bf16 values.
struct Data {
  std::vector<float> x, w1, w2;
  cuda::DeviceBuffer dx, dw;  // dw: w1 then w2, adjacent (the compressors' layout, gemm_bf16_pair's strided call)
};

Data make_data(Rng& rng, const Shape& s, int64_t m) {
  Data d;
  d.x.resize(size_t(std::max<int64_t>(m, 1) * s.lx()));
  for (int64_t t = 0; t < m; ++t) {
    const float scale = std::exp(rng.uniform(-3.0f, 3.0f));
    for (int64_t i = 0; i < s.lx(); ++i) d.x[size_t(t * s.lx() + i)] = rng.normal(0.0f, scale);
  }
  d.w1 = rng.normals(size_t(s.n * s.k), 0.0f, 0.02f);
  d.w2 = rng.normals(size_t(s.n * s.k), 0.0f, 0.02f);
  round_to_bf16(d.x);
  round_to_bf16(d.w1);
  round_to_bf16(d.w2);
  std::vector<float> w = d.w1;
  w.insert(w.end(), d.w2.begin(), d.w2.end());
  d.dx = cuda::to_device(to_bf16(d.x));
  d.dw = cuda::to_device(to_bf16(w));
  return d;
}

const cuda::bf16* w1_of(const Data& d) { return d.dw.as<cuda::bf16>(); }
const cuda::bf16* w2_of(const Data& d, const Shape& s) { return d.dw.as<cuda::bf16>() + s.n * s.k; }

// y = x . w^T in double, [m, n], and the sums of |products| that bound the fp32 rounding.
void reference(const Data& d, const std::vector<float>& w, const Shape& s, int64_t m, std::vector<float>& y,
               std::vector<float>& abs_sum) {
  y.assign(size_t(m * s.n), 0.0f);
  abs_sum.assign(size_t(m * s.n), 0.0f);
  for (int64_t t = 0; t < m; ++t)
    for (int64_t r = 0; r < s.n; ++r) {
      double acc = 0, mag = 0;
      for (int64_t c = 0; c < s.k; ++c) {
        const double p = double(d.x[size_t(t * s.lx() + c)]) * w[size_t(r * s.k + c)];
        acc += p;
        mag += std::fabs(p);
      }
      y[size_t(t * s.n + r)] = float(acc);
      abs_sum[size_t(t * s.n + r)] = float(mag);
    }
}

// Relative L2 bound of an fp32 sum of `terms` exact products in any order: |err_i| <= gamma * sum_c |p_ic| with
// gamma = terms * 2^-24 (1 + o(1)), so ||err|| / ||y|| <= gamma * ||abs_sum|| / ||y||; plus the reference's own
// rounding to fp32 (2^-24) and, for a bf16 output, one bf16 rounding (kBf16OutputBound).
double accumulation_bound(int64_t terms, const std::vector<float>& y, const std::vector<float>& abs_sum,
                          cuda::OutType out) {
  double yy = 0, ss = 0;
  for (size_t i = 0; i < y.size(); ++i) yy += double(y[i]) * y[i], ss += double(abs_sum[i]) * abs_sum[i];
  const double gamma = 1.01 * double(terms) * std::ldexp(1.0, -24);
  const double fp32 = gamma * std::sqrt(ss / std::max(yy, 1e-300)) + std::ldexp(1.0, -23);
  return out == cuda::OutType::F32 ? fp32 : fp32 + kBf16OutputBound;
}

// The GEMV's terms per output: ceil(k / 256) steps of 8 FMAs in each lane, then a 5-level shuffle tree.
int64_t gemv_terms(int64_t k) { return (k + 255) / 256 * 8 + 5; }

// Output of one call as floats [m, n] (the ldy padding dropped), from y1 / y2 poisoned with NaN first.
struct Out {
  std::vector<float> y1, y2;
};

Out read_out(const cuda::DeviceBuffer& y1, const cuda::DeviceBuffer& y2, const Shape& s, int64_t m,
             cuda::OutType out) {
  Out o;
  for (int i = 0; i < 2; ++i) {
    const cuda::DeviceBuffer& b = i ? y2 : y1;
    std::vector<float> full(size_t(m * s.ly()));
    if (out == cuda::OutType::F32) full = cuda::to_host<float>(b, size_t(m * s.ly()));
    else full = from_bf16(cuda::to_host<uint16_t>(b, size_t(m * s.ly())));
    std::vector<float>& dst = i ? o.y2 : o.y1;
    dst.resize(size_t(m * s.n));
    for (int64_t t = 0; t < m; ++t)
      std::copy_n(full.begin() + t * s.ly(), s.n, dst.begin() + t * s.n);
  }
  return o;
}

size_t out_bytes(const Shape& s, int64_t m, cuda::OutType out) {
  return size_t(std::max<int64_t>(m, 1) * s.ly()) * (out == cuda::OutType::F32 ? 4 : 2);
}

// bf16_gemv_pair on rows [t0, t0 + m) of the data's x.
Out run_gemv(const Data& d, const Shape& s, int64_t t0, int64_t m, cuda::OutType out) {
  cuda::DeviceBuffer y1(out_bytes(s, m, out)), y2(out_bytes(s, m, out));
  y1.fill_bytes(0xFF);
  y2.fill_bytes(0xFF);
  cuda::bf16_gemv_pair(d.dx.as<cuda::bf16>() + t0 * s.lx(), s.lx(), w1_of(d), w2_of(d, s), s.k, y1.get(), y2.get(),
                       out, s.ly(), m, s.n, s.k, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  return read_out(y1, y2, s, m, out);
}

// gemm_bf16_pair (the dispatcher) with y2 right after y1 in one buffer (the compressors' workspace layout).
Out run_pair(cuda::BlasHandle& blas, const Data& d, const Shape& s, int64_t m, cuda::OutType out) {
  const size_t half = (out_bytes(s, m, out) + 255) / 256 * 256;
  cuda::DeviceBuffer y(2 * half), y2(out_bytes(s, m, out));
  y.fill_bytes(0xFF);
  char* base = static_cast<char*>(y.get());
  cuda::gemm_bf16_pair(blas.get(), d.dx.as<cuda::bf16>(), s.lx(), w1_of(d), w2_of(d, s), s.k, base, base + half, out,
                       s.ly(), m, s.n, s.k, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  DI_CUDA_CHECK(cudaMemcpy(y2.get(), base + half, out_bytes(s, m, out), cudaMemcpyDeviceToDevice));
  cuda::DeviceBuffer y1(out_bytes(s, m, out));
  DI_CUDA_CHECK(cudaMemcpy(y1.get(), base, out_bytes(s, m, out), cudaMemcpyDeviceToDevice));
  return read_out(y1, y2, s, m, out);
}

void check_pair(const std::string& name, const Out& o, const Data& d, const Shape& s, int64_t m, int64_t terms,
                cuda::OutType out) {
  for (int i = 0; i < 2; ++i) {
    std::vector<float> ref, abs_sum;
    reference(d, i ? d.w2 : d.w1, s, m, ref, abs_sum);
    check_rel_l2(name + (i ? " gate" : " kv"), i ? o.y2 : o.y1, ref, accumulation_bound(terms, ref, abs_sum, out));
  }
}

size_t pair_mismatches(const Out& a, const Out& b) {
  return bitwise_mismatches(a.y1, b.y1) + bitwise_mismatches(a.y2, b.y2);
}

// V4-Flash's HCA (n 512) and CSA (n 1024) widths at hidden 4096, V4.1's hidden 5120, a narrower and an odd width, k
// not a multiple of the 256-column warp step, and row strides past the row (x padded, y with odd ldy).
const Shape kShapes[] = {{512, 4096}, {1024, 4096}, {512, 5120}, {256, 4096}, {397, 4096},
                         {37, 1000},  {96, 512, 640, 101}};
// Widths where the staged form carries fewer rows per pass (its x rows are <= 96 KB of shared memory per block):
// 3 rows at k 16384 (8 rows: two passes of 3 and one of 2), and none at k 49152 (every row its own pass).
const Shape kWideShapes[] = {{40, 16384}, {24, 49152}};

}  // namespace

TEST(GpuBf16Gemv, PairMatchesCpuReference) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  for (const Shape& s : kShapes)
    for (int64_t m : {1, 2, 3, 5, 8, 13}) {
      const Data d = make_data(rng, s, m);
      for (cuda::OutType out : {cuda::OutType::F32, cuda::OutType::BF16}) {
        if (out == cuda::OutType::BF16 && m != 2) continue;  // the output conversion once per shape
        check_pair("bf16_gemv_pair" + label(s, m, out), run_gemv(d, s, 0, m, out), d, s, m, gemv_terms(s.k), out);
      }
    }
  for (const Shape& s : kWideShapes) {
    const int64_t m = 8;
    const Data d = make_data(rng, s, m);
    check_pair("bf16_gemv_pair" + label(s, m, cuda::OutType::F32), run_gemv(d, s, 0, m, cuda::OutType::F32), d, s, m,
               gemv_terms(s.k), cuda::OutType::F32);
  }
}

// A row's bits do not depend on the call's row count or on the other rows: each row of an m-row call (m = 2..8: one
// pass of the staged form; 13: a pass of 8 and one of 5) against the same row alone (the one-row kernel), at
// V4 / V4.1 widths, an odd n (warps past n), padded strides and the wide widths (fewer rows per pass).
TEST(GpuBf16Gemv, RowAloneMatchesRowInBatch) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  for (const Shape& s : {kShapes[0], kShapes[2], kShapes[4], kShapes[6], kWideShapes[0], kWideShapes[1]}) {
    const int64_t big = 13;
    const Data d = make_data(rng, s, big);
    for (cuda::OutType out : {cuda::OutType::F32, cuda::OutType::BF16}) {
      std::vector<Out> alone;
      for (int64_t t = 0; t < big; ++t) alone.push_back(run_gemv(d, s, t, 1, out));
      for (int64_t m : {2, 3, 4, 5, 6, 7, 8, 13}) {
        const Out all = run_gemv(d, s, 0, m, out);
        size_t bad = 0;
        for (int64_t t = 0; t < m; ++t)
          for (int i = 0; i < 2; ++i) {
            const std::vector<float>& a = i ? all.y2 : all.y1;
            const std::vector<float> row(a.begin() + t * s.n, a.begin() + (t + 1) * s.n);
            bad += bitwise_mismatches(row, i ? alone[size_t(t)].y2 : alone[size_t(t)].y1);
          }
        report_exact("bf16_gemv_pair rows alone vs among" + label(s, m, out), bad, size_t(2 * m * s.n));
      }
    }
  }
}

// A CUDA graph of the call (with and without PDL) replays the eager call's bits.
TEST(GpuBf16Gemv, GraphReplayMatchesEager) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  PdlScope restore;
  const Shape s = kShapes[0];
  for (int64_t m : {1, 8}) {
    const Data d = make_data(rng, s, m);
    const Out eager = run_gemv(d, s, 0, m, cuda::OutType::F32);
    for (bool pdl : {true, false}) {
      cuda::set_pdl(pdl);
      cudaStream_t st;
      DI_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
      cuda::DeviceBuffer y1(out_bytes(s, m, cuda::OutType::F32)), y2(out_bytes(s, m, cuda::OutType::F32));
      y1.fill_bytes(0xFF);
      y2.fill_bytes(0xFF);
      DI_CUDA_CHECK(cudaDeviceSynchronize());  // the fills are on the legacy stream, st does not wait for it
      cudaGraphExec_t exec = capture_exec(st, [&] {
        // twice: the second launch follows the first on the stream (a programmatic edge with PDL on)
        for (int rep = 0; rep < 2; ++rep)
          cuda::bf16_gemv_pair(d.dx.as<cuda::bf16>(), s.lx(), w1_of(d), w2_of(d, s), s.k, y1.get(), y2.get(),
                               cuda::OutType::F32, s.ly(), m, s.n, s.k, st);
      });
      for (int rep = 0; rep < 3; ++rep) DI_CUDA_CHECK(cudaGraphLaunch(exec, st));
      DI_CUDA_CHECK(cudaStreamSynchronize(st));
      DI_CUDA_CHECK(cudaGraphExecDestroy(exec));
      DI_CUDA_CHECK(cudaStreamDestroy(st));
      report_exact("bf16_gemv_pair graph vs eager" + label(s, m, cuda::OutType::F32) + (pdl ? " pdl" : " no-pdl"),
                   pair_mismatches(read_out(y1, y2, s, m, cuda::OutType::F32), eager), size_t(2 * m * s.n));
    }
  }
}

// gemm_bf16_pair: the GEMV (its bits) up to kBf16GemvMaxRows rows (1, 2, 3, 4: the one-row kernel and the staged
// form); rows past the limit (5, 8, 9) run cuBLAS, within the bound of a k-term fp32 sum; batch-invariant mode runs
// gemm_bf16_invariant at every row count.
TEST(GpuBf16Gemv, PairDispatch) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  InvariantScope restore_invariant(false);
  cuda::BlasHandle blas;
  const cuda::OutType f32 = cuda::OutType::F32;
  static_assert(cuda::kBf16GemvMaxRows == 4, "the row counts below straddle the limit");
  for (const Shape& s : {kShapes[0], kShapes[1], kShapes[2]})
    for (int64_t m : {1, 2, 3, 4, 5, 8, 9}) {
      const Data d = make_data(rng, s, m);
      const Out paired = run_pair(blas, d, s, m, f32);
      if (m <= cuda::kBf16GemvMaxRows)
        report_exact("gemm_bf16_pair = bf16_gemv_pair" + label(s, m, f32),
                     pair_mismatches(paired, run_gemv(d, s, 0, m, f32)), size_t(2 * m * s.n));
      else
        check_pair("gemm_bf16_pair past the GEMV's row limit (cuBLAS)" + label(s, m, f32), paired, d, s, m, s.k, f32);

      cuda::set_batch_invariant(true);
      const Out invariant = run_pair(blas, d, s, m, f32);
      cuda::set_batch_invariant(false);
      cuda::DeviceBuffer y1(out_bytes(s, m, f32)), y2(out_bytes(s, m, f32));
      cuda::gemm_bf16_invariant(d.dx.as<cuda::bf16>(), s.lx(), w1_of(d), s.k, y1.get(), f32, s.ly(), m, s.n, s.k,
                                nullptr);
      cuda::gemm_bf16_invariant(d.dx.as<cuda::bf16>(), s.lx(), w2_of(d, s), s.k, y2.get(), f32, s.ly(), m, s.n, s.k,
                                nullptr);
      DI_CUDA_CHECK(cudaDeviceSynchronize());
      report_exact("gemm_bf16_pair batch-invariant = gemm_bf16_invariant" + label(s, m, f32),
                   pair_mismatches(invariant, read_out(y1, y2, s, m, f32)), size_t(2 * m * s.n));
    }
}

// bf16_gemv (one matrix) gives the pair's y1 bits; gemm_bf16 (one product, batch 1) runs it up to kBf16GemvMaxRows
// rows (1, 2, 4) and cuBLAS above (5, 8), within the bound of a k-term fp32 sum. The indexers' head-weight
// projection (64 x 4096, V4.1 64 x 5120) among the shapes.
TEST(GpuBf16Gemv, SingleProductAndDispatch) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  InvariantScope restore_invariant(false);
  cuda::BlasHandle blas;
  const cuda::OutType f32 = cuda::OutType::F32;
  static_assert(cuda::kBf16GemvMaxRows == 4, "the row counts below straddle the limit");
  for (const Shape& s : {Shape{64, 4096}, Shape{64, 5120}, kShapes[1], kShapes[4], kShapes[6]})
    for (int64_t m : {1, 2, 4, 5, 8}) {
      const Data d = make_data(rng, s, m);
      const Out pair = run_gemv(d, s, 0, m, f32);
      cuda::DeviceBuffer y1(out_bytes(s, m, f32)), y2(out_bytes(s, m, f32));
      y1.fill_bytes(0xFF);
      y2.fill_bytes(0xFF);
      cuda::bf16_gemv(d.dx.as<cuda::bf16>(), s.lx(), w1_of(d), s.k, y1.get(), f32, s.ly(), m, s.n, s.k, nullptr);
      cuda::gemm_bf16(blas.get(), d.dx.as<cuda::bf16>(), s.lx(), w1_of(d), s.k, y2.get(), f32, s.ly(), m, s.n, s.k,
                      nullptr);
      DI_CUDA_CHECK(cudaDeviceSynchronize());
      const Out single = read_out(y1, y2, s, m, f32);  // y1: bf16_gemv, y2: gemm_bf16
      report_exact("bf16_gemv = bf16_gemv_pair's kv" + label(s, m, f32), bitwise_mismatches(single.y1, pair.y1),
                   size_t(m * s.n));
      if (m <= cuda::kBf16GemvMaxRows) {
        report_exact("gemm_bf16 = bf16_gemv" + label(s, m, f32), bitwise_mismatches(single.y2, single.y1),
                     size_t(m * s.n));
      } else {
        std::vector<float> ref, abs_sum;
        reference(d, d.w1, s, m, ref, abs_sum);
        check_rel_l2("gemm_bf16 past the GEMV's row limit (cuBLAS)" + label(s, m, f32), single.y2, ref,
                     accumulation_bound(s.k, ref, abs_sum, f32));
      }
    }
}

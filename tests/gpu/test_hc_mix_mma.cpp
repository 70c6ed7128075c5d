// The mHC site mix's dot products on tensor cores (DEEPINFER_HC_MIX=mma, mhc_site_tail.h; bench/gpu/NOTES.md "mHC
// site mix on tensor cores") from 64 tokens, against today's CUDA-core kernel (hc_site_kernel<4>, itself checked
// against the CPU in test_mhc.cpp) and against the CPU reference (layers/mhc/mhc.cpp), for hc_site_mix and for
// hc_site_pre (whose chain takes the mix from the same launch), hidden 4096 (V4) and 5120 (V4.1).
//
// Why the bounds: X is bf16 and fn is split into bf16 hi + mid + lo with |f - (hi + mid + lo)| <= 2^-24 |f| (each
// part is the bf16 rounding of the exact remainder), so every product is exact and a chunk partial differs from
// today's only by the order of its fp32 additions (and the tensor core's accumulation). Two orders of an n-term
// fp32 sum differ by about sqrt(n) 2^-24 of the terms' root sum of squares: n = 4 hidden <= 20480, so ~1e-5 of a
// logit's natural scale, and sigmoid / softmax / Sinkhorn (derivatives <= 1 on these scales) carry that over, so
// mix rel_l2 against today's kernel <= 2e-5 (observed values should be ~1e-6); against the CPU (double sums) the
// bound of test_mhc.cpp, 1e-4. Downstream of the mix (hc_site_pre: collapse -> bf16 -> norm -> bf16 -> FP8) a
// ~1e-6 relative change of pre moves a value across a bf16 rounding boundary with probability ~1e-6 / 2^-8 per
// rounding (~5e-4 with the norm's two roundings and the RMS), so: u differs from today's in <= 1 % of elements, each
// by at most what the two runs' own pre values allow (u_bound below: the collapse sums 4 streams, and where they
// cancel a 1e-7 change of pre is many ulps of the small result, so "2 ulps of u" was wrong: run 60 found 1-109 such
// elements per shape). The FP8 codes and scales are a function of u alone, so each run's must be exactly the CPU
// quantization of its own u (run 1 of session 10 found a block whose amax crossed 448 x 2^k: its power-of-two scale
// doubled and all 128 codes moved, so "codes within one e4m3 step of today's" was wrong too). A rerun of the mma path
// is bitwise the same (fixed order, no float atomics).
#include <cstring>

#include "cuda/kernels.h"
#include "gpu_test_util.h"
#include "layers/mhc/mhc.h"
#include "layers/mhc/mhc_site_tail.h"
#include "layers/quant/fake_quant.h"
#include "mhc_site_inputs.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

constexpr int kHc = 4, kRows = (2 + kHc) * kHc, kIters = 20;
constexpr float kNormEps = 1e-6f, kHcEps = 1e-6f;

using MixRestore = SwitchScope<bool, cuda::hc_mix_mma, cuda::set_hc_mix_mma>;

// The site inputs (mhc_site_inputs.h) and their device copies.
struct Inputs : SiteInputs {
  int64_t tokens, hidden;
  cuda::DeviceBuffer dX, dfn, dbase, dscale, dw;
  Inputs(Rng& rng, int64_t tokens_, int64_t hidden_)
      : SiteInputs(site_inputs(rng, tokens_, hidden_)), tokens(tokens_), hidden(hidden_) {
    dX = cuda::to_device(to_bf16(X));
    dfn = cuda::to_device(fn);
    dbase = cuda::to_device(base);
    dscale = cuda::to_device(scale);
    dw = cuda::to_device(to_bf16(norm_weight));
  }
  cuda::HcSite site() const { return {dfn.as<float>(), dbase.as<float>(), dscale.as<float>()}; }
};

struct Out {
  std::vector<float> mix_only, mix, s;
  std::vector<uint16_t> u;
  std::vector<uint8_t> q;
};

// hc_site_mix and hc_site_pre (FP8 codes of quant_block columns) with the switch as given, on poisoned outputs and
// a workspace of their own (zeroed: the arrival counters of today's kernel).
Out run(const Inputs& in, bool mma, int quant_block) {
  cuda::set_hc_mix_mma(mma);
  const size_t n_mix = size_t(in.tokens * kRows), n_u = size_t(in.tokens * in.hidden);
  cuda::DeviceBuffer ws(cuda::hc_site_mix_workspace_bytes(in.tokens, kHc, in.hidden)), mix_only(n_mix * 4),
      mix(n_mix * 4), u(n_u * 2), q(n_u), s(n_u / quant_block * 4);
  ws.fill_bytes(0);
  for (cuda::DeviceBuffer* b : {&mix_only, &mix, &u, &q, &s}) b->fill_bytes(0xFF);
  cuda::hc_site_mix(in.dX.as<cuda::bf16>(), in.tokens, kHc, in.hidden, in.site(), kNormEps, kHcEps, kIters,
                    mix_only.as<float>(), ws.get(), nullptr);
  cuda::hc_site_pre(in.dX.as<cuda::bf16>(), in.tokens, kHc, in.hidden, in.site(), kNormEps, kHcEps, kIters,
                    in.dw.as<cuda::bf16>(), mix.as<float>(), u.as<cuda::bf16>(), q.as<uint8_t>(), s.as<float>(),
                    quant_block, ws.get(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  Out o;
  o.mix_only = cuda::to_host<float>(mix_only, n_mix);
  o.mix = cuda::to_host<float>(mix, n_mix);
  o.u = cuda::to_host<uint16_t>(u, n_u);
  o.q = cuda::to_host<uint8_t>(q, n_u);
  o.s = cuda::to_host<float>(s, n_u / quant_block);
  return o;
}

// Tokens t % stride == 0 of the CPU reference's mix (hc_mix; every token at small counts, a sample at 4096).
void cpu_mix(const Inputs& in, int64_t stride, std::vector<float>& ref, std::vector<size_t>& rows) {
  const int64_t width = kHc * in.hidden;
  HcSiteParams p{in.fn.data(), in.base.data(), in.scale.data()};
  for (int64_t t = 0; t < in.tokens; t += stride) {
    const HcMix m = hc_mix(in.X.data() + t * width, kHc, in.hidden, p, kNormEps, kHcEps, kIters);
    ref.insert(ref.end(), m.pre.begin(), m.pre.end());
    ref.insert(ref.end(), m.post.begin(), m.post.end());
    ref.insert(ref.end(), m.comb.begin(), m.comb.end());
    rows.push_back(size_t(t));
  }
}

std::vector<float> pick(const std::vector<float>& mix, const std::vector<size_t>& rows) {
  std::vector<float> out;
  for (size_t t : rows) out.insert(out.end(), mix.begin() + t * kRows, mix.begin() + (t + 1) * kRows);
  return out;
}

// Elements that differ, and whether every difference is within `ok(a, b, index)`.
template <class T, class Ok>
void check_flips(const std::string& name, const std::vector<T>& a, const std::vector<T>& b, Ok ok) {
  ASSERT_EQ(a.size(), b.size()) << name;
  size_t diff = 0, far = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) == 0) continue;
    ++diff;
    if (!ok(a[i], b[i], i) && far++ < 8) std::printf("  %s [%zu] differs beyond the bound\n", name.c_str(), i);
  }
  const double frac = double(diff) / double(std::max<size_t>(a.size(), 1));
  std::printf("GPU_CHECK %s differ=%zu/%zu (%.2e) beyond_bound=%zu bound=1e-2\n", name.c_str(), diff, a.size(), frac,
              far);
  EXPECT_LE(frac, 1e-2) << name;
  EXPECT_EQ(far, 0u) << name;
}

// The largest |u_a - u_b| two runs of hc_site_pre can give element (t, j) when their pre (mix row words 0..3) differ
// (model-spec §3 site: u = bf16(r w bf16(c)), c = sum_i pre_i X_i over the hc streams, r the RMS of bf16(c)): c moves
// by <= sum_i |pre_a,i - pre_b,i| |X_i| plus the fp32 rounding of each sum (4 terms: <= 2^-22 sum_i |pre_i X_i|),
// each bf16(c) by half an ulp more (2^-8 |c| each), r by a relative 1e-6 (its mean over the row), and the final
// bf16 rounding by half an ulp of each u. Computed from the runs' own pre and a host collapse.
std::vector<float> u_bound(const Inputs& in, const std::vector<float>& mix_a, const std::vector<float>& mix_b,
                           const std::vector<uint16_t>& u_a, const std::vector<uint16_t>& u_b) {
  const int64_t H = in.hidden, width = kHc * H;
  std::vector<float> bound(size_t(in.tokens * H));
  std::vector<float> c(static_cast<size_t>(H));
  for (int64_t t = 0; t < in.tokens; ++t) {
    const float* pre = mix_a.data() + t * kRows;
    const float* X = in.X.data() + t * width;
    double ss = 0;
    for (int64_t j = 0; j < H; ++j) {
      float v = 0;
      for (int i = 0; i < kHc; ++i) v += pre[i] * X[i * H + j];
      c[size_t(j)] = bf16_to_float(to_bf16(std::vector<float>{v})[0]);
      ss += double(c[size_t(j)]) * c[size_t(j)];
    }
    const double r = 1.0 / std::sqrt(ss / double(H) + kNormEps);
    for (int64_t j = 0; j < H; ++j) {
      double dc = 0, mag = 0;
      for (int i = 0; i < kHc; ++i) {
        const double x = std::fabs(X[i * H + j]);
        dc += std::fabs(double(pre[i]) - mix_b[size_t(t * kRows + i)]) * x;
        mag += std::fabs(pre[i]) * x;
      }
      const double cj = std::fabs(c[size_t(j)]);
      const double dcb = dc + std::ldexp(mag, -22) + std::ldexp(2.0 * cj + dc, -8);
      const size_t e = size_t(t * H + j);
      const double ua = std::fabs(bf16_to_float(u_a[e])), ub = std::fabs(bf16_to_float(u_b[e]));
      bound[e] = float(r * std::fabs(in.norm_weight[size_t(j)]) * (dcb + 1e-6 * cj) + std::ldexp(ua + ub, -8));
    }
  }
  return bound;
}

// Elements whose decoded FP8 value (e4m3 code x its block's scale) differs from fp8_fake_quant of the run's own u.
size_t fp8_mismatches(const Out& o, int quant_block) {
  std::vector<float> want(o.u.size());
  for (size_t i = 0; i < o.u.size(); ++i) want[i] = bf16_to_float(o.u[i]);
  fp8_fake_quant(want.data(), int64_t(want.size()), quant_block);
  size_t bad = 0;
  for (size_t i = 0; i < o.q.size(); ++i) {
    const float got = e4m3_to_float(o.q[i]) * o.s[i / size_t(quant_block)];
    bad += std::memcmp(&got, &want[i], sizeof(float)) != 0;
  }
  return bad;
}

void run_shape(Rng& rng, int64_t tokens, int64_t hidden, int quant_block = 128) {
  ASSERT_TRUE(cuda::hc_mix_mma_applies(tokens));
  MixRestore restore;
  const Inputs in(rng, tokens, hidden);
  const Out today = run(in, false, quant_block), mma = run(in, true, quant_block),
            again = run(in, true, quant_block);
  const std::string shape = " tokens=" + std::to_string(tokens) + " hidden=" + std::to_string(hidden);

  std::vector<float> ref;
  std::vector<size_t> rows;
  cpu_mix(in, tokens > 1024 ? 17 : 1, ref, rows);
  check_rel_l2("hc_site_mix mma vs cpu" + shape, pick(mma.mix_only, rows), ref, 1e-4);
  check_rel_l2("hc_site_mix today vs cpu" + shape, pick(today.mix_only, rows), ref, 1e-4);  // the yardstick
  check_rel_l2("hc_site_mix mma vs today" + shape, mma.mix_only, today.mix_only, 2e-5);
  check_rel_l2("hc_site_pre mix mma vs today" + shape, mma.mix, today.mix, 2e-5);
  report_exact("hc_site_pre mix vs hc_site_mix, mma" + shape, bitwise_mismatches(mma.mix, mma.mix_only), mma.mix.size());

  const std::vector<float> ub = u_bound(in, mma.mix, today.mix, mma.u, today.u);
  check_flips("hc_site_pre u mma vs today" + shape, mma.u, today.u, [&](uint16_t x, uint16_t y, size_t i) {
    return std::fabs(bf16_to_float(x) - bf16_to_float(y)) <= ub[i];
  });
  // The FP8 step after u is deterministic: each run's codes and scales must be exactly the CPU quantization of its
  // own u (fp8_fake_quant, model-spec §2). Comparing the two runs' codes directly cannot be bounded: the scale is a
  // power of two, so a one-ulp move of a block's amax across 448 x 2^k halves the scale and moves all its codes.
  report_exact("hc_site_pre fp8 (codes, scales) = CPU quantization of u, mma" + shape,
               fp8_mismatches(mma, quant_block), mma.q.size());
  report_exact("hc_site_pre fp8 (codes, scales) = CPU quantization of u, today" + shape,
               fp8_mismatches(today, quant_block), today.q.size());

  report_exact("hc_site_mix mma rerun" + shape, bitwise_mismatches(again.mix_only, mma.mix_only), mma.mix_only.size());
  report_exact("hc_site_pre mix mma rerun" + shape, bitwise_mismatches(again.mix, mma.mix), mma.mix.size());
  report_exact("hc_site_pre u mma rerun" + shape, bitwise_mismatches(again.u, mma.u), mma.u.size());
  report_exact("hc_site_pre fp8 codes mma rerun" + shape, bitwise_mismatches(again.q, mma.q), mma.q.size());
  report_exact("hc_site_pre fp8 scales mma rerun" + shape, bitwise_mismatches(again.s, mma.s), mma.s.size());
}

}  // namespace

TEST(GpuHcMixMma, MatchesTodaysKernelAndCpu) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  for (int64_t hidden : {int64_t(4096), int64_t(5120)}) {
    // 64: the threshold (two warps' token tiles); 100: a partial tile (rows past the end); 4096: a long prefill.
    for (int64_t tokens : {int64_t(64), int64_t(100), int64_t(256), int64_t(1024), int64_t(4096)})
      run_shape(rng, tokens, hidden);
  }
  run_shape(rng, 96, 1000, 8);  // hidden % 64 != 0: the last chunk is 160 columns wide (5 steps of 32)
}

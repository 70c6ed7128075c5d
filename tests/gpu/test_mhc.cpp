// mHC site kernels against layers/mhc/mhc.cpp: the site coefficients (RMS-scaled linear, sigmoid, softmax,
// 20-step Sinkhorn), and collapse / expand given the reference's own coefficients. The fused site (hc_site_pre)
// keeps the chain's reduction orders, so it is checked bitwise against the chain of separate kernels
// hc_site_mix -> hc_collapse -> rms_norm -> fp8_quantize (each of which is checked against the CPU here and in
// test_norm_rope.cpp / test_quant_gemm.cpp).
#include <cstring>

#include "cuda/kernels.h"
#include "cuda/step_kernels.h"
#include "gpu_test_util.h"
#include "layers/mhc/mhc.h"
#include "layers/mhc/mhc_gpu_ref.h"
#include "layers/mhc/mhc_site_tail.h"
#include "mhc_site_inputs.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

void run_site(Rng& rng, int64_t tokens, int64_t hidden, float norm_eps) {
  const int hc = 4, rows = (2 + hc) * hc;
  const int64_t width = hc * hidden;
  std::vector<float> X(size_t(tokens * width)), y(size_t(tokens * hidden));
  for (float& v : X) v = rng.normal(0.0f, 1.5f);
  for (float& v : y) v = rng.normal(0.0f, 1.0f);
  round_to_bf16(X);
  round_to_bf16(y);
  std::vector<float> fn(size_t(rows * width)), base(static_cast<size_t>(rows)), scale(3);
  for (float& v : fn) v = rng.normal(0.0f, 1.0f / std::sqrt(float(width)) * 4.0f);
  for (float& v : base) v = rng.normal(0.0f, 1.0f);
  for (float& v : scale) v = rng.uniform(0.5f, 2.0f);
  const float hc_eps = 1e-6f;
  const int iters = 20;

  std::vector<float> mix_ref(size_t(tokens * rows)), u_ref(size_t(tokens * hidden)), X_ref(X.size());
  HcSiteParams params{fn.data(), base.data(), scale.data()};
  for (int64_t t = 0; t < tokens; ++t) {
    HcMix mix = hc_mix(X.data() + t * width, hc, hidden, params, norm_eps, hc_eps, iters);
    std::copy(mix.pre.begin(), mix.pre.end(), mix_ref.begin() + t * rows);
    std::copy(mix.post.begin(), mix.post.end(), mix_ref.begin() + t * rows + hc);
    std::copy(mix.comb.begin(), mix.comb.end(), mix_ref.begin() + t * rows + 2 * hc);
    hc_collapse(X.data() + t * width, mix.pre, hc, hidden, u_ref.data() + t * hidden);
    hc_expand(X.data() + t * width, y.data() + t * hidden, mix, hidden, X_ref.data() + t * width);
  }

  cuda::DeviceBuffer dX = cuda::to_device(to_bf16(X)), dy = cuda::to_device(to_bf16(y)), dfn = cuda::to_device(fn),
                     dbase = cuda::to_device(base), dscale = cuda::to_device(scale), dmix(mix_ref.size() * 4),
                     dmix_ref = cuda::to_device(mix_ref), dws(cuda::hc_site_mix_workspace_bytes(tokens, hc, hidden)),
                     du(size_t(tokens * hidden) * 2), dXo(X.size() * 2);
  dws.fill_bytes(0);  // the arrival counters start at zero (kernels.h)
  dmix.fill_bytes(0xFF);
  du.fill_bytes(0xFF);
  dXo.fill_bytes(0xFF);
  cuda::HcSite site{dfn.as<float>(), dbase.as<float>(), dscale.as<float>()};
  cuda::hc_site_mix(dX.as<cuda::bf16>(), tokens, hc, hidden, site, norm_eps, hc_eps, iters, dmix.as<float>(),
                    dws.get(), nullptr);
  // collapse / expand use the reference coefficients, so each kernel is checked on its own.
  cuda::hc_collapse(dX.as<cuda::bf16>(), dmix_ref.as<float>(), tokens, hc, hidden, du.as<cuda::bf16>(), nullptr);
  cuda::hc_expand(dX.as<cuda::bf16>(), dy.as<cuda::bf16>(), dmix_ref.as<float>(), tokens, hc, hidden,
                  dXo.as<cuda::bf16>(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());

  const std::string shape = " tokens=" + std::to_string(tokens) + " hidden=" + std::to_string(hidden);
  // fp32 throughout: a 4 * hidden long dot product (relative rounding ~ sqrt(n) * 2^-24 ~ 1e-5 of the logit
  // scale), then sigmoid / exp / 20 Sinkhorn divisions at a few ulps each.
  check_rel_l2("hc_site_mix" + shape, cuda::to_host<float>(dmix, mix_ref.size()), mix_ref, 1e-4);
  check_rel_l2("hc_collapse" + shape, from_bf16(cuda::to_host<uint16_t>(du, u_ref.size())), u_ref, kBf16OutputBound);
  check_rel_l2("hc_expand" + shape, from_bf16(cuda::to_host<uint16_t>(dXo, X_ref.size())), X_ref, kBf16OutputBound);
}

// hc_site_pre against the chain on the same device inputs, bitwise: mix, u, and (quant_block > 0) the FP8 codes
// and scales. The fused launch runs twice (first on other streams) so that the second call also checks that the
// arrival counters were left at zero.
void run_site_pre(Rng& rng, int64_t tokens, int64_t hidden, float eps, bool weighted, int quant_block) {
  const int hc = 4, rows = (2 + hc) * hc;
  const SiteInputs in = site_inputs(rng, tokens, hidden);
  std::vector<float> X_other = in.X;
  for (float& v : X_other) v = round_bf16(v * -0.75f + 0.125f);
  const float hc_eps = 1e-6f;
  const int iters = 20;
  const size_t n_u = size_t(tokens * hidden), n_s = quant_block ? n_u / size_t(quant_block) : 0;

  cuda::DeviceBuffer dX = cuda::to_device(to_bf16(in.X)), dXo = cuda::to_device(to_bf16(X_other)),
                     dfn = cuda::to_device(in.fn), dbase = cuda::to_device(in.base),
                     dscale = cuda::to_device(in.scale), dw = cuda::to_device(to_bf16(in.norm_weight)),
                     dws(cuda::hc_site_mix_workspace_bytes(tokens, hc, hidden)), dmix_a(size_t(tokens * rows) * 4),
                     dmix_b(size_t(tokens * rows) * 4), du_a(n_u * 2), du_b(n_u * 2), dq_a(std::max<size_t>(n_u, 1)),
                     dq_b(std::max<size_t>(n_u, 1)), ds_a(std::max<size_t>(n_s, 1) * 4),
                     ds_b(std::max<size_t>(n_s, 1) * 4);
  dws.fill_bytes(0);
  for (cuda::DeviceBuffer* b : {&dmix_a, &dmix_b, &du_a, &du_b, &dq_a, &dq_b, &ds_a, &ds_b}) b->fill_bytes(0xFF);
  const cuda::HcSite site{dfn.as<float>(), dbase.as<float>(), dscale.as<float>()};
  const cuda::bf16* w = weighted ? dw.as<cuda::bf16>() : nullptr;
  uint8_t* q_b = quant_block ? dq_b.as<uint8_t>() : nullptr;
  float* s_b = quant_block ? ds_b.as<float>() : nullptr;

  // The chain (a).
  cuda::hc_site_mix(dX.as<cuda::bf16>(), tokens, hc, hidden, site, eps, hc_eps, iters, dmix_a.as<float>(), dws.get(),
                    nullptr);
  cuda::hc_collapse(dX.as<cuda::bf16>(), dmix_a.as<float>(), tokens, hc, hidden, du_a.as<cuda::bf16>(), nullptr);
  cuda::rms_norm(du_a.as<cuda::bf16>(), w, du_a.as<cuda::bf16>(), tokens, int(hidden), eps, nullptr);
  if (quant_block)
    cuda::fp8_quantize(du_a.as<cuda::bf16>(), dq_a.as<uint8_t>(), ds_a.as<float>(), tokens, int(hidden), quant_block,
                       nullptr);
  // The fused site (b): once on other streams, then on X.
  cuda::hc_site_pre(dXo.as<cuda::bf16>(), tokens, hc, hidden, site, eps, hc_eps, iters, w, dmix_b.as<float>(),
                    du_b.as<cuda::bf16>(), q_b, s_b, quant_block, dws.get(), nullptr);
  cuda::hc_site_pre(dX.as<cuda::bf16>(), tokens, hc, hidden, site, eps, hc_eps, iters, w, dmix_b.as<float>(),
                    du_b.as<cuda::bf16>(), q_b, s_b, quant_block, dws.get(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());

  const std::string shape = " tokens=" + std::to_string(tokens) + " hidden=" + std::to_string(hidden) +
                            (weighted ? "" : " unweighted") + " quant_block=" + std::to_string(quant_block);
  const auto mix_a = cuda::to_host<float>(dmix_a, size_t(tokens * rows)), mix_b = cuda::to_host<float>(dmix_b, size_t(tokens * rows));
  report_exact("hc_site_pre mix vs chain" + shape, bitwise_mismatches(mix_b, mix_a), mix_a.size());
  const auto u_a = cuda::to_host<uint16_t>(du_a, n_u), u_b = cuda::to_host<uint16_t>(du_b, n_u);
  report_exact("hc_site_pre u vs chain" + shape, bitwise_mismatches(u_b, u_a), n_u);
  if (quant_block) {
    const auto q_a = cuda::to_host<uint8_t>(dq_a, n_u), q_bh = cuda::to_host<uint8_t>(dq_b, n_u);
    const auto s_a = cuda::to_host<float>(ds_a, n_s), s_bh = cuda::to_host<float>(ds_b, n_s);
    report_exact("hc_site_pre fp8 codes vs chain" + shape, bitwise_mismatches(q_bh, q_a), n_u);
    report_exact("hc_site_pre fp8 scales vs chain" + shape, bitwise_mismatches(s_bh, s_a), n_s);
  }
  // And the mix against the CPU reference once more (the fused path's own coefficients).
  std::vector<float> mix_ref(size_t(tokens * rows));
  const HcSiteParams params{in.fn.data(), in.base.data(), in.scale.data()};
  for (int64_t t = 0; t < tokens; ++t) {
    const HcMix m = hc_mix(in.X.data() + t * hc * hidden, hc, hidden, params, eps, hc_eps, iters);
    std::copy(m.pre.begin(), m.pre.end(), mix_ref.begin() + t * rows);
    std::copy(m.post.begin(), m.post.end(), mix_ref.begin() + t * rows + hc);
    std::copy(m.comb.begin(), m.comb.end(), mix_ref.begin() + t * rows + 2 * hc);
  }
  check_rel_l2("hc_site_pre mix vs cpu" + shape, mix_b, mix_ref, 1e-4);
}

// The head collapse (session 5: a cluster of 8 blocks per row) against the one-block reference kernel it replaced,
// bitwise, on the same device inputs; and against the CPU (hc_head_pre, then the collapse rounded to bf16).
void run_head(Rng& rng, int rows, int hc, int64_t hidden) {
  const int64_t width = hc * hidden;
  std::vector<float> X(size_t(rows * width));
  for (int r = 0; r < rows; ++r) {
    const float s = std::exp(rng.uniform(-3.0f, 3.0f));
    for (int64_t i = 0; i < width; ++i) X[size_t(r * width + i)] = rng.normal(0.0f, s);
  }
  round_to_bf16(X);
  const std::vector<float> fn = rng.normals(size_t(hc * width), 0.0f, 4.0f / std::sqrt(float(width)));
  const std::vector<float> base = rng.normals(size_t(hc), 0.0f, 1.0f), scale = {rng.uniform(0.5f, 2.0f)};
  const float eps = 1e-6f, hc_eps = 1e-6f;
  cuda::DeviceBuffer dX = cuda::to_device(to_bf16(X)), dfn = cuda::to_device(fn), dbase = cuda::to_device(base),
                     dscale = cuda::to_device(scale), dh_a(size_t(rows * hidden) * 2), dh_b(size_t(rows * hidden) * 2);
  dh_a.fill_bytes(0xFF);
  dh_b.fill_bytes(0xFF);
  cuda::hc_head_collapse_reference(dX.as<cuda::bf16>(), rows, hc, hidden, dfn.as<float>(), dbase.as<float>(),
                                   dscale.as<float>(), eps, hc_eps, dh_a.as<cuda::bf16>(), nullptr);
  cuda::hc_head_collapse(dX.as<cuda::bf16>(), rows, hc, hidden, dfn.as<float>(), dbase.as<float>(),
                         dscale.as<float>(), eps, hc_eps, dh_b.as<cuda::bf16>(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const std::string shape = " rows=" + std::to_string(rows) + " hc=" + std::to_string(hc) +
                            " hidden=" + std::to_string(hidden);
  const auto h_a = cuda::to_host<uint16_t>(dh_a, size_t(rows * hidden));
  const auto h_b = cuda::to_host<uint16_t>(dh_b, size_t(rows * hidden));
  report_exact("hc_head_collapse vs reference kernel" + shape, bitwise_mismatches(h_b, h_a), h_a.size());
  std::vector<float> h_ref(size_t(rows * hidden));
  for (int r = 0; r < rows; ++r) {
    const float* x = X.data() + r * width;
    const std::vector<float> pre = hc_head_pre(x, hc, hidden, fn.data(), base.data(), scale.data(), eps, hc_eps);
    hc_collapse(x, pre, hc, hidden, h_ref.data() + r * hidden);
  }
  check_rel_l2("hc_head_collapse vs cpu" + shape, from_bf16(h_b), h_ref, kBf16OutputBound);
}

// The site kernel (session 5: the Sinkhorn steps in their own warp beside the collapse -> norm -> FP8 tail, the
// one-token mix from staged partials) against the kernel it replaced (mhc_gpu_ref.h), bitwise: hc_site_mix's mix,
// and hc_site_pre's mix, u, codes and scales. Each side runs on a workspace of its own, poisoned outputs.
void run_site_vs_reference(Rng& rng, int64_t tokens, int64_t hidden, float eps, int quant_block) {
  const int hc = 4, rows = (2 + hc) * hc;
  const SiteInputs in = site_inputs(rng, tokens, hidden);
  const float hc_eps = 1e-6f;
  const int iters = 20;
  const size_t n_u = size_t(tokens * hidden), n_s = quant_block ? n_u / size_t(quant_block) : 0;
  cuda::DeviceBuffer dX = cuda::to_device(to_bf16(in.X)), dfn = cuda::to_device(in.fn),
                     dbase = cuda::to_device(in.base), dscale = cuda::to_device(in.scale),
                     dw = cuda::to_device(to_bf16(in.norm_weight));
  const cuda::HcSite site{dfn.as<float>(), dbase.as<float>(), dscale.as<float>()};
  struct Out {
    std::vector<float> mix_only, mix;
    std::vector<uint16_t> u;
    std::vector<uint8_t> q;
    std::vector<float> s;
  };
  auto run = [&](bool reference) {
    cuda::DeviceBuffer ws(cuda::hc_site_mix_workspace_bytes(tokens, hc, hidden)), mix_only(size_t(tokens * rows) * 4),
        mix(size_t(tokens * rows) * 4), u(n_u * 2), q(std::max<size_t>(n_u, 1)), sc(std::max<size_t>(n_s, 1) * 4);
    ws.fill_bytes(0);
    for (cuda::DeviceBuffer* b : {&mix_only, &mix, &u, &q, &sc}) b->fill_bytes(0xFF);
    uint8_t* qp = quant_block ? q.as<uint8_t>() : nullptr;
    float* sp = quant_block ? sc.as<float>() : nullptr;
    auto mix_fn = reference ? cuda::hc_site_mix_reference : cuda::hc_site_mix;
    auto pre_fn = reference ? cuda::hc_site_pre_reference : cuda::hc_site_pre;
    mix_fn(dX.as<cuda::bf16>(), tokens, hc, hidden, site, eps, hc_eps, iters, mix_only.as<float>(), ws.get(), nullptr);
    pre_fn(dX.as<cuda::bf16>(), tokens, hc, hidden, site, eps, hc_eps, iters, dw.as<cuda::bf16>(), mix.as<float>(),
           u.as<cuda::bf16>(), qp, sp, quant_block, ws.get(), nullptr);
    // Twice: the counters were left at zero.
    pre_fn(dX.as<cuda::bf16>(), tokens, hc, hidden, site, eps, hc_eps, iters, dw.as<cuda::bf16>(), mix.as<float>(),
           u.as<cuda::bf16>(), qp, sp, quant_block, ws.get(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    Out o;
    o.mix_only = cuda::to_host<float>(mix_only, size_t(tokens * rows));
    o.mix = cuda::to_host<float>(mix, size_t(tokens * rows));
    o.u = cuda::to_host<uint16_t>(u, n_u);
    o.q = quant_block ? cuda::to_host<uint8_t>(q, n_u) : std::vector<uint8_t>{};
    o.s = quant_block ? cuda::to_host<float>(sc, n_s) : std::vector<float>{};
    return o;
  };
  const Out a = run(true), b = run(false);
  const std::string shape = " tokens=" + std::to_string(tokens) + " hidden=" + std::to_string(hidden) +
                            " quant_block=" + std::to_string(quant_block);
  report_exact("hc_site_mix vs reference kernel" + shape, bitwise_mismatches(b.mix_only, a.mix_only), a.mix_only.size());
  report_exact("hc_site_pre mix vs reference kernel" + shape, bitwise_mismatches(b.mix, a.mix), a.mix.size());
  report_exact("hc_site_pre u vs reference kernel" + shape, bitwise_mismatches(b.u, a.u), a.u.size());
  if (quant_block) {
    report_exact("hc_site_pre fp8 codes vs reference kernel" + shape, bitwise_mismatches(b.q, a.q), a.q.size());
    report_exact("hc_site_pre fp8 scales vs reference kernel" + shape, bitwise_mismatches(b.s, a.s), a.s.size());
  }
}

// hc_expand_site_pre against hc_expand -> hc_site_pre (the previous sublayer's expansion, then the next site): the
// expanded streams, the new mix, u and its codes bit for bit. The previous mix is a plausible one (pre / post in
// (0, 2), comb rows of positive weights), y a sublayer output.
void run_expand_site_pre(Rng& rng, int64_t tokens, int64_t hidden, float eps, int quant_block) {
  const int hc = 4, rows = (2 + hc) * hc;
  const SiteInputs in = site_inputs(rng, tokens, hidden);
  const float hc_eps = 1e-6f;
  const int iters = 20;
  std::vector<float> y(size_t(tokens * hidden)), prev(size_t(tokens * rows));
  for (float& v : y) v = rng.normal(0.0f, 0.5f);
  for (float& v : prev) v = rng.uniform(0.05f, 1.95f);
  const size_t n_x = in.X.size(), n_u = size_t(tokens * hidden), n_s = quant_block ? n_u / size_t(quant_block) : 0;
  cuda::DeviceBuffer dfn = cuda::to_device(in.fn), dbase = cuda::to_device(in.base),
                     dscale = cuda::to_device(in.scale), dw = cuda::to_device(to_bf16(in.norm_weight)),
                     dy = cuda::to_device(to_bf16(y));
  const cuda::HcSite site{dfn.as<float>(), dbase.as<float>(), dscale.as<float>()};
  struct Out {
    std::vector<uint16_t> X, u;
    std::vector<float> mix, s;
    std::vector<uint8_t> q;
  };
  auto run = [&](bool fused) {
    cuda::DeviceBuffer dX = cuda::to_device(to_bf16(in.X)), mix = cuda::to_device(prev),
                       ws(cuda::hc_site_mix_workspace_bytes(tokens, hc, hidden)), u(n_u * 2),
                       q(std::max<size_t>(n_u, 1)), sc(std::max<size_t>(n_s, 1) * 4);
    ws.fill_bytes(0);
    for (cuda::DeviceBuffer* b : {&u, &q, &sc}) b->fill_bytes(0xFF);
    uint8_t* qp = quant_block ? q.as<uint8_t>() : nullptr;
    float* sp = quant_block ? sc.as<float>() : nullptr;
    if (fused) {
      cuda::hc_expand_site_pre(dX.as<cuda::bf16>(), dy.as<cuda::bf16>(), tokens, hc, hidden, site, eps, hc_eps, iters,
                               dw.as<cuda::bf16>(), mix.as<float>(), u.as<cuda::bf16>(), qp, sp, quant_block, ws.get(),
                               nullptr);
    } else {
      cuda::hc_expand(dX.as<cuda::bf16>(), dy.as<cuda::bf16>(), mix.as<float>(), tokens, hc, hidden,
                      dX.as<cuda::bf16>(), nullptr);
      cuda::hc_site_pre(dX.as<cuda::bf16>(), tokens, hc, hidden, site, eps, hc_eps, iters, dw.as<cuda::bf16>(),
                        mix.as<float>(), u.as<cuda::bf16>(), qp, sp, quant_block, ws.get(), nullptr);
    }
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    Out o;
    o.X = cuda::to_host<uint16_t>(dX, n_x);
    o.mix = cuda::to_host<float>(mix, prev.size());
    o.u = cuda::to_host<uint16_t>(u, n_u);
    o.q = quant_block ? cuda::to_host<uint8_t>(q, n_u) : std::vector<uint8_t>{};
    o.s = quant_block ? cuda::to_host<float>(sc, n_s) : std::vector<float>{};
    return o;
  };
  const Out a = run(false), b = run(true);
  const std::string shape = " tokens=" + std::to_string(tokens) + " hidden=" + std::to_string(hidden) +
                            " quant_block=" + std::to_string(quant_block);
  report_exact("hc_expand_site_pre streams vs hc_expand" + shape, bitwise_mismatches(b.X, a.X), a.X.size());
  report_exact("hc_expand_site_pre mix vs hc_site_pre" + shape, bitwise_mismatches(b.mix, a.mix), a.mix.size());
  report_exact("hc_expand_site_pre u vs hc_site_pre" + shape, bitwise_mismatches(b.u, a.u), a.u.size());
  if (quant_block) {
    report_exact("hc_expand_site_pre fp8 codes vs hc_site_pre" + shape, bitwise_mismatches(b.q, a.q), a.q.size());
    report_exact("hc_expand_site_pre fp8 scales vs hc_site_pre" + shape, bitwise_mismatches(b.s, a.s), a.s.size());
  }
}

}  // namespace

TEST(GpuMhc, SiteMatchesReferenceBitwise) {
  DI_SKIP_WITHOUT_GPU();
  // The reference kernels sum the mix on CUDA cores; from 64 tokens the default takes the tensor-core mix,
  // which sums in another order (tests/gpu/test_hc_mix_mma.cpp bounds it), so this comparison pins the CUDA-core mix.
  SwitchScope<bool, cuda::hc_mix_mma, cuda::set_hc_mix_mma> cuda_core_mix(false);
  Rng rng;
  run_site_vs_reference(rng, 1, 4096, 1e-6f, 128);   // V4-Flash decode
  run_site_vs_reference(rng, 2, 5120, 1e-20f, 32);   // V4.1-Flash width
  run_site_vs_reference(rng, 1, 8192, 1e-6f, 0);     // the widest rows (8 vectors per norm thread), no codes
  run_site_vs_reference(rng, 63, 4096, 1e-6f, 128);  // the most tokens of the one-launch path
  run_site_vs_reference(rng, 70, 4096, 1e-6f, 128);  // groups of 4 tokens (mix) and the chain
}

TEST(GpuMhc, HeadCollapseMatchesReferenceBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_head(rng, 1, 4, 4096);  // V4-Flash decode (one stage of 64 steps per cluster block)
  run_head(rng, 3, 4, 7168);  // V4-Pro width (two stages)
  run_head(rng, 80, 4, 4096); // prefill-sized rows
  run_head(rng, 2, 8, 1000);  // widest hc, a ragged last step (width 8000)
  run_head(rng, 2, 1, 4096);  // one stream
  run_head(rng, 2, 3, 10);    // width 30 (not a multiple of 8): the reference kernel runs
}

TEST(GpuMhc, SitePreMatchesChainBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_site_pre(rng, 1, 4096, 1e-6f, true, 128);    // V4-Flash decode: attention site (u and its FP8 codes)
  run_site_pre(rng, 3, 4096, 1e-6f, true, 0);      // FFN site (u only)
  run_site_pre(rng, 5, 5120, 1e-20f, true, 32);    // V4.1-Flash width, rms eps and 32-blocks
  run_site_pre(rng, 2, 1024, 1e-6f, false, 256);   // unweighted norm, widest quantization block
  run_site_pre(rng, 63, 4096, 1e-6f, true, 128);   // the most tokens of the one-launch path
  run_site_pre(rng, 70, 4096, 1e-6f, true, 128);   // the chain of kernels (mix: 4 tokens per block, ragged group)
}

TEST(GpuMhc, SiteMixCollapseExpand) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_site(rng, 3, 4096, 1e-6f);   // V4-Flash
  run_site(rng, 5, 5120, 1e-20f);  // V4.1-Flash (its rms eps)
  run_site(rng, 70, 4096, 1e-6f);  // prefill tiling (4 tokens per block, ragged tail)
}

// Issue 4: the expansion after a sublayer folded into the next site's launch (V4's FFN site at decode).
TEST(GpuMhc, ExpandSitePreMatchesTwoCallsBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_expand_site_pre(rng, 1, 4096, 1e-6f, 0);     // V4-Flash decode, FFN site (u only)
  run_expand_site_pre(rng, 1, 4096, 1e-6f, 128);   // with the FP8 codes
  run_expand_site_pre(rng, 3, 5120, 1e-20f, 32);   // V4.1 width: a chunk's columns inside one stream still
  run_expand_site_pre(rng, 2, 8192, 1e-6f, 0);     // the widest rows: two load batches in the tail
  run_expand_site_pre(rng, 63, 4096, 1e-6f, 0);    // the most tokens of the one-launch path
  run_expand_site_pre(rng, 70, 4096, 1e-6f, 0);    // the two calls themselves
}

// mHC site kernels against layers/mhc/mhc.cpp: the site coefficients (RMS-scaled linear, sigmoid, softmax,
// 20-step Sinkhorn), and collapse / expand given the reference's own coefficients.
#include "cuda/kernels.h"
#include "gpu_test_util.h"
#include "layers/mhc/mhc.h"

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

}  // namespace

TEST(GpuMhc, SiteMixCollapseExpand) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_site(rng, 3, 4096, 1e-6f);   // V4-Flash
  run_site(rng, 5, 5120, 1e-20f);  // V4.1-Flash (its rms eps)
  run_site(rng, 70, 4096, 1e-6f);  // prefill tiling (4 tokens per block, ragged tail)
}

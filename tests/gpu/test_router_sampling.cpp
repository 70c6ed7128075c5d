// Router (sqrt-softplus scores, biased top-k, normalised weights) against layers/moe/routing.cpp, and greedy
// arg-max sampling against the first maximum of each row.
#include <algorithm>
#include <cstring>
#include <limits>

#include "cuda/kernels.h"
#include "gpu_test_util.h"
#include "layers/moe/routing.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

struct RouterCase {
  const char* label;
  int experts, top_k;
  bool bias;
  float temp, eps;
};

void run_router(Rng& rng, const RouterCase& rc, int64_t tokens) {
  std::vector<float> logits(size_t(tokens * rc.experts)), bias(size_t(rc.experts));
  for (float& v : logits) v = rng.normal(0.0f, 2.0f);
  for (float& v : bias) v = rng.normal(0.0f, 0.5f);
  const float route_scale = 1.5f;

  cuda::DeviceBuffer dl = cuda::to_device(logits), db = cuda::to_device(bias),
                     dids(size_t(tokens * rc.top_k) * 4), dw(size_t(tokens * rc.top_k) * 4);
  dids.fill_bytes(0xFF);
  dw.fill_bytes(0xFF);
  cuda::route_topk(dl.as<float>(), rc.bias ? db.as<float>() : nullptr, tokens, rc.experts, rc.top_k, rc.temp, true,
                   rc.eps, route_scale, dids.as<int32_t>(), dw.as<float>(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  auto ids = cuda::to_host<int32_t>(dids, size_t(tokens * rc.top_k));
  auto w = cuda::to_host<float>(dw, size_t(tokens * rc.top_k));

  // The selection is checked as a valid top-k of the reference's own keys rather than id for id: scores that
  // differ in the last fp32 ulp between libm and the device may swap two keys closer than that (tolerance 1e-5,
  // well above an ulp of keys of size ~1, far below the typical gap of ~1e-2 between 256 keys).
  size_t bad_selection = 0, exact_matches = 0;
  std::vector<float> w_ref;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<float> s = sqrt_softplus_scores(logits.data() + t * rc.experts, rc.experts, rc.temp);
    auto key = [&](int e) { return s[size_t(e)] + (rc.bias ? bias[size_t(e)] : 0.0f); };
    std::vector<int> picked(ids.begin() + t * rc.top_k, ids.begin() + (t + 1) * rc.top_k);
    std::vector<int> ref_ids = select_experts(s, rc.bias ? bias.data() : nullptr, rc.top_k);
    exact_matches += picked == ref_ids;
    bool ok = true;
    std::vector<bool> chosen(size_t(rc.experts), false);
    for (size_t j = 0; j < picked.size(); ++j) {
      int e = picked[j];
      ok &= e >= 0 && e < rc.experts && !chosen[size_t(e)];
      if (!ok) break;
      chosen[size_t(e)] = true;
      if (j > 0) ok &= key(e) <= key(picked[j - 1]) + 1e-5f;  // descending order
    }
    if (ok) {
      const float min_key = key(picked.back());
      for (int e = 0; e < rc.experts; ++e) ok &= chosen[size_t(e)] || key(e) <= min_key + 1e-5f;
    }
    bad_selection += !ok;
    if (!ok) picked = ref_ids;  // keep the weight comparison aligned
    Routing r = route_weights(s, picked, true, rc.eps, route_scale);
    w_ref.insert(w_ref.end(), r.weights.begin(), r.weights.end());
  }
  const std::string name = std::string("route_topk ") + rc.label;
  std::printf("GPU_INFO %s identical selections %zu/%lld\n", name.c_str(), exact_matches, (long long)tokens);
  report_exact(name + " valid-topk", bad_selection, size_t(tokens));
  // softplus / sqrt / one division in fp32: a few ulps.
  check_rel_l2(name + " weights", w, w_ref, 1e-5);
}

// route_topk against the per-row code it replaced (session 5: each lane keeps its pick in registers instead of
// reading lane 0's stores back; session 12: branch-free picks on 64-bit integers, routing.cuh select_topk), bitwise:
// ids and weights, with and without normalisation, ties included (logits drawn from a few values, so equal keys are
// common and the lower id must win in both), and special values (`specials`: a few NaN logits, never picked, and
// +-inf logits: infinite keys tie, -inf gives a zero score).
void run_router_vs_reference(Rng& rng, int experts, int top_k, bool with_bias, bool normalize, float eps, int64_t tokens,
                             bool ties, bool specials = false) {
  std::vector<float> logits(static_cast<size_t>(tokens * experts)), bias(static_cast<size_t>(experts));
  for (float& v : logits) {
    v = ties ? float(int(rng.uniform(0.0f, 4.0f))) * 0.5f : rng.normal(0.0f, 2.0f);
    const float u = rng.uniform(0.0f, 1.0f);
    if (specials && u < 0.03f) v = std::numeric_limits<float>::quiet_NaN();
    else if (specials && u < 0.05f) v = std::numeric_limits<float>::infinity();
    else if (specials && u < 0.08f) v = -std::numeric_limits<float>::infinity();
  }
  for (float& v : bias) v = ties ? 0.0f : rng.normal(0.0f, 0.5f);
  const float route_scale = 2.5f;
  cuda::DeviceBuffer dl = cuda::to_device(logits), db = cuda::to_device(bias), ids_a(size_t(tokens * top_k) * 4),
                     ids_b(size_t(tokens * top_k) * 4), w_a(size_t(tokens * top_k) * 4), w_b(size_t(tokens * top_k) * 4);
  for (cuda::DeviceBuffer* b : {&ids_a, &ids_b, &w_a, &w_b}) b->fill_bytes(0xFF);
  const float* bp = with_bias ? db.as<float>() : nullptr;
  cuda::route_topk_reference(dl.as<float>(), bp, tokens, experts, top_k, 1.0f, normalize, eps, route_scale,
                             ids_a.as<int32_t>(), w_a.as<float>(), nullptr);
  cuda::route_topk(dl.as<float>(), bp, tokens, experts, top_k, 1.0f, normalize, eps, route_scale, ids_b.as<int32_t>(),
                   w_b.as<float>(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const size_t n = size_t(tokens * top_k);
  const auto ia = cuda::to_host<int32_t>(ids_a, n), ib = cuda::to_host<int32_t>(ids_b, n);
  const auto wa = cuda::to_host<uint32_t>(w_a, n), wb = cuda::to_host<uint32_t>(w_b, n);
  size_t id_diff = 0, w_diff = 0;
  for (size_t i = 0; i < n; ++i) {
    id_diff += ia[i] != ib[i];
    w_diff += wa[i] != wb[i];
  }
  const std::string name = "route_topk vs reference " + std::to_string(experts) + "x" + std::to_string(top_k) +
                           (with_bias ? " bias" : "") + (normalize ? " normalized" : "") + (ties ? " ties" : "") +
                           (specials ? " nan/inf" : "");
  report_exact(name + " ids", id_diff, n);
  report_exact(name + " weights", w_diff, n);
}

}  // namespace

TEST(GpuRouter, TopKMatchesReferenceBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_router_vs_reference(rng, 256, 6, true, true, 0.0f, 67, false);    // V4
  run_router_vs_reference(rng, 384, 6, true, true, 1e-20f, 45, false);  // V4.1
  run_router_vs_reference(rng, 128, 3, false, false, 0.0f, 9, false);   // no bias, no normalisation
  run_router_vs_reference(rng, 256, 16, true, true, 0.0f, 33, true);    // widest top-k, many equal keys
  run_router_vs_reference(rng, 1024, 8, false, true, 0.0f, 5, true);    // the most experts (32 per lane)
  run_router_vs_reference(rng, 256, 6, true, true, 0.0f, 64, false, true);  // NaN / inf logits
  run_router_vs_reference(rng, 384, 6, true, true, 1e-20f, 64, true, true);
}

TEST(GpuRouter, SqrtSoftplusTopK) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_router(rng, {"v4 256x6", 256, 6, true, 1.0f, 0.0f}, 67);
  run_router(rng, {"v41 384x6", 384, 6, true, 1.0f, 1e-20f}, 45);
  run_router(rng, {"no-bias 128x3", 128, 3, false, 1.0f, 0.0f}, 9);  // DSpark draft MoE size
}

TEST(GpuSampling, GreedyArgmax) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  for (int64_t vocab : {int64_t(129280), int64_t(1001)}) {
    const int64_t rows = 6;
    std::vector<float> logits(size_t(rows * vocab));
    for (float& v : logits) v = rng.normal(0.0f, 3.0f);
    // Row 1: a tie between two maxima (the lower index wins); row 2: the maximum in the last element.
    const int64_t a = rng.integer(0, int(vocab / 2)), b = a + 1 + rng.integer(0, int(vocab / 2) - 2);
    logits[size_t(vocab + a)] = logits[size_t(vocab + b)] = 100.0f;
    logits[size_t(2 * vocab + vocab - 1)] = 100.0f;
    std::vector<int32_t> ref(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      ref[size_t(r)] = int32_t(std::max_element(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab) -
                               (logits.begin() + r * vocab));
    cuda::DeviceBuffer dl = cuda::to_device(logits), dout(size_t(rows) * 4);
    dout.fill_bytes(0xFF);
    cuda::argmax_rows(dl.as<float>(), rows, vocab, dout.as<int32_t>(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    auto out = cuda::to_host<int32_t>(dout, size_t(rows));
    size_t bad = 0;
    for (int64_t r = 0; r < rows; ++r) bad += out[size_t(r)] != ref[size_t(r)];
    report_exact("argmax vocab=" + std::to_string(vocab), bad, size_t(rows));
  }
}

namespace deepinfer::gputest {
namespace {

// The device bitmask (structured output, issue 6) against the definition: a logit survives iff its bit is set and
// its id is below the mask's vocabulary (the tokenizer's, which can be smaller than the model's padded one); rows
// not named keep every logit; surviving logits are untouched bit for bit.
TEST(GpuSampling, TokenBitmask) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  const int64_t vocab = 129280, mask_vocab = 128815, words = (mask_vocab + 31) / 32;
  const int rows_total = 5;
  const std::vector<int32_t> rows{0, 3, 4};  // rows 1 and 2 are not masked
  std::vector<float> logits(size_t(rows_total * vocab));
  for (float& v : logits) v = rng.normal(0.0f, 2.0f);
  std::vector<uint32_t> masks(rows.size() * size_t(words));
  for (size_t i = 0; i < masks.size(); ++i)
    masks[i] = i < size_t(words) ? uint32_t(rng.engine()()) : (i < 2 * size_t(words) ? 0u : 0xFFFFFFFFu);
  std::vector<float> ref = logits;
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t v = 0; v < vocab; ++v) {
      const bool allowed = v < mask_vocab && ((masks[i * size_t(words) + size_t(v >> 5)] >> (v & 31)) & 1u);
      if (!allowed) ref[size_t(rows[i] * vocab + v)] = -INFINITY;
    }
  cuda::DeviceBuffer dl = cuda::to_device(logits), dr = cuda::to_device(rows), dm = cuda::to_device(masks);
  cuda::apply_token_bitmask(dl.as<float>(), vocab, dr.as<int32_t>(), int(rows.size()), dm.as<uint32_t>(), words,
                            mask_vocab, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> out = cuda::to_host<float>(dl, logits.size());
  size_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) bad += std::memcmp(&out[i], &ref[i], sizeof(float)) != 0;
  report_exact("token bitmask (random, all-zero, all-one masks; unmasked rows untouched)", bad, out.size());
}

}  // namespace
}  // namespace deepinfer::gputest

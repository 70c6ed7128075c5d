// Whether Hopper's FP8 tensor path sums 32 products of e2m1 values exactly (cuda/wgmma_probe.h). The index scores on
// the tensor cores (docs/status.md, issue 4 "Open leads" F) need it: queries and keys are e2m1 codes times a power
// of two per 32 channels (model-spec §3, §4), so a 32-channel block's dot product is a multiple of 0.25 (times the
// scales) of magnitude <= 32 x 36 = 1152: 13 significant bits. The MXFP4 stream's e2m1 x e4m3 products need more
// than the ~14 bits the path keeps (bench/gpu/NOTES.md, the FP4 wgmma stream's "Numerics"); these need at most 13.
// Expected values: the exact sums in double (every product and partial sum is exact there), which fp32 holds.
#include <array>
#include <cmath>

#include "core/dtype.h"
#include "cuda/device.h"
#include "cuda/wgmma_probe.h"
#include "gpu_test_util.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

constexpr int kRows = 64, kCols = 8, kK = 32;

// The e2m1 values: 0 and +-{0.5, 1, 1.5, 2, 3, 4, 6}.
constexpr std::array<float, 8> kMagnitudes = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

struct Trials {
  int count = 0;
  std::vector<float> a, b;  // [count, 64, 32], [count, 8, 32]: e2m1 values
  explicit Trials(int n) : count(n), a(size_t(n) * kRows * kK), b(size_t(n) * kCols * kK) {}
  float& at(int t, int r, int k) { return a[(size_t(t) * kRows + r) * kK + k]; }
  float& bt(int t, int n, int k) { return b[(size_t(t) * kCols + n) * kK + k]; }
  float at(int t, int r, int k) const { return a[(size_t(t) * kRows + r) * kK + k]; }
  float bt(int t, int n, int k) const { return b[(size_t(t) * kCols + n) * kK + k]; }
};

// Runs the trials on the GPU; returns the outputs that differ from the exact sums (printing the first few).
size_t mismatches(const Trials& trials, const std::string& name) {
  std::vector<uint8_t> a8(trials.a.size()), b8(trials.b.size());
  for (size_t i = 0; i < a8.size(); ++i) a8[i] = float_to_e4m3(trials.a[i]);
  for (size_t i = 0; i < b8.size(); ++i) b8[i] = float_to_e4m3(trials.b[i]);
  cuda::DeviceBuffer da(a8.size()), db(b8.size()), dd(size_t(trials.count) * kRows * kCols * sizeof(float));
  da.upload(a8.data(), a8.size());
  db.upload(b8.data(), b8.size());
  dd.fill_bytes(0xFF);
  cuda::wgmma_e4m3_block_dots(da.as<uint8_t>(), db.as<uint8_t>(), dd.as<float>(), trials.count, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> d(size_t(trials.count) * kRows * kCols);
  dd.download(d.data(), d.size() * sizeof(float));

  size_t bad = 0;
  double worst = 0;
  for (int t = 0; t < trials.count; ++t)
    for (int r = 0; r < kRows; ++r)
      for (int n = 0; n < kCols; ++n) {
        double exact = 0;
        for (int k = 0; k < kK; ++k) exact += double(trials.at(t, r, k)) * trials.bt(t, n, k);
        const float got = d[(size_t(t) * kRows + r) * kCols + n];
        if (double(got) == exact) continue;
        worst = std::max(worst, std::fabs(double(got) - exact));
        if (bad++ < 8)
          std::printf("  %s trial %d row %d col %d: wgmma %.9g, exact %.9g\n", name.c_str(), t, r, n, got, exact);
      }
  if (bad) std::printf("  %s: largest |wgmma - exact| %.6g\n", name.c_str(), worst);
  report_exact("wgmma e2m1 block sums " + name, bad, d.size());
  return bad;
}

float random_value(Rng& rng) {
  const float m = kMagnitudes[size_t(rng.integer(0, 7))];
  return rng.integer(0, 1) ? -m : m;
}

}  // namespace

// Values drawn uniformly from the 15 e2m1 values.
TEST(GpuWgmmaExactness, E2m1BlockSumsUniform) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  Trials trials(2048);
  for (float& v : trials.a) v = random_value(rng);
  for (float& v : trials.b) v = random_value(rng);
  mismatches(trials, "uniform");
}

// Mostly +-6 (products +-36) with a few +-0.5 (products down to 0.25): large running sums with the finest terms, the
// case a sum kept to fewer than 13 bits rounds.
TEST(GpuWgmmaExactness, E2m1BlockSumsLargeWithFineTerms) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  Trials trials(2048);
  auto draw = [&] {
    const float m = rng.integer(0, 9) == 0 ? 0.5f : 6.0f;
    return rng.integer(0, 1) ? -m : m;
  };
  for (float& v : trials.a) v = draw();
  for (float& v : trials.b) v = draw();
  mismatches(trials, "large with fine terms");
}

// Crafted: B's column n is 6 everywhere but 0.5 at K = 4n + 1; A's row r is 6 everywhere (rows 0-31) or +-6
// alternating (rows 32-63), but 0.5 at K = r % 32. So every K position of the one 0.25 product occurs, beside 31
// products of 36 of one sign (sum 1116.25) or of alternating signs (+-36 + 0.25 after cancellation), and rows whose
// 0.5 misses the column's: 30 products of 36 and two of 3. One more trial of whole rows and columns: -6 . 6
// (-1152, the largest magnitude), -6 . 0.5 (-96), 0.5 . 6 (96) and 0.5 . 0.5 (8).
TEST(GpuWgmmaExactness, E2m1BlockSumsCrafted) {
  DI_SKIP_WITHOUT_GPU();
  Trials trials(2);
  for (int n = 0; n < kCols; ++n)
    for (int k = 0; k < kK; ++k) trials.bt(0, n, k) = k == 4 * n + 1 ? 0.5f : 6.0f;
  for (int r = 0; r < kRows; ++r)
    for (int k = 0; k < kK; ++k)
      trials.at(0, r, k) = k == r % 32 ? 0.5f : (r < 32 || k % 2 == 0 ? 6.0f : -6.0f);
  for (int n = 0; n < kCols; ++n)
    for (int k = 0; k < kK; ++k) trials.bt(1, n, k) = n < 4 ? 6.0f : 0.5f;
  for (int r = 0; r < kRows; ++r)
    for (int k = 0; k < kK; ++k) trials.at(1, r, k) = r < 32 ? -6.0f : 0.5f;
  mismatches(trials, "crafted");
}

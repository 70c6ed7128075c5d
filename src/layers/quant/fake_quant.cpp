#include "layers/quant/fake_quant.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"

namespace deepinfer {

namespace {
float block_amax(const float* x, int block) {
  float amax = 0;
  for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}
}  // namespace

void fp8_fake_quant(float* x, int64_t n, int block) {
  DI_CHECK(block > 0 && n % block == 0, "fp8_fake_quant: width " + std::to_string(n) +
                                            " is not a multiple of the block " + std::to_string(block));
  for (int64_t b = 0; b < n; b += block) {
    float scale = pow2_ceil(std::max(block_amax(x + b, block), 1e-4f) / 448.0f);
    for (int i = 0; i < block; ++i) x[b + i] = round_e4m3(x[b + i] / scale) * scale;
  }
}

void fp8_fake_quant_ragged(float* x, int64_t n, int block) {
  for (int64_t b = 0; b < n; b += block) {
    int width = int(std::min<int64_t>(block, n - b));
    fp8_fake_quant(x + b, width, width);
  }
}

void fp4_fake_quant(float* x, int64_t n, int block, Fp4Scale scale_kind) {
  DI_CHECK(block > 0 && n % block == 0, "fp4_fake_quant: width " + std::to_string(n) +
                                            " is not a multiple of the block " + std::to_string(block));
  for (int64_t b = 0; b < n; b += block) {
    float amax = block_amax(x + b, block);
    float scale = scale_kind == Fp4Scale::UE8M0 ? pow2_ceil(std::max(amax, 6.0f * std::ldexp(1.0f, -126)) / 6.0f)
                                                : round_e4m3(std::max(amax, 6.0f * std::ldexp(1.0f, -9)) / 6.0f);
    for (int i = 0; i < block; ++i) x[b + i] = round_e2m1(x[b + i] / scale) * scale;
  }
}

void hadamard_transform(float* x, int64_t n) {
  DI_CHECK(n > 0 && (n & (n - 1)) == 0, "hadamard_transform: width " + std::to_string(n) + " is not a power of two");
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t i = 0; i < n; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  float s = 1.0f / std::sqrt(float(n));
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace deepinfer

// The cache quantize-dequantize formats (model-spec.md §2, §4) against NeMo Automodel's `quantize_cache` on vectors
// made by tools/fixtures/make_quant_vectors.py: Gaussian rows over 24 binary orders of magnitude, exact rounding
// ties, zero rows, and block maxima on and one ulp around scale boundaries. Results must be bit-identical.
#include <gtest/gtest.h>

#include <cstring>

#include "fixture_vectors.h"
#include "layers/quant/fake_quant.h"

using namespace deepinfer;

namespace {

struct Vectors {
  Checkpoint file = golden::open_fixture_vectors("quant_vectors.safetensors");

  std::vector<float> f32(const std::string& name, std::vector<int64_t>* shape) const {
    return golden::fixture_elements<float>(file, name, shape);
  }
  int block(const std::string& fmt) const { return int(golden::fixture_elements<int64_t>(file, fmt + ".block")[0]); }
};

// Applies `quantize` row by row and counts elements that differ from the reference in their bit pattern.
template <typename Quantize>
void expect_bit_identical(const std::string& fmt, Quantize quantize) {
  Vectors v;
  std::vector<int64_t> shape;
  std::vector<float> x = v.f32(fmt + ".input", &shape);
  std::vector<float> expected = v.f32(fmt + ".output", &shape);
  int64_t rows = shape[0], width = shape[1];
  int block = v.block(fmt);
  int64_t mismatches = 0;
  for (int64_t r = 0; r < rows; ++r) {
    quantize(x.data() + r * width, width, block);
    for (int64_t i = 0; i < width; ++i) {
      size_t k = size_t(r * width + i);
      if (std::memcmp(&x[k], &expected[k], 4) != 0) {
        if (mismatches++ < 5)
          ADD_FAILURE() << fmt << " row " << r << " col " << i << ": ours " << x[k] << " reference " << expected[k];
      }
    }
  }
  std::printf("[golden] quant %-6s %lld values, %lld bit mismatches\n", fmt.c_str(), (long long)(rows * width),
              (long long)mismatches);
  EXPECT_EQ(mismatches, 0);
}

TEST(CacheQuantGolden, Fp8WindowKv) {
  expect_bit_identical("fp8", [](float* x, int64_t n, int block) { fp8_fake_quant(x, n, block); });
}

TEST(CacheQuantGolden, Mxfp4IndexKeys) {
  expect_bit_identical("mxfp4", [](float* x, int64_t n, int block) { fp4_fake_quant(x, n, block, Fp4Scale::UE8M0); });
}

TEST(CacheQuantGolden, Nvfp4CompressedKv) {
  expect_bit_identical("nvfp4", [](float* x, int64_t n, int block) { fp4_fake_quant(x, n, block, Fp4Scale::E4M3); });
}

}  // namespace

// V4.1 forward in "reference mode" (cache fake-quant off) against NeMo Automodel's logits recorded with its
// quantize_cache replaced by the identity (`prefill_logits_no_fake_quant`, tools/fixtures/NOTES.md). With the
// fake quant on, float noise flips FP8/FP4 rounding decisions and exact FP4 score ties are broken by
// torch.topk's unspecified order, so the smooth reference is the one a tight tolerance can hold against.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "model/checkpoint.h"
#include "model/model.h"
#include "model/weight_formats.h"

namespace deepinfer {
namespace {
namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(DEEPINFER_SOURCE_DIR) / "tests/golden/fixtures";

class V41ReferenceMode : public ::testing::TestWithParam<std::string> {};

TEST_P(V41ReferenceMode, PrefillMatchesNemoWithoutFakeQuant) {
  const fs::path dir = kFixtures / GetParam();
  if (!fs::exists(dir / "reference.safetensors")) GTEST_SKIP() << "fixture " << GetParam() << " is not present";
  Checkpoint ref = Checkpoint::open_file((dir / "reference.safetensors").string());
  if (!ref.has("prefill_logits_no_fake_quant")) GTEST_SKIP() << "no prefill_logits_no_fake_quant recorded";
  const TensorEntry& ids_entry = ref.get("prompt_ids");
  std::vector<int64_t> ids64 = read_int_table(ref, "prompt_ids", ids_entry.shape);
  std::vector<int32_t> ids(ids64.begin(), ids64.end());

  ModelOptions o;
  o.show_progress = false;
  o.numerics = {/*quantize_cache=*/false, /*quantize_activations=*/false, /*bf16_activations=*/false};
  std::unique_ptr<Model> model = load_model(dir.string(), o);
  const int64_t vocab = model->config().vocab_size, T = int64_t(ids.size());
  Tensor expected = read_dense(ref, "prefill_logits_no_fake_quant", {T, vocab});
  auto seq = model->new_sequence();
  Tensor got = model->forward(*seq, ids);

  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    double num = 0, den = 0;
    int64_t arg_got = 0, arg_exp = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      double d = double(got.row(t)[v]) - expected.row(t)[v];
      num += d * d;
      den += double(expected.row(t)[v]) * expected.row(t)[v];
      if (got.row(t)[v] > got.row(t)[arg_got]) arg_got = v;
      if (expected.row(t)[v] > expected.row(t)[arg_exp]) arg_exp = v;
    }
    worst = std::max(worst, std::sqrt(num / den));
    EXPECT_EQ(arg_got, arg_exp) << "position " << t;
  }
  std::printf("[v41 reference mode] %s prefill worst row rel_l2 %.3e\n", GetParam().c_str(), worst);
  EXPECT_LE(worst, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, V41ReferenceMode, ::testing::Values("v41_tiny", "v41_wide", "v41_engram"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace deepinfer

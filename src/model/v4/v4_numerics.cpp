#include "model/v4/v4_numerics.h"

#include "core/dtype.h"
#include "layers/quant/fake_quant.h"

namespace deepinfer {

void v4_quantize_kv_row(float* kv, int64_t head_dim, int rope_dim, const V4Numerics& n) {
  if (!n.quantize_cache) return;
  int64_t nope = head_dim - rope_dim;
  fp8_fake_quant_ragged(kv, nope, kV4KvFp8Block);
  for (int64_t d = nope; d < head_dim; ++d) kv[d] = round_bf16(kv[d]);
}

std::vector<float> v4_gemm_input(const float* x, int64_t n, const V4Numerics& numerics) {
  std::vector<float> v(x, x + n);
  if (numerics.quantize_activations) fp8_fake_quant_ragged(v.data(), n, numerics.activation_block);
  return v;
}

void v4_maybe_bf16(float* x, int64_t n, const V4Numerics& numerics) {
  if (!numerics.bf16_activations) return;
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

}  // namespace deepinfer

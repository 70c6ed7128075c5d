#include "layers/compressor/csa2_compressor.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/linalg.h"
#include "layers/norm_rope/rms_norm.h"

namespace deepinfer {

bool csa2_compress_token(const Csa2CompressorWeights& w, const float* x, Csa2PartialGroup& partial, float norm_eps,
                         bool round_bf16, float* latent) {
  const int64_t hidden = w.wkv.dim(1), head_dim = w.wkv.dim(0);
  const size_t filled = size_t(partial.filled);
  partial.kv.resize((filled + 1) * size_t(head_dim));
  matmul_nt(x, 1, hidden, w.wkv.ptr(), head_dim, partial.kv.data() + filled * size_t(head_dim));
  if (w.ratio > 1) {
    partial.score.resize((filled + 1) * size_t(head_dim));
    matmul_nt(x, 1, hidden, w.wgate.ptr(), head_dim, partial.score.data() + filled * size_t(head_dim));
  }
  if (++partial.filled < w.ratio) return false;

  if (w.ratio == 1) {
    // model-spec §4: ratio 1 has no gate; the token's projection is the entry.
    std::copy(partial.kv.begin(), partial.kv.begin() + head_dim, latent);
  } else {
    // Channelwise softmax over the `ratio` rows of the group, then the gated sum (fp32).
    for (int64_t c = 0; c < head_dim; ++c) {
      float mx = -INFINITY;
      for (int r = 0; r < w.ratio; ++r) mx = std::max(mx, partial.score[size_t(r * head_dim + c)]);
      double den = 0, num = 0;
      for (int r = 0; r < w.ratio; ++r) {
        double e = std::exp(double(partial.score[size_t(r * head_dim + c)]) - mx);
        den += e;
        num += e * partial.kv[size_t(r * head_dim + c)];
      }
      latent[c] = float(num / den);
    }
    if (round_bf16)
      for (int64_t c = 0; c < head_dim; ++c) latent[c] = deepinfer::round_bf16(latent[c]);
  }
  rms_norm(latent, w.norm.ptr(), head_dim, norm_eps, latent);
  partial.kv.clear();
  partial.score.clear();
  partial.filled = 0;
  return true;
}

}  // namespace deepinfer

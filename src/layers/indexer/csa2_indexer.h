// The V4.1 CSA2 indexer, model-spec.md §4 "Indexer (index sources)": index keys derived from the Full
// layer's compressed latent, index queries from the attention's q latent, relu-weighted head scores over
// the group's shared keys, the candidate-block mask of the candidate source, and the top-k selection.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "layers/norm_rope/rope.h"

namespace deepinfer {

struct Csa2IndexerWeights {
  Tensor wq_b;          // [index_heads * index_head_dim, q_lora_rank]
  Tensor weights_proj;  // [index_heads, hidden]
  Tensor wk;            // [index_head_dim, head_dim]: Full layers only (they own the keys)
  Tensor k_norm;        // [index_head_dim]: Full layers only
  int heads = 0;
  int head_dim = 0;
};

// Index key of one compressed entry: k_norm(wk latent) -> RoPE at the group's first position -> MXFP4
// (block 32, ue8m0) when `quantize` (model-spec §4 "Compressor" (a)).
void csa2_index_key(const Csa2IndexerWeights& w, const float* latent, const Rope& rope, int64_t group_start,
                    float norm_eps, bool quantize, float* key);

// score(s) = sum_h w_h * relu(q_h . k_s) for the first `n_visible` keys (keys [n, index_head_dim] rows).
// q_latent [q_lora_rank] is the normalised q latent, x [hidden] the attention input, pos the query position;
// queries rotate with the layer's rope and are MXFP4-quantized when `quantize`.
std::vector<float> csa2_index_scores(const Csa2IndexerWeights& w, const float* q_latent, const float* x, int64_t pos,
                                     const Rope& rope, bool quantize, const float* keys, int64_t n_visible);

// The candidate source's block mask (model-spec §4): block score = max over `block_size` consecutive
// entries, the block holding the newest visible entry forced in, the best `topk_blocks` blocks kept.
// Returns one flag per visible entry.
std::vector<uint8_t> select_candidate_blocks(const std::vector<float>& scores, int block_size, int topk_blocks);

// The `topk` best entries by score (restricted to `allowed` when given), ascending by position. Entries
// whose score is -inf are never selected, so fewer than `topk` may come back.
std::vector<int64_t> select_index_topk(const std::vector<float>& scores, const std::vector<uint8_t>* allowed,
                                       int topk);

}  // namespace deepinfer

// The V4.1 CSA2 compressor of a KV-source ("Full") layer on the GPU (model-spec.md §4 "Compressor (KV sources
// only)", §6 "compressor partial state"): the CUDA twin of csa2_compress_token plus the entry finish of
// V41Model::update_caches (the compressed-KV entry and the index key csa2_index_key), with the official
// numerics (bf16 cast of the pooled value, cache fake-quant).
//
// A step hands over `rows` token rows; row r belongs to sequence slot slots[r] at position positions[r]. A slot
// appears in several rows of one call only as a run of consecutive rows with consecutive positions (a prefill
// chunk), and its positions across calls arrive in order without gaps, starting at 0 (the contract of V4's
// compressor_push). Every closed group writes one entry to each of two paged pools that share the slot's page
// table layout (entry e of a slot is group e, at RoPE position e * ratio):
//   kv_out   [., dim]        RoPE on the last rope_dim channels, then FP4 (e2m1) with one e4m3 scale per 16;
//   key_out  [., index_dim]  k_norm(wk . latent), RoPE, then FP4 with one ue8m0 scale per 32 (no Hadamard: V4.1).
// Both are stored as bf16 numbers: an e2m1 value times an e4m3 or power-of-two scale has at most 6 significant
// bits, so the bf16 copy is exact. The KV entry may instead be stored as the packed 288-byte FP4 record of
// model-spec §6 (Csa2EntryFinish::kv_format Fp4: kv_out.records, layers/attention/kv_record.h kvrec41; decodes to
// the same values); the index keys' 68-byte MXFP4 record is the indexer's business.
#pragma once

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels.h"
#include "layers/compressor/compressor_gpu.h"

namespace deepinfer::cuda {

// model-spec §4: compressed KV is FP4 with e4m3 scales per 16 values; index keys FP4 with ue8m0 scales per 32
// (kIndexFp4Block, compressor_gpu.h).
constexpr int kCsa2KvFp4Block = 16;

struct Csa2CompressorGpu {
  const bf16* wkv = nullptr;     // [dim, hidden] (bf16 on disk)
  const bf16* wgate = nullptr;   // [dim, hidden], ratio 2 only (ratio 1 has no gate)
  const float* norm = nullptr;   // [dim]: compressor.norm
  const bf16* wk = nullptr;      // [index_dim, dim]: indexer.wk of the same Full layer
  const float* k_norm = nullptr;  // [index_dim]: indexer.k_norm
  int ratio = 0;                 // 1 or 2
  int dim = 0;                   // head_dim (512)
  int index_dim = 0;             // index_head_dim (128)
  int64_t hidden = 0;
};

struct Csa2EntryFinish {
  const float* inv_freq = nullptr;  // [rope_dim / 2] device copy of the layer's Rope::inv_freq() (YaRN)
  int rope_dim = 0;
  float norm_eps = 0.0f;            // rms_norm_eps of compressor.norm and k_norm
  KvFormat kv_format = KvFormat::Bf16;  // the KV entry: bf16 values into kv_out.pool, or Fp4 records into .records
};

// Per-slot partial group (ratio 2 only; ratio 1 closes a group on every row): the projected rows of the group
// still open, fp32, row p of a slot at index p % ratio. A slot starting a new sequence (position 0) needs no
// reset: only positions of the current sequence are ever read back.
struct Csa2CompressorGpuState {
  float* open_kv = nullptr;    // [slots, ratio, dim]
  float* open_gate = nullptr;  // [slots, ratio, dim]
};

size_t csa2_compressor_state_floats(const Csa2CompressorGpu& w, int slots);  // per array; 0 for ratio 1
size_t csa2_compressor_workspace_bytes(int rows, const Csa2CompressorGpu& w);

// Projects every row (cuBLAS bf16 GEMMs, fp32 out) and, for each row whose position closes a group
// ((pos + 1) % ratio == 0), forms the latent: ratio 2 pools the group with a channelwise softmax of the gates
// (double, as the CPU reference) and rounds it to bf16; ratio 1 takes the projection as it is. Then
// latent = compressor.norm(latent) (fp32, not rounded), and from it the index key and the KV entry above, both
// rotated at the group's first position. Rows of the same call that belong to one slot read their predecessors
// from this call's projections, older ones from the state; afterwards the rows of groups still open are saved.
// x [rows, hidden] bf16 is the normalised attention input; slots / positions [rows] device arrays.
// Stream-ordered, no synchronization, graph-capturable (launch sizes depend on `rows` only).
void csa2_compressor_push(const bf16* x, const int32_t* slots, const int32_t* positions, int rows,
                          const Csa2CompressorGpu& w, const Csa2CompressorGpuState& state,
                          const Csa2EntryFinish& finish, const PagedPool& kv_out, const PagedPool& key_out,
                          void* workspace, cublasHandle_t blas, cudaStream_t stream);

}  // namespace deepinfer::cuda

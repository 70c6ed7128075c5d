// The V4 KV compressor on the GPU (model-spec.md §3 "Compressor", §6 "compressor partial state"), the CUDA
// twin of v4_compressor_push plus the entry finish of update_compressed_caches (v4_attention.cpp) and of
// lightning_index_key, with the official numerics only (bf16 casts, cache fake-quant).
//
// A step hands over `rows` token rows; row r belongs to sequence slot slots[r] at position positions[r]. A slot
// appears in several rows of one call only as a run of consecutive rows with consecutive positions (a prefill
// chunk), and its positions across calls arrive in order without gaps, starting at 0. Compressed entries go to
// paged device pools.
#pragma once

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels.h"

namespace deepinfer::cuda {

// model-spec §3: the KV cache keeps the nope channels in FP8 with one ue8m0 scale per 64 (v4_numerics.h
// kV4KvFp8Block); index keys and queries are FP4 with one ue8m0 scale per 32 (lightning_indexer.cpp).
constexpr int kKvFp8Block = 64;
constexpr int kIndexFp4Block = 32;

// Entry e of slot s is row  page_table[s * max_pages + e / page_size] * page_size + e % page_size  of `pool`
// (rows of `width` bf16), or of `records` (packed FP8 records of kvrec::kRowBytes, layers/attention/kv_record.h;
// EntryFormat::KvFp8Record writes there, `pool` unused). A negative page id or e / page_size >= max_pages means
// "no page": nothing is written.
struct PagedPool {
  bf16* pool = nullptr;
  const int32_t* page_table = nullptr;  // [slots, max_pages]
  int max_pages = 0;
  int page_size = 0;
  int width = 0;
  uint8_t* records = nullptr;
};

struct CompressorGpu {
  const bf16* wkv = nullptr;    // [series * dim, hidden] (bf16 on disk)
  const bf16* wgate = nullptr;  // [series * dim, hidden]
  const float* ape = nullptr;   // [ratio, series * dim]: gate bias by position inside the group
  const float* norm = nullptr;  // [dim]: RMSNorm weight of the pooled entry
  int ratio = 0;
  int dim = 0;
  bool overlap = false;  // CSA layout: series Ca | Cb, entry w pools Ca of group w-1 and Cb of group w
  int64_t hidden = 0;
  int series() const { return overlap ? 2 : 1; }
  // The projected rows a later call may still need: the 2 * ratio rows of the window that entry w pools when
  // overlapping (Ca of group w-1, Cb of group w), else the ratio rows of the open group.
  int ring_rows() const { return overlap ? 2 * ratio : ratio; }
};

enum class EntryFormat {
  KvFp8,        // v4_quantize_kv_row: FP8 nope channels (ragged blocks of 64, ue8m0), the rope channels bf16
  IndexFp4,     // lightning_index_key: Hadamard over the whole entry, then FP4 (ue8m0, block 32)
  KvFp8Record,  // KvFp8's codes and scales as the packed record (kv_record.h: dim 512, rope_dim 64) in out.records
};

struct EntryFinish {
  const float* inv_freq = nullptr;  // [rope_dim / 2] device copy of the layer's Rope::inv_freq()
  int rope_dim = 0;
  EntryFormat format = EntryFormat::KvFp8;
  float norm_eps = 0.0f;
};

// Per-slot partial state: a ring of the last ring_rows() projected rows (kv, and gate with ape added, fp32),
// row p of a slot at ring index p % ring_rows(). A slot starting a new sequence (position 0) needs no reset:
// only positions of the current sequence are ever read back.
struct CompressorGpuState {
  float* ring_kv = nullptr;    // [slots, ring_rows, series * dim]
  float* ring_gate = nullptr;  // [slots, ring_rows, series * dim]
};

size_t compressor_state_floats(const CompressorGpu& w, int slots);  // per array
size_t compressor_workspace_bytes(int rows, const CompressorGpu& w);

// Projects every row (cuBLAS bf16 GEMMs, fp32 out, gate += ape[pos % ratio]) and, for each row whose position
// closes a group ((pos + 1) % ratio == 0), pools the group (fp32 softmax over the rows per channel), rounds to
// bf16, RMS-normalises with `norm` (fp32), applies RoPE at the group's first position (entry
// e = (pos + 1) / ratio - 1, position e * ratio) on the last rope_dim channels, applies the entry format and
// writes it as bf16 into `out` (exact: the fake-quantized values are bf16 numbers), or for KvFp8Record the record
// of the same codes and scales into out.records. Then saves the rows the
// next calls need into the ring. Rows of the same call that belong to one slot read their predecessors from
// this call's projections, older ones from the ring. x [rows, hidden] bf16 is the normalised attention input.
// Device arrays slots / positions [rows]. Stream-ordered, no synchronization.
void compressor_push(const bf16* x, const int32_t* slots, const int32_t* positions, int rows, const CompressorGpu& w,
                     const CompressorGpuState& state, const EntryFinish& finish, const PagedPool& out,
                     void* workspace, cublasHandle_t blas, cudaStream_t stream);

}  // namespace deepinfer::cuda

// The KV cache side of the GPU attention (model-spec §3 "Attention", §6 "Cached state"): the V4 cache row format
// and the index lists that tell the sink attention kernel which pool rows a query reads. The lists are built on
// the device from the step's slots / positions, so a captured decode graph stays valid from step to step.
// The rows are bf16 values or packed records (KvFormat, layers/attention/kv_record.h: V4's FP8 record, V4.1's MXFP8
// window record): the writers below take the pool's format, the index lists do not depend on it.
// Every kernel here is launched with PDL (cuda/launch.h; issue 4: at batch-1 decode each of them is a node of
// the layer's dependent chain, a plain launch waited for its predecessor's drain before its own launch).
#include <algorithm>
#include <cuda_fp8.h>

#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/launch.h"
#include "cuda/step_kernels.h"
#include "layers/attention/window_commit.cuh"
#include "layers/norm_rope/rope.cuh"
#include "layers/quant/fp8_quant.cuh"

namespace deepinfer::cuda {

namespace {

constexpr int kKvFp8Block = 64;  // model-spec §3: one ue8m0 scale per 64 nope channels

// One warp per row; lanes stride the channels of each 64-wide block, two values per lane. Every value of a window
// of kKvQuantWindow blocks and the lane's rope channels are loaded before the first block is quantized: at decode
// the row's 448 nope channels (7 blocks) were 7 dependent load -> warp max -> store rounds (ncu, issue 4: 7.1 us
// for one 1 KB row); now one round trip. The per-block arithmetic and the amax (fmaxf: any order) are unchanged.
constexpr int kKvQuantWindow = 8;

// kFormat Fp8 writes the record of the same codes and scales (dim == kvrec::kDim, rope_dim == kvrec::kRopeDim).
template <KvFormat kFormat>
__global__ void kv_fake_quant_kernel(const bf16* __restrict__ kv, int rows, int dim, int rope_dim, void* dst) {
  pdl_wait();  // PDL (cuda/launch.h): reads the predecessor's row, writes the window pool's scratch rows
  pdl_launch_dependents();
  constexpr bool kRecord = kFormat == KvFormat::Fp8;
  const int warps = blockDim.x / 32;
  const int row = blockIdx.x * warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const bf16* x = kv + int64_t(row) * dim;
  bf16* y = static_cast<bf16*>(dst) + int64_t(row) * dim;                                    // bf16 rows
  uint8_t* rec = static_cast<uint8_t*>(dst) + int64_t(row) * kvrec::kRowBytes;               // records
  bf16* rec_rope = reinterpret_cast<bf16*>(rec + kvrec::kRope) - (dim - rope_dim);  // indexed by channel
  const int nope = dim - rope_dim;
  bf16 rope_head[2];  // the first 64 rope channels (V4: all of them), loaded with the first window
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = nope + lane + 32 * i;
    if (c < dim) rope_head[i] = x[c];
  }
  for (int b0 = 0; b0 < nope; b0 += kKvQuantWindow * kKvFp8Block) {
    float v[kKvQuantWindow][2];
#pragma unroll
    for (int w = 0; w < kKvQuantWindow; ++w) {
      const int b = b0 + w * kKvFp8Block, width = min(kKvFp8Block, nope - b);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int c = lane + 32 * i;
        v[w][i] = c < width ? __bfloat162float(x[b + c]) : 0.0f;
      }
    }
#pragma unroll
    for (int w = 0; w < kKvQuantWindow; ++w) {
      const int b = b0 + w * kKvFp8Block, width = min(kKvFp8Block, nope - b);
      if (width <= 0) break;  // warp-uniform
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < 2; ++i) amax = fmaxf(amax, fabsf(v[w][i]));
      amax = dev::warp_max(amax);
      // The same rule as fp8_fake_quant: scale = 2^ceil(log2(max(amax, 1e-4) / 448)), x / scale rounded to e4m3.
      const float scale = dev::kv_fp8_scale(amax);
      if constexpr (kRecord) {
        if (lane == 0) rec[kvrec::kScales + (b0 / kKvFp8Block) + w] = kvrec::encode_scale(scale);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int c = lane + 32 * i;
          if (c < width) rec[kvrec::kCodes + b + c] = kvrec::encode_code(v[w][i], scale);
        }
      } else {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int c = lane + 32 * i;
          if (c < width) y[b + c] = dev::kv_fp8_value(v[w][i], scale);
        }
      }
    }
  }
  bf16* rope_out = kRecord ? rec_rope : y;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = nope + lane + 32 * i;
    if (c < dim) rope_out[c] = rope_head[i];
  }
  for (int c = nope + 64 + lane; c < dim; c += 32) rope_out[c] = x[c];
  if (kRecord && lane < kvrec::kRowBytes - kvrec::kScales - kvrec::kBlocks)  // the scale pad and the row pad: zero
    rec[kvrec::kScales + kvrec::kBlocks + lane] = 0;
}

// load_here: window_commit.cuh.

__global__ void window_rows_kernel(const int32_t* __restrict__ slots, const int32_t* __restrict__ positions,
                                   const int32_t* __restrict__ chunk_first, int rows, int window, int slots_capacity,
                                   int32_t* __restrict__ out) {
  pdl_wait();  // PDL: the step's slots / positions, and the list the previous layer's attention may still read
  pdl_launch_dependents();
  const int64_t total = int64_t(rows) * window;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int r = int(i / window), w = int(i % window);
    // The row's three indices loaded together (they were three dependent round trips behind the branches; and
    // again once the compiler had sunk the loads of first and slot into the branches that use them: load_here).
    const int p = positions[r], first = load_here(chunk_first + r), slot = load_here(slots + r);
    const int q = p - (window - 1) + w;  // oldest first
    int32_t row = -1;
    if (q >= 0) {
      const int chunk_start = p - (r - first);  // position of the chunk's first row
      row = q >= chunk_start ? slots_capacity * window + first + (q - chunk_start) : slot * window + q % window;
    }
    out[i] = row;
  }
}

__global__ void window_commit_kernel(void* pool, const int32_t* __restrict__ slots,
                                     const int32_t* __restrict__ positions, const int32_t* __restrict__ chunk_first,
                                     const int32_t* __restrict__ chunk_rows, int window, int slots_capacity,
                                     int row_bytes) {
  pdl_wait();  // PDL: before the early exit (every block waits) and before the pool write (attention reads it)
  pdl_launch_dependents();
  window_commit_row(pool, slots, positions, chunk_first, chunk_rows, blockIdx.x, window, slots_capacity, row_bytes);
}

// The attention's epilogue in one launch (issue 4: two dependent launches of ~3-6 us at batch-1 decode, both
// waiting only on the attention core): blocks [0, rows) commit the window rows (window_commit_kernel's work),
// the others de-rotate the attention output (rope_kernel's items, inverse). Independent outputs, the same values.
struct Derotate {
  bf16* o;
  const int32_t* positions;
  const float* inv_freq;
  int64_t tokens;
  int heads, head_dim, rope_dim;
};

__global__ void window_commit_derotate_kernel(void* pool, const int32_t* __restrict__ slots,
                                              const int32_t* __restrict__ positions,
                                              const int32_t* __restrict__ chunk_first,
                                              const int32_t* __restrict__ chunk_rows, int rows, int window,
                                              int slots_capacity, int row_bytes, const Derotate d) {
  pdl_wait();  // PDL: both parts read / write what the attention core reads or writes
  pdl_launch_dependents();
  if (int(blockIdx.x) < rows) {
    window_commit_row(pool, slots, positions, chunk_first, chunk_rows, blockIdx.x, window, slots_capacity, row_bytes);
    return;
  }
  const int64_t total = dev::rope_items(d.tokens, d.heads, d.rope_dim);
  const int64_t stride = int64_t(gridDim.x - rows) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x - rows) * blockDim.x + threadIdx.x; i < total; i += stride)
    dev::rope_item(d.o, int64_t(d.heads) * d.head_dim, d.positions, d.inv_freq, i, d.heads, d.head_dim, d.rope_dim,
                   true);
}

__global__ void visible_entry_rows_kernel(const int32_t* __restrict__ slots, const int32_t* __restrict__ positions,
                                          int rows, int ratio, const int32_t* __restrict__ page_table, int max_pages,
                                          int page_size, int stride, int32_t* __restrict__ out) {
  pdl_wait();  // PDL: the page table and the list the previous layer's attention may still read
  pdl_launch_dependents();
  const int64_t total = int64_t(rows) * stride;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int r = int(i / stride), e = int(i % stride);
    // The row's position and slot loaded together (load_here): the slot's load used to wait for the position's
    // round trip and the visibility test it feeds (SASS), a second dependent round trip before the page table's.
    const int p = positions[r], slot = load_here(slots + r);
    const int visible = (p + 1) / ratio;
    int32_t row = -1;
    if (e < visible) row = page_table[int64_t(slot) * max_pages + e / page_size] * page_size + e % page_size;
    out[i] = row;
  }
}

unsigned grid_for(int64_t total, int threads) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((total + threads - 1) / threads, 65535)));
}

}  // namespace

void kv_fake_quant(const bf16* kv, int rows, int dim, int rope_dim, void* dst, cudaStream_t stream, KvFormat format) {
  DI_CHECK(rope_dim >= 0 && rope_dim <= dim, "cuda::kv_fake_quant: rope_dim " + std::to_string(rope_dim) +
                                                 " outside [0, " + std::to_string(dim) + "]");
  DI_CHECK(format == KvFormat::Bf16 || (format == KvFormat::Fp8 && dim == kvrec::kDim && rope_dim == kvrec::kRopeDim),
           "cuda::kv_fake_quant: bf16 rows or V4's FP8 record (rows of " + std::to_string(kvrec::kDim) +
               " channels with " + std::to_string(kvrec::kRopeDim) + " RoPE channels), got " +
               kv_format_name(format) + ", " + std::to_string(dim) + " / " + std::to_string(rope_dim));
  if (rows == 0) return;
  const int warps = 4;
  const dim3 grid(unsigned((rows + warps - 1) / warps)), block(warps * 32);
  if (format == KvFormat::Fp8)
    DI_CUDA_CHECK(launch(kv_fake_quant_kernel<KvFormat::Fp8>, grid, block, 0, stream, kv, rows, dim, rope_dim, dst));
  else
    DI_CUDA_CHECK(launch(kv_fake_quant_kernel<KvFormat::Bf16>, grid, block, 0, stream, kv, rows, dim, rope_dim, dst));
}

void window_rows(const int32_t* slots, const int32_t* positions, const int32_t* chunk_first, int rows, int window,
                 int slots_capacity, int32_t* out, cudaStream_t stream) {
  const int64_t total = int64_t(rows) * window;
  if (total == 0) return;
  DI_CUDA_CHECK(launch(window_rows_kernel, dim3(grid_for(total, 256)), dim3(256), 0, stream, slots, positions,
                       chunk_first, rows, window, slots_capacity, out));
}

namespace {
// Bytes of a window pool row (a multiple of 16 for the uint4 copies).
int window_row_bytes(int dim, KvFormat format, const char* who) {
  DI_CHECK(dim % 8 == 0 && (format == KvFormat::Bf16 || format == KvFormat::Fp8 || format == KvFormat::Mxfp8) &&
               (format == KvFormat::Bf16 || dim == kvrec::kDim),
           std::string(who) + ": dim " + std::to_string(dim) + " in " + kv_format_name(format) + " (a multiple of 8; " +
               std::to_string(kvrec::kDim) + " for the FP8 / MXFP8 window records)");
  return kv_row_bytes(format, dim);
}
}  // namespace

void window_commit(void* pool, const int32_t* slots, const int32_t* positions, const int32_t* chunk_first,
                   const int32_t* chunk_rows, int rows, int window, int slots_capacity, int dim, cudaStream_t stream,
                   KvFormat format) {
  const int row_bytes = window_row_bytes(dim, format, "cuda::window_commit");
  if (rows == 0) return;
  DI_CUDA_CHECK(launch(window_commit_kernel, dim3(unsigned(rows)), dim3(64), 0, stream, pool, slots, positions,
                       chunk_first, chunk_rows, window, slots_capacity, row_bytes));
}

void window_commit_derotate(void* pool, const int32_t* slots, const int32_t* positions, const int32_t* chunk_first,
                            const int32_t* chunk_rows, int rows, int window, int slots_capacity, int dim, bf16* o,
                            const int32_t* o_positions, int o_rows, int heads, int rope_dim, const float* inv_freq,
                            cudaStream_t stream, KvFormat format) {
  const int row_bytes = window_row_bytes(dim, format, "cuda::window_commit_derotate");
  DI_CHECK(rope_dim % 2 == 0 && rope_dim <= dim,
           "cuda::window_commit_derotate: dim " + std::to_string(dim) + " / rope_dim " + std::to_string(rope_dim));
  const int threads = 256;
  const int64_t items = dev::rope_items(o_rows, heads, rope_dim);
  const int64_t rope_blocks = std::min<int64_t>((items + threads - 1) / threads, 65535);  // rope()'s grid
  if (rows + rope_blocks == 0) return;
  const Derotate d{o, o_positions, inv_freq, o_rows, heads, dim, rope_dim};
  DI_CUDA_CHECK(launch(window_commit_derotate_kernel, dim3(unsigned(rows + rope_blocks)), dim3(threads), 0, stream,
                       pool, slots, positions, chunk_first, chunk_rows, rows, window, slots_capacity, row_bytes, d));
}

void commit_window_and_derotate(void* pool, const int32_t* slots, const int32_t* positions, const int32_t* chunk_first,
                                const int32_t* chunk_rows, int rows, int window, int slots_capacity, int dim, bf16* o,
                                const int32_t* o_positions, int o_rows, int heads, int rope_dim,
                                const float* inv_freq, cudaStream_t stream, KvFormat format) {
  if (fused_attention_steps()) {
    window_commit_derotate(pool, slots, positions, chunk_first, chunk_rows, rows, window, slots_capacity, dim, o,
                           o_positions, o_rows, heads, rope_dim, inv_freq, stream, format);
    return;
  }
  window_commit(pool, slots, positions, chunk_first, chunk_rows, rows, window, slots_capacity, dim, stream, format);
  if (o_rows > 0) rope(o, int64_t(heads) * dim, o_positions, inv_freq, o_rows, heads, dim, rope_dim, true, stream);
}

void commit_window_and_derotate(const AttentionEpilogue& e, cudaStream_t stream) {
  commit_window_and_derotate(e.pool, e.slots, e.positions, e.chunk_first, e.chunk_rows, e.rows, e.window,
                             e.slots_capacity, e.dim, e.o, e.o_positions, e.o_rows, e.heads, e.rope_dim, e.inv_freq,
                             stream, e.format);
}

void visible_entry_rows(const int32_t* slots, const int32_t* positions, int rows, int ratio, const int32_t* page_table,
                        int max_pages, int page_size, int stride, int32_t* out, cudaStream_t stream) {
  const int64_t total = int64_t(rows) * stride;
  if (total == 0) return;
  DI_CUDA_CHECK(launch(visible_entry_rows_kernel, dim3(grid_for(total, 256)), dim3(256), 0, stream, slots, positions,
                       rows, ratio, page_table, max_pages, page_size, stride, out));
}

}  // namespace deepinfer::cuda

// W8A8 block-scaled GEMM on the GPU (model-spec §2 "Activation quant for FP8/FP4 GEMMs", §5 FP8 weights).
// The CPU reference is the dequantize-then-matmul of weight_formats.cpp + fake_quant.cpp + linalg.cpp.
//
// Two kernels, one contract (y[m, n] = sum_k q[m, k] xs[m, k/B] w[n, k] ws[n/B, k/B], fp32 accumulate):
//  - decode (few tokens): cuda/skinny_gemm.cuh, the weight read once through mma.sync with the tokens as the
//    narrow side; memory-bound, so its yardstick is the HBM roofline.
//  - prefill: a Hopper wgmma tile kernel (algorithms.md §3.2: DeepGEMM's 1d2d recipe is the design anchor).
//    A 128x128 output tile per block, two consumer warpgroups of 64 rows each, a 4-stage cp.async pipeline
//    into 128-byte-swizzled shared memory (the layout wgmma reads through its matrix descriptors). The
//    tensor-core accumulation of FP8 products is not full fp32 precision, so each K block (128, or 32 on V4.1)
//    is multiplied into a fresh register tile and promoted into the fp32 sum with its two scales, as DeepGEMM
//    does; the scales are powers of two, so the promotion itself is exact.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "layers/quant/fp8_gemm.h"
#include "core/env_switch.h"
#include "cuda/check.h"
#include "cuda/device_util.cuh"
#include "cuda/kernels.h"
#include "cuda/launch.h"
#include "cuda/numerics_mode.h"
#include "cuda/mbarrier.cuh"
#include "cuda/wgmma.cuh"
#include "cuda/packed_gemm.cuh"
#include "cuda/stamp_records.h"
#include "cuda/skinny_gemm.cuh"
#include "cuda/stream_gemm.cuh"

namespace deepinfer::cuda {

namespace {

namespace wg {

constexpr int kBM = 128, kBN = 128, kBK = 128;  // BK = 128 bytes of e4m3: one 128-byte swizzle row
constexpr int kStages = 4;
constexpr int kThreads = 256;                   // two warpgroups
constexpr int kTileBytes = kBM * kBK;           // 16 KB (A and B tiles are the same size)
constexpr int kSmemBytes = kStages * 2 * kTileBytes + 1024;  // + slack to align the tiles to 1024 bytes

using wgmma::commit;
using dev::fence_proxy_async_smem;  // cuda/mbarrier.cuh
using wgmma::fence_regs;
using wgmma::smem_desc;
using wgmma::wait_all;


__device__ __forceinline__ void store2(float* y, int64_t i, float a, float b) {
  *reinterpret_cast<float2*>(y + i) = make_float2(a, b);
}
__device__ __forceinline__ void store2(bf16* y, int64_t i, float a, float b) {
  *reinterpret_cast<uint32_t*>(y + i) = dev::pack_bf16x2(a, b);
}

template <int kBlock, class OutT>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_gemm_wgmma_kernel(const uint8_t* __restrict__ A, const float* __restrict__ xs, const uint8_t* __restrict__ W,
                          const uint8_t* __restrict__ ws, OutT* __restrict__ y, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* sA = smem;
  uint8_t* sB = smem + kStages * kTileBytes;

  const int tid = threadIdx.x;
  const int group = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int k_tiles = K / kBK;

  // Each thread copies 4 of the 1024 16-byte chunks of each tile. Chunk ch of row r lands at chunk ch ^ (r % 8)
  // of the row: the 128-byte swizzle that the descriptors declare (address bits [4:6] ^= bits [7:9]).
  // The activation (A) and weight (B) halves are separate so that the prologue can issue the weights' copies
  // before the PDL wait (weights are never written during a step).
  auto load_half = [&](bool weights, int kt, int stage) {
    const int k0 = kt * kBK;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int id = tid + i * kThreads;
      const int row = id / 8, ch = id % 8;
      const uint32_t off = uint32_t(row * 128 + ((ch ^ (row & 7)) << 4));
      if (weights) {
        const int gn = n0 + row;
        dev::cp_async16(dev::smem_u32(sB + stage * kTileBytes + off), W + int64_t(min(gn, N - 1)) * K + k0 + ch * 16,
                        gn < N ? 16 : 0);
      } else {
        const int gm = m0 + row;
        dev::cp_async16(dev::smem_u32(sA + stage * kTileBytes + off), A + int64_t(min(gm, M - 1)) * K + k0 + ch * 16,
                        gm < M ? 16 : 0);
      }
    }
  };
  auto load_tile = [&](int kt, int stage) {
    load_half(false, kt, stage);
    load_half(true, kt, stage);
  };

  float acc[64];
  float part[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f;

  const int r0 = m0 + group * 64 + warp * 16 + lane / 4, r1 = r0 + 8;
  const int x_blocks = K / kBlock;
  const int w_kblocks = (K + kBlock - 1) / kBlock;

  // PDL (cuda/launch.h): the first stages' weight copies before the wait, uncommitted, so they join copy group 0
  // (the main loop's first cp_async_wait then covers them with tile 0's activations: the group accounting holds).
  // Activations, activation scales and the output only after the wait.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    if (s < k_tiles) load_half(true, s, s);
  pdl_wait();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_half(false, s, s);
    dev::cp_async_commit();
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    dev::cp_async_wait<kStages - 2>();  // tile kt has landed (this thread's copies)
    fence_proxy_async_smem();           // ... and is visible to the tensor cores' (async proxy) reads
    __syncthreads();                    // every thread's copies; everyone is done with tile kt - 1
    if (kt + kStages - 1 < k_tiles) load_tile(kt + kStages - 1, (kt + kStages - 1) % kStages);
    dev::cp_async_commit();

    const int stage = kt % kStages;
    const uint64_t da = smem_desc(dev::smem_u32(sA + stage * kTileBytes + group * 64 * 128));
    const uint64_t db = smem_desc(dev::smem_u32(sB + stage * kTileBytes));
    // One wgmma per 32 bytes of K: the descriptor start moves 32 bytes (2 in 16-byte units) inside the row.
    if constexpr (kBlock == 128) {
      fence_regs(part);
      wgmma::fence();
#pragma unroll
      for (int j = 0; j < 4; ++j) wgmma::m64n128k32_e4m3(part, da + 2 * j, db + 2 * j, j);
      commit();
      wait_all();
      fence_regs(part);
      const float sw = dev::e8m0_to_float(ws[(n0 / 128) * w_kblocks + kt]);
      const float s0 = (r0 < M ? xs[int64_t(r0) * x_blocks + kt] : 0.0f) * sw;
      const float s1 = (r1 < M ? xs[int64_t(r1) * x_blocks + kt] : 0.0f) * sw;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        acc[4 * i + 0] += part[4 * i + 0] * s0;
        acc[4 * i + 1] += part[4 * i + 1] * s0;
        acc[4 * i + 2] += part[4 * i + 2] * s1;
        acc[4 * i + 3] += part[4 * i + 3] * s1;
      }
    } else {  // 32-wide blocks (V4.1): every wgmma is its own K block with its own scales
      const int n_blocks = (N + 31) / 32;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        fence_regs(part);
        wgmma::fence();
        wgmma::m64n128k32_e4m3(part, da + 2 * j, db + 2 * j, 0);
        commit();
        wait_all();
        fence_regs(part);
        const int kb = kt * 4 + j;
        const float sa0 = r0 < M ? xs[int64_t(r0) * x_blocks + kb] : 0.0f;
        const float sa1 = r1 < M ? xs[int64_t(r1) * x_blocks + kb] : 0.0f;
#pragma unroll
        for (int nb = 0; nb < 4; ++nb) {  // the 4 column blocks of 32 in this 128-wide tile
          const int wb = min(n0 / 32 + nb, n_blocks - 1);
          const float sw = dev::e8m0_to_float(ws[wb * w_kblocks + kb]);
          const float s0 = sa0 * sw, s1 = sa1 * sw;
#pragma unroll
          for (int i = 4 * nb; i < 4 * nb + 4; ++i) {
            acc[4 * i + 0] += part[4 * i + 0] * s0;
            acc[4 * i + 1] += part[4 * i + 1] * s0;
            acc[4 * i + 2] += part[4 * i + 2] * s1;
            acc[4 * i + 3] += part[4 * i + 3] * s1;
          }
        }
      }
    }
  }

  pdl_launch_dependents();  // the K loop is done: the next grid may be scheduled during the epilogue
  // Epilogue: straight from the accumulator fragments, two adjacent columns per store.
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int col = n0 + 8 * i + 2 * (lane % 4);
    if (col < N) {
      if (r0 < M) store2(y, int64_t(r0) * N + col, acc[4 * i + 0], acc[4 * i + 1]);
      if (r1 < M) store2(y, int64_t(r1) * N + col, acc[4 * i + 2], acc[4 * i + 3]);
    }
  }
}

template <int kBlock, class OutT>
void launch_wgmma(const uint8_t* q, const float* xs, int64_t m, const Fp8Linear& w, OutT* y, cudaStream_t stream) {
  auto kernel = fp8_gemm_wgmma_kernel<kBlock, OutT>;
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  dim3 grid(unsigned((w.n + kBN - 1) / kBN), unsigned((m + kBM - 1) / kBM));
  DI_CUDA_CHECK(launch(kernel, grid, dim3(kThreads), kSmemBytes, stream, q, xs, w.weight, w.scale, y, int(m),
                       int(w.n), int(w.k)));
}

}  // namespace wg

constexpr int64_t kSkinnyMaxRows = 64;  // up to here the weight read dominates (decode batches)
constexpr int64_t kMidMinRows = 9, kMidMaxRows = 256;  // the mid kernel's range (Fp8GemmMid::New)

// DEEPINFER_FP8_GEMM_MID=new|split|old (fp8_gemm.h), read once; anything else is Old.
EnvSwitch<Fp8GemmMid> g_mid{"DEEPINFER_FP8_GEMM_MID", [](const char* v) {
  return env_equals(v, "new") ? Fp8GemmMid::New : env_equals(v, "split") ? Fp8GemmMid::Split : Fp8GemmMid::Old;
}};

// DEEPINFER_BATCH_INVARIANT_FP8=auto|wgmma|mid|split (fp8_gemm.h), read once; unset or anything else is Auto.
EnvSwitch<InvariantFp8Kernel> g_invariant_fp8{"DEEPINFER_BATCH_INVARIANT_FP8", [](const char* v) {
  return env_equals(v, "wgmma")   ? InvariantFp8Kernel::Wgmma
         : env_equals(v, "mid")   ? InvariantFp8Kernel::Mid
         : env_equals(v, "split") ? InvariantFp8Kernel::MidSplit
                                  : InvariantFp8Kernel::Auto;
}};

// DEEPINFER_FP8_QUANT_PROLOGUE=N (fp8_gemm.h): fp8_gemm_bf16's quantization in the stream kernel's prologue up to N
// rows; unset: 1 (run 99), 0: never. Anything but 0..8 is an error.
EnvSwitch<int> g_quant_prologue_rows{"DEEPINFER_FP8_QUANT_PROLOGUE", [](const char* v) {
  if (!v) return 1;
  char* end = nullptr;
  const long rows = std::strtol(v, &end, 10);
  DI_CHECK(end != v && *end == '\0' && rows >= 0 && rows <= stream_gemm::kMaxRows,
           std::string("DEEPINFER_FP8_QUANT_PROLOGUE=") + v +
               ": the most rows whose wo_b quantizes in its prologue, 0..8");
  return int(rows);
}};

// DEEPINFER_Q_ROPE_EPILOGUE=0 (fp8_gemm.h): fp8_gemm_rope without the epilogue (fp8_gemm, then the caller's rope()).
EnvSwitch<bool> g_q_rope_epilogue{"DEEPINFER_Q_ROPE_EPILOGUE", [](const char* v) { return !env_equals(v, "0"); }};

// Whether fp8_gemm (Auto path) runs m rows of w on decode v8's stream kernel (the Skinny path with packed weights
// and DecodeKernel::Stream, m <= 8), not batch-invariant mode's tile kernel: where the fused decode forms
// (fp8_gemm_bf16's prologue, fp8_gemm_rope's epilogue) can give its bits.
bool takes_stream_kernel(int64_t m, const Fp8Linear& w) {
  return m > 0 && m <= stream_gemm::kMaxRows && !batch_invariant() && w.packed && (w.block == 128 || w.block == 32) &&
         w.k % 128 == 0 && w.n % 2 == 0 && stream_gemm::wants_stream(w.decode);
}

// The decode kernels' arguments of one product (skinny / packed / stream / mid): y = x . w^T over m rows, x as FP8
// codes q with their block scales xs (null where the kernel quantizes x itself), w's packed copy where it has one.
packed::Args decode_args(const uint8_t* q, const float* xs, int64_t m, const Fp8Linear& w, void* y) {
  packed::Args pa;
  pa.base.q = q;
  pa.base.xs = xs;
  pa.base.act_block_log2 = skinny::log2_exact(w.block);
  pa.base.w = w.weight;
  pa.base.ws = w.scale;
  pa.base.w_block_log2 = skinny::log2_exact(w.block);
  pa.base.n = int(w.n);
  pa.base.k = int(w.k);
  pa.base.rows = int(m);
  pa.base.y = y;
  pa.wp = w.packed;
  return pa;
}

}  // namespace

bool q_rope_epilogue() { return g_q_rope_epilogue.get(); }
void set_q_rope_epilogue(bool on) { g_q_rope_epilogue.set(on); }
int fp8_quant_prologue_rows() { return g_quant_prologue_rows.get(); }
void set_fp8_quant_prologue_rows(int rows) {
  DI_CHECK(rows >= 0 && rows <= stream_gemm::kMaxRows, "cuda::set_fp8_quant_prologue_rows: " + std::to_string(rows) +
                                                          " outside 0..8");
  g_quant_prologue_rows.set(rows);
}
Fp8GemmMid fp8_gemm_mid() { return g_mid.get(); }
void set_fp8_gemm_mid(Fp8GemmMid mode) { g_mid.set(mode); }
InvariantFp8Kernel batch_invariant_fp8() { return g_invariant_fp8.get(); }
void set_batch_invariant_fp8(InvariantFp8Kernel kernel) { g_invariant_fp8.set(kernel); }
// Decode v8's K loop for 128-blocks (stream_gemm.cuh consume_tile kBlk128; DEEPINFER_STREAM_LOOP=blk128):
// the override and the current choice for the tests and the roofline program. The same bits either way. Declared
// where they are used (tests/gpu/test_quant_gemm.cpp, bench/gpu/roofline.cu): move the declarations to fp8_gemm.h
// beside set_fp8_gemm_mid.
void set_stream_blk128_loop(bool on) { stream_gemm::set_blk128_loop(on); }
bool stream_blk128_loop() { return stream_gemm::blk128_loop(); }
// Decode v8's ring depth for dense FP8 products (stream_gemm.cuh ring_stages; DEEPINFER_STREAM_STAGES, fp8_gemm.h).
void set_stream_ring_stages(int stages) { stream_gemm::set_ring_stages(stages); }
int stream_ring_stages() { return stream_gemm::ring_stages(); }
void set_stream_balanced_grid(bool on) { stream_gemm::set_balanced_grid(on); }
bool stream_balanced_grid() { return stream_gemm::balanced_grid(); }
void set_stream_entry_trigger(bool on) { stream_gemm::set_entry_trigger(on); }
bool stream_entry_trigger() { return stream_gemm::entry_trigger(); }
// The dense FP8 stream's phase stamps (fp8_gemm.h Fp8StampSlot; stream_gemm.cuh dense_stamp_target).
void set_stream_fp8_stamps(unsigned long long* stamps) { stream_gemm::dense_stamp_target() = stamps; }

// The step stamps (fp8_gemm.h set_stream_fp8_step_stamps), as cuda/stream_fp4_wgmma.cu's: one record per packed
// weight pointer and device, of two blocks per SM (launch_stream's most), with the grid, shape and stream of the
// launch that took it.
namespace {

constexpr int kDenseStepStampSlots = 512;  // ~8 dense FP8 products x the layers of any model this runs, with room

struct DenseLaunch {
  const void* key;
  int blocks, n, k, rows;
  bool quant_x, rope;
  const void* stream;
};

LaunchStampRecords<DenseLaunch>& dense_step_stamps() {
  static LaunchStampRecords<DenseLaunch> s{kDenseStepStampSlots,
                                           2 * stream_gemm::device_smem_limits().x * kFp8StampSlots};
  return s;
}

}  // namespace

namespace stream_gemm {

unsigned long long* dense_step_record(const void* key, int blocks, int n, int k, int rows, bool quant_x, bool rope,
                                      cudaStream_t stream) {
  if (blocks > 2 * device_smem_limits().x) return nullptr;  // more blocks than a record holds
  return dense_step_stamps().record({key, blocks, n, k, rows, quant_x, rope, static_cast<const void*>(stream)},
                                    stream);
}

}  // namespace stream_gemm

bool stream_fp8_step_stamps() { return stream_gemm::dense_step_stamps_switch().get(); }
void set_stream_fp8_step_stamps(bool on) {
  if (on) dense_step_stamps().allocate();  // this device's records, outside any capture
  stream_gemm::dense_step_stamps_switch().set(on);
}

std::vector<Fp8StepStampRecord> stream_fp8_step_stamps_read() {
  const int words = 2 * stream_gemm::device_smem_limits().x * kFp8StampSlots;
  const auto [order, raw] = dense_step_stamps().read();
  std::vector<Fp8StepStampRecord> out;
  for (size_t i = 0; i < order.size() && (i + 1) * size_t(words) <= raw.size(); ++i) {
    const DenseLaunch& l = order[i];
    Fp8StepStampRecord r;
    r.slot = int(i);
    r.key = l.key;
    r.blocks = l.blocks;
    r.n = l.n;
    r.k = l.k;
    r.rows = l.rows;
    r.quant_x = l.quant_x;
    r.rope = l.rope;
    r.stream = l.stream;
    const unsigned long long* rec = raw.data() + i * size_t(words);
    r.stamps.assign(rec, rec + size_t(r.blocks) * kFp8StampSlots);
    for (int b = 0; b < r.blocks; ++b) {
      const unsigned long long start = rec[size_t(b) * kFp8StampSlots + kFp8StStartNs];
      r.start_ns = b == 0 ? start : std::min(r.start_ns, start);
      r.end_ns = std::max(r.end_ns, rec[size_t(b) * kFp8StampSlots + kFp8StEndNs]);
    }
    out.push_back(std::move(r));
  }
  return out;
}

Fp8LaunchPhases fp8_launch_phases(const unsigned long long* stamps, int blocks) {
  Fp8LaunchPhases p;
  // The blocks that wrote a start (a zeroed buffer's unused blocks left out).
  std::vector<const unsigned long long*> blk;
  for (int b = 0; b < blocks; ++b)
    if (stamps[size_t(b) * kFp8StampSlots + kFp8StStartNs]) blk.push_back(stamps + size_t(b) * kFp8StampSlots);
  p.blocks = int(blk.size());
  if (blk.empty()) return p;
  // The median of v (the upper one of an even count, as roofline's phase benches and fp4_launch_phases).
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  std::vector<std::pair<uint64_t, uint64_t>> start_end;
  std::vector<double> clk;
  for (const unsigned long long* s : blk) {
    start_end.emplace_back(s[kFp8StStartNs], s[kFp8StEndNs]);
    // The block's clock: cycles from its start to its last store over the same span in ns (thread 0 wrote both
    // ends; the start's clock64 is taken just after its globaltimer, past one __syncthreads).
    if (s[kFp8StEndNs] > s[kFp8StStartNs])
      clk.push_back(double(s[kFp8StConsEnd]) / (double(s[kFp8StEndNs] - s[kFp8StStartNs]) * 1e-3));
  }
  static_cast<LaunchSpan&>(p) = launch_span(start_end);
  p.clock_mhz = clk.empty() ? 0 : median(clk);
  for (int j = 0; j < kFp8StampSlots; ++j) {
    std::vector<double> v;
    for (const unsigned long long* s : blk) v.push_back(double(s[j]));
    p.slot[j] = median(v);
  }
  return p;
}

namespace {

// The mid kernel (cuda/stream_gemm.cuh stream_mid_kernel) or, with `split`, its split form over m packed-weight
// rows; false where its tiles do not fit the shared memory (k decides: the smallest row group is tried last).
bool launch_mid_form(const uint8_t* q, const float* xs, int64_t m, const Fp8Linear& w, void* y, OutType out_type,
                     bool split, cudaStream_t stream) {
  const packed::Args pa = decode_args(q, xs, m, w, y);
  const bool launched =
      split ? (out_type == OutType::BF16 ? stream_gemm::launch_mid_split<bf16>(pa, m, stream, true)
                                         : stream_gemm::launch_mid_split<float>(pa, m, stream, true))
            : (out_type == OutType::BF16 ? stream_gemm::launch_mid<bf16>(pa, m, stream, true)
                                         : stream_gemm::launch_mid<float>(pa, m, stream, true));
  if (launched) DI_CUDA_CHECK_LAUNCH(split ? "stream_mid_split_kernel" : "stream_mid_kernel");
  return launched;
}

// fp8_gemm with the decode stream kernel's grid (cuda/kernels.h StreamGrid; {} = launch_stream's own).
void run_fp8_gemm(const uint8_t* q, const float* xs, int64_t m, const Fp8Linear& w, void* y, OutType out_type,
                  cudaStream_t stream, GemmPath path, const StreamGrid& grid) {
  DI_CHECK(w.block == 128 || w.block == 32, "cuda::fp8_gemm: block " + std::to_string(w.block) + " is not 128 or 32");
  DI_CHECK(w.k % 128 == 0 && w.n % 2 == 0, "cuda::fp8_gemm: k = " + std::to_string(w.k) + " must be a multiple of 128 "
                                            "and n = " + std::to_string(w.n) + " even");
  DI_CHECK(m < (int64_t(1) << 31) && w.n < (int64_t(1) << 31), "cuda::fp8_gemm: m or n too large");
  if (m == 0) return;
  // Batch-invariant mode (algorithms.md §4): one kernel family for every m and every caller, explicit paths
  // included (fp8_gemm.h batch_invariant_fp8). The wgmma tile kernel's per-output reduction order is fixed by k
  // alone (one 128x128 tile shape, no split-K, the K blocks promoted in order, zero-filled padding rows that no
  // other row reads); the mid kernels' by k alone too (a row's bits do not depend on m), and whether they fit as
  // well, so a packed weight that takes them at one m takes them at every m. The decode stream kernel (v8) and v7
  // are not used: the mid kernel at <= 8 rows has v8's bits, but the split form has not.
  if (batch_invariant()) {
    const InvariantFp8Kernel kernel = batch_invariant_fp8();
    const bool mid =
        kernel == InvariantFp8Kernel::Auto ? w.n <= kInvariantMidMaxN : kernel != InvariantFp8Kernel::Wgmma;
    if (w.packed && mid && launch_mid_form(q, xs, m, w, y, out_type, kernel == InvariantFp8Kernel::MidSplit, stream))
      return;
    path = GemmPath::Wgmma;
  } else if (w.packed && m >= kMidMinRows && m <= kMidMaxRows && fp8_gemm_mid() != Fp8GemmMid::Old &&
             (path == GemmPath::Auto || path == GemmPath::Skinny)) {
    // The mid kernels (cuda/stream_gemm.cuh; DEEPINFER_FP8_GEMM_MID=new: stream_mid_kernel, =split:
    // stream_mid_split_kernel): decode v8's weight stream with up to 64 rows per weight tile (split: k over a
    // cluster, S from k).
    if (launch_mid_form(q, xs, m, w, y, out_type, fp8_gemm_mid() == Fp8GemmMid::Split, stream)) return;
    path = m <= kSkinnyMaxRows ? GemmPath::Skinny : GemmPath::Wgmma;  // does not fit: the old choice
  } else if (path == GemmPath::Auto)
    path = m <= kSkinnyMaxRows ? GemmPath::Skinny : GemmPath::Wgmma;
  if (path == GemmPath::Skinny) {
    const packed::Args pa = decode_args(q, xs, m, w, y);
    const skinny::Args& a = pa.base;
    if (w.packed) {  // decode v5: fragment-ordered weights, split-K over a cluster (cuda/packed_gemm.cuh)
      // Decode v8 (cuda/stream_gemm.cuh) when asked for and m <= 8; v7 otherwise. Every path here launches with
      // PDL (cuda/launch.h): a dense product's kernels wait before their first activation read.
      if (stream_gemm::wants_stream(w.decode)) {
        const bool launched =
            out_type == OutType::BF16
                ? stream_gemm::launch_stream<skinny::WeightFormat::FP8, bf16>(pa, 1, m, stream, {}, true, nullptr,
                                                                              {}, grid)
                : stream_gemm::launch_stream<skinny::WeightFormat::FP8, float>(pa, 1, m, stream, {}, true, nullptr,
                                                                               {}, grid);
        if (launched) {
          DI_CUDA_CHECK_LAUNCH("stream_gemm_kernel<FP8>");
          return;
        }
      }
      if (out_type == OutType::BF16)
        packed::launch_packed<skinny::WeightFormat::FP8, bf16>(pa, 1, m, stream, true);
      else
        packed::launch_packed<skinny::WeightFormat::FP8, float>(pa, 1, m, stream, true);
      DI_CUDA_CHECK_LAUNCH("packed_gemm_kernel<FP8>");
      return;
    }
    if (out_type == OutType::BF16)
      skinny::launch_skinny<skinny::WeightFormat::FP8, bf16>(a, 1, m, stream, true);
    else
      skinny::launch_skinny<skinny::WeightFormat::FP8, float>(a, 1, m, stream, true);
    DI_CUDA_CHECK_LAUNCH("skinny_gemm_kernel<FP8>");
    return;
  }
  if (w.block == 128) {
    if (out_type == OutType::BF16)
      wg::launch_wgmma<128>(q, xs, m, w, static_cast<bf16*>(y), stream);
    else
      wg::launch_wgmma<128>(q, xs, m, w, static_cast<float*>(y), stream);
  } else {
    if (out_type == OutType::BF16)
      wg::launch_wgmma<32>(q, xs, m, w, static_cast<bf16*>(y), stream);
    else
      wg::launch_wgmma<32>(q, xs, m, w, static_cast<float*>(y), stream);
  }
}

}  // namespace

void fp8_gemm(const uint8_t* q, const float* xs, int64_t m, const Fp8Linear& w, void* y, OutType out_type,
              cudaStream_t stream, GemmPath path) {
  run_fp8_gemm(q, xs, m, w, y, out_type, stream, path, {});
}

void fp8_gemm_grid(const uint8_t* q, const float* xs, int64_t m, const Fp8Linear& w, void* y, OutType out_type,
                   cudaStream_t stream, const StreamGrid& grid) {
  run_fp8_gemm(q, xs, m, w, y, out_type, stream, GemmPath::Auto, grid);
}

void fp8_gemm_bf16(const bf16* x, int64_t m, const Fp8Linear& w, void* y, OutType out_type, uint8_t* q, float* xs,
                   cudaStream_t stream) {
  // Where fp8_gemm itself would run decode v8's stream kernel (<= 8 rows, packed weights, the Skinny path; not
  // batch-invariant mode's tile kernel), that kernel quantizes x itself.
  if (m <= fp8_quant_prologue_rows() && takes_stream_kernel(m, w)) {
    const packed::Args pa = decode_args(nullptr, nullptr, m, w, y);
    const bool launched =
        out_type == OutType::BF16
            ? stream_gemm::launch_stream<skinny::WeightFormat::FP8, bf16, true>(pa, 1, m, stream, {}, true, x)
            : stream_gemm::launch_stream<skinny::WeightFormat::FP8, float, true>(pa, 1, m, stream, {}, true, x);
    if (launched) {
      DI_CUDA_CHECK_LAUNCH("stream_gemm_kernel<FP8, quantizing>");
      return;
    }
  }
  fp8_quantize(x, q, xs, m, int(w.k), w.block, stream);
  fp8_gemm(q, xs, m, w, y, out_type, stream);
}

bool fp8_gemm_rope(const uint8_t* q, const float* xs, int64_t m, const Fp8Linear& w, bf16* y, const RopeEpilogue& rope,
                   cudaStream_t stream, const StreamGrid& grid) {
  // The rotation needs whole heads in a row and pairs on even columns: n a multiple of an even head_dim, an even
  // rope_dim <= head_dim (rope() checks the same).
  const bool heads = rope.head_dim > 0 && rope.head_dim % 2 == 0 && rope.rope_dim > 0 && rope.rope_dim % 2 == 0 &&
                     rope.rope_dim <= rope.head_dim && w.n % rope.head_dim == 0;
  if (q_rope_epilogue() && heads && takes_stream_kernel(m, w)) {
    const packed::Args pa = decode_args(q, xs, m, w, y);
    if (stream_gemm::launch_stream<skinny::WeightFormat::FP8, bf16, false, true>(pa, 1, m, stream, {}, true, nullptr,
                                                                                 rope, grid)) {
      DI_CUDA_CHECK_LAUNCH("stream_gemm_kernel<FP8, rope>");
      return true;
    }
  }
  run_fp8_gemm(q, xs, m, w, y, OutType::BF16, stream, GemmPath::Auto, grid);
  return false;
}

}  // namespace deepinfer::cuda

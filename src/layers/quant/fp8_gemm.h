// fp8_gemm's process-wide kernel choices (fp8_gemm is declared in cuda/kernels.h; bench/gpu/NOTES.md "FP8 GEMMs at
// 9-256 rows (session 5, H9)") and its fused decode forms (the quantization prologue, the RoPE epilogue).
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/kernels.h"
#include "cuda/launch_span.h"

namespace deepinfer::cuda {

// Which kernel fp8_gemm runs for a packed (fp8_pack) weight at 9..256 rows outside batch-invariant mode:
//  Old: v7 (packed_gemm_kernel) at 9..64 rows and the wgmma tile kernel above (GemmPath::Auto), the default.
//  New: the mid kernel (stream_gemm.cuh stream_mid_kernel: decode v8's weight stream, up to 64 rows per weight
//       tile; each row the same bits as v8 computes it in a group of <= 8 rows) for 9..256 rows whenever the path
//       is Auto or Skinny.
//  Split: the same rows through stream_mid_split_kernel: k split over a cluster of S = pow2floor(k / 1024) (1..8)
//       blocks from k alone, slices added in rank order (v8's bits where S = 1, k < 2048; another fixed order
//       above, checked against the CPU); 64-row groups at every k and S x more blocks on narrow layers.
// DEEPINFER_FP8_GEMM_MID=new|split|old, read once; set_fp8_gemm_mid overrides it (tests, the roofline program).
// Like batch-invariant mode it is read at launch: graphs captured under one choice replay its kernels.
enum class Fp8GemmMid { Old, New, Split };
Fp8GemmMid fp8_gemm_mid();
void set_fp8_gemm_mid(Fp8GemmMid mode);

// Which kernel fp8_gemm runs in batch-invariant mode (cuda/numerics_mode.h), where one weight must take kernels of
// the same per-row arithmetic at every row count:
//  Wgmma: the wgmma tile kernel for every weight: 128 x 128 tiles, no split, so the weight streams
//         through n / 128 blocks; decode batches pay for it on narrow weights (run 205, batch 1: wkv (n 512) and
//         wq_a (n 1024) 32 us a launch, against 10 us in the mid kernel).
//  Mid / MidSplit: a packed weight (fp8_pack) through the mid kernel / its split form (Fp8GemmMid above) at every
//         row count, one row included. A row's bits do not depend on how many rows share the call (the tests' rows-
//         alone checks), and whether the kernel fits depends on k alone (the split form also needs a resident
//         cluster of S blocks, which the H200 has at every tested shape), so a weight takes one kernel at every m.
//         Unpacked weights keep the wgmma kernel. Wide weights lose at 256 rows (run 205: wq_b 49 -> 370 us).
//  Auto (the default since run 206): by the weight's shape, never by m: the mid kernel for n <= kInvariantMidMaxN
//         (the wgmma grid would have <= 16 blocks), the wgmma kernel above. Against Wgmma in the mode (run 206, step
//         ms): V4.1 batch 1 4.03 -> 3.64, 8 9.59 -> 9.31, 64 / 256 +0.5 / +1.6 %, prefill -1.6 %; V4 batch 1 4.43
//         -> 4.37, 256 +2 %. Mid everywhere: batch 1 -12 / -21 % but 256 +18 %, prefill -15 %.
// DEEPINFER_BATCH_INVARIANT_FP8=auto|wgmma|mid|split, read once; set_batch_invariant_fp8 overrides it (tests,
// benches). Read at launch, as the mode: graphs replay the kernels they were captured with.
enum class InvariantFp8Kernel { Wgmma, Mid, MidSplit, Auto };
constexpr int64_t kInvariantMidMaxN = 2048;
InvariantFp8Kernel batch_invariant_fp8();
void set_batch_invariant_fp8(InvariantFp8Kernel kernel);

// The decode stream GEMMs' K loop (cuda/stream_gemm.cuh): DEEPINFER_STREAM_LOOP=generic|blk128, read once; blk128 is
// the loop specialized for 128-wide activation (and FP8 weight) blocks, the same arithmetic in the same order
// (bench/gpu/NOTES.md "Decode stream loop for 128-blocks"). Overridable for tests and the roofline program.
void set_stream_blk128_loop(bool on);
bool stream_blk128_loop();

// The decode stream's ring depth for dense FP8 products (cuda/stream_gemm.cuh ring_stages): DEEPINFER_STREAM_STAGES=N,
// read once; unset: 2 stages per block where two blocks per SM fit, the default since session 13 (whole model batch 1
// -1.3 %, H200 run 76); 0: the earlier sizing from shared memory (up to 6 stages of 16 KB per block); N > 0: N stages
// (bench/gpu/NOTES.md "Decode stream: a shallow ring"). The same output bits at every depth. Overridable for tests and
// the roofline program.
void set_stream_ring_stages(int stages);
int stream_ring_stages();
// The stream kernel's persistent grid sized so that every block takes the same number of work items
// (cuda/stream_gemm.cuh balanced_grid; DEEPINFER_STREAM_GRID=full for min(items, slots) blocks; default balanced
// since run 130). Bits unchanged.
void set_stream_balanced_grid(bool on);
bool stream_balanced_grid();
// The stream kernel's PDL trigger at its top instead of each block's last item (cuda/stream_gemm.cuh entry_trigger;
// DEEPINFER_STREAM_TRIGGER=entry|last; default entry since run 133). Bits unchanged.
void set_stream_entry_trigger(bool on);
bool stream_entry_trigger();

// The most rows (0..8) for which fp8_gemm_bf16 (cuda/kernels.h) quantizes inside the decode stream kernel's prologue:
// DEEPINFER_FP8_QUANT_PROLOGUE=N, read once; unset: 1. Each block quantizes every row itself, so the prologue grows
// with the rows: H200 run 99, batch 1 -0.6 % (V4) / -1.5 % (V4.1) with it at every row count, batch 8 +2.8 % / +1.7 %
// (bench/gpu/NOTES.md "wo_b's quantization in its prologue"). Read at launch; the same bits either way.
int fp8_quant_prologue_rows();
void set_fp8_quant_prologue_rows(int rows);

// Phase stamps of the next FP8 decode stream launches (a diagnostic, roofline --fp8-phases; bench/gpu/NOTES.md "The
// dense FP8 stream's phase stamps"): each block of stream_gemm_kernel<FP8, ..., kStamps = true> (cuda/stream_gemm.cuh)
// writes kFp8StampSlots values at stamps + block x kFp8StampSlots (at most two blocks per SM); null (the default):
// off, the default kernels run. Not the mid kernels (9..256 rows).
// Read at launch: a graph captured while it was set replays the stamped kernel. Cycles are clock64() minus the
// writer's own value just past the block's one __syncthreads (consumer thread 0, or the producer thread); *Ns are
// %globaltimer (one clock for all SMs).
enum Fp8StampSlot : int {
  kFp8StStartNs,          // the block's start (thread 0, before the ring's barriers are set up)
  kFp8StConsWaited,       // consumers past their pdl_wait
  kFp8StProdWaited,       // the producer past its pdl_wait (expert ids only; a dense product's producer waits for none)
  kFp8StFirstStaged,      // the first group's activations staged (stage_rows done)
  kFp8StFirstData,        // the first stage's full barrier passed (consumer warp 0)
  kFp8StFullWaitCycles,   // summed over consumer warp 0's full-barrier waits (data not there)
  kFp8StStages,           // stages consumed by consumer warp 0
  kFp8StStageRowsCycles,  // summed over the block's stage_rows calls
  kFp8StReduceCycles,     // summed over the block's reduce_store calls (two consumer barriers and the stores a tile)
  kFp8StEmptyWaitCycles,  // summed over the producer's empty-barrier waits (ring full)
  kFp8StProdEnd,          // the producer's last copy issued
  kFp8StConsEnd,          // the last tile stored
  kFp8StEndNs,            // the last tile stored (globaltimer)
  kFp8StItems,            // tiles with rows this block consumed
  kFp8StQuantFirstUnit,   // kQuantX: consumer thread 0's first unit quantized (its first load returned), first group
  kFp8StQuantLoopEnd,     // kQuantX: consumer thread 0 out of the quantizing loop (before the closing barrier), first group
  kFp8StampSlots = 16
};
void set_stream_fp8_stamps(unsigned long long* stamps);

// The same stamps inside the model's steps (bench/gpu/NOTES.md "Dense FP8 stream stamps inside the step"; v4_decode
// --fp8-stamps), the counterpart of cuda/stream_fp4_wgmma.h set_stream_fp4_step_stamps: with this on, every dense FP8
// launch onto stream_gemm_kernel (eager or captured; not the mid kernels) without the
// standalone pointer above runs the stamped kernel on its own record, one per packed weight pointer (a layer's wq_a,
// wq_b, wo_b, shared w1|w3, w2, the indexer's wq_b, ...) and device, in the order of the first stamped launches, at
// most 512; each launch overwrites its record. The stamped kernel computes the same output as the default one (it
// adds stores only). DEEPINFER_FP8_STEP_STAMPS=1 sets it process-wide, read once; the setter overrides it, and
// switching on allocates the current device's records (call it before a capture: a graph keeps the kernel and record
// it was captured with).
bool stream_fp8_step_stamps();
void set_stream_fp8_step_stamps(bool on);
// One record as the last launch that wrote it left it.
struct Fp8StepStampRecord {
  int slot = 0;
  const void* key = nullptr;  // the packed weights (Fp8Linear::packed)
  // The launch as launched / captured (host side): its grid, product shape, rows (pa.base.rows), the quantizing
  // prologue's form (fp8_gemm_bf16: kQuantX) and the RoPE epilogue's (fp8_gemm_rope: kRope), and its stream (an id
  // only: the step's launches on one stream follow each other, PDL-overlapped where on).
  int blocks = 0, n = 0, k = 0, rows = 0;
  bool quant_x = false, rope = false;
  const void* stream = nullptr;
  // The first block's start and the last block's end (%globaltimer): start_ns grows with each write; 0: never written.
  unsigned long long start_ns = 0, end_ns = 0;
  std::vector<unsigned long long> stamps;  // [blocks][kFp8StampSlots], Fp8StampSlot's values
};
// The current device's records in slot order; call with the stamped launches complete (a synchronous copy).
std::vector<Fp8StepStampRecord> stream_fp8_step_stamps_read();

// One launch's stamps summarized (roofline --fp8-phases per launch, v4_decode --fp8-stamps per record), the blocks
// being those of the first `blocks` that wrote a start (the others, zeroed, left out). The globaltimer span of
// those blocks (cuda/launch_span.h LaunchSpan). clock_mhz: the median block's SM clock (its cycles
// from start to the last tile stored over the same globaltimer span; 0 where none ran measurably). slot: per
// Fp8StampSlot the median over blocks of its value (the cycles slots in SM cycles after the block's start or summed,
// the counts as counts; the globaltimer slots as raw ns).
struct Fp8LaunchPhases : LaunchSpan {
  int blocks = 0;
  double clock_mhz = 0;
  double slot[kFp8StampSlots] = {};
};
Fp8LaunchPhases fp8_launch_phases(const unsigned long long* stamps, int blocks);

// fp8_gemm (cuda/kernels.h) with the decode stream kernel's grid capped by `grid` (cuda/kernels.h StreamGrid) where
// fp8_gemm takes that kernel; every other path as fp8_gemm. The same bits as fp8_gemm.
void fp8_gemm_grid(const uint8_t* q, const float* xs, int64_t m, const Fp8Linear& w, void* y, OutType out_type,
                   cudaStream_t stream, const StreamGrid& grid);

// The query RoPE of a product's bf16 output rows (model-spec §2, layers/norm_rope/rope.cuh): row m holds n / head_dim
// heads, the last rope_dim channels of each rotated in interleaved pairs by positions[m] with inv_freq[rope_dim / 2];
// what rope(y, n, positions, inv_freq, m, n / head_dim, head_dim, rope_dim, false) does.
struct RopeEpilogue {
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;
  int head_dim = 0, rope_dim = 0;
};

// fp8_gemm with bf16 output (Auto path) whose output rows then need `rope`. Where fp8_gemm takes decode v8's stream
// kernel (<= 8 rows, packed weights; not batch-invariant mode) and
// q_rope_epilogue() is on, that kernel rotates in its epilogue (stream_gemm.cuh reduce_store, the same bits as the
// two launches) and this returns true; else it runs fp8_gemm alone and returns false: the caller runs rope().
// bench/gpu/NOTES.md "The query RoPE in wq_b's epilogue".
// `grid`: the stream kernel's grid (StreamGrid above), for the fused launch and the fallback alike.
bool fp8_gemm_rope(const uint8_t* q, const float* xs, int64_t m, const Fp8Linear& w, bf16* y, const RopeEpilogue& rope,
                   cudaStream_t stream, const StreamGrid& grid = {});
// DEEPINFER_Q_ROPE_EPILOGUE=0 turns fp8_gemm_rope's epilogue off (read once; default on until measured);
// set_q_rope_epilogue overrides it (tests). Read at launch; the same bits either way.
bool q_rope_epilogue();
void set_q_rope_epilogue(bool on);

}  // namespace deepinfer::cuda

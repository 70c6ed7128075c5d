// The decode selects' phase stamps (bench/gpu/NOTES.md "Decode select: phase stamps inside the model"), shared by
// V4's lightning indexer (indexer_gpu.cu: index_decode_select_phases_kernel, indexer_decode_select_phases and the
// model's records) and V4.1's CSA2 indexer (csa2_indexer_gpu.cu: csa2_decode_select_phases_kernel, on the same
// records): a stamp buffer's or record's layout, the marks that write it, and where a layer's record lives. The
// production kernels take none of this (NoSelectMarks, NoScoreMarks: their code is unchanged). Only .cu files include
// this.
#pragma once

#include <cuda_runtime.h>

#include "cuda/device_util.cuh"
#include "layers/indexer/index_select_bins.cuh"

namespace deepinfer::cuda {

namespace index_scoring {

// stamps [kStampCount] u64: [kStampEntry] the first block of row 0 to start (atomicMin; the host sets ~0), then the
// %globaltimer at row 0's ticket and emit, then its last block's clock64 at each mark (kStampClock + mark); then row
// 0's score block 0: its clock64 at its start and at each score mark (kStampScoreClock + mark), and the %globaltimer
// at its kScoreMarkScored.
enum SelectStamp : int {
  kStampEntry = 0,
  kStampTicket,
  kStampEnd,
  kStampClock,
  kStampScoreStart = kStampClock + kMarkCount,
  kStampScoreClock,
  kStampScored = kStampScoreClock + kScoreMarkCount,
  kStampCount
};

// The model's records (indexer_gpu.h index_select_stamps; V4's lightning indexer and V4.1's CSA2 indexer alike):
// the first kStampCount words as above (kStampEntry closed by the last block), then the active score blocks' starts,
// the times their queries were staged and their scores done (%globaltimer), under atomicMax (the earliest as ~t, so
// zeroed memory is the accumulators' start; the last block takes them back to zero for the layer's next launch, a
// step later), and what row 0's score block 0 saw. Only active blocks of a row that scores stamp (ordered before their
// arrival: the last block's acquire sees them); the others never arrive, so a late one could leave a stale start for
// the next launch. The staged and scored times say which of the row's score blocks sets its ticket, and by which
// phase (bench/gpu/NOTES.md "Session 68": block 0's scores were done ~6 us before the ticket).
enum SelectRecord : int {
  kAccStart = kStampCount,  // ~ the earliest active block's start
  kAccStartLatest,          // the latest active block's start
  kAccStagedLatest,         // the latest active block's queries staged (its last score_entries call's)
  kAccScored,               // ~ the earliest active block's scores done
  kAccScoredLatest,         // the latest active block's scores done
  kRecStartLatest,          // closed by the last block: kAccStartLatest,
  kRecStagedLatest,         // kAccStagedLatest,
  kRecScored,               // kAccScored (as t),
  kRecScoredLatest,         // kAccScoredLatest
  kRecLaunches,             // launches closed on this record
  kRecGrid,                 // gridDim.x, the active blocks and the row's entries (score block 0)
  kRecActive,
  kRecEntries,
  kRecWords
};

// kModelRecord: the model's record (above): the pass stamps zeroed at the ticket (a pass the early stop skips reads
// 0, not the previous launch's), the entry and start accumulators closed after the emit.
// runs (index_select_stamps_warm, indexer_gpu.h): 2 runs the select (passes and emit) twice on the same keys, the
// first unstamped (in_run: no record), so that the stamped run finds its code in the SM's instruction cache: the
// passes' and emit's stamps without the first run's instruction fetch. Both runs write the same rows. The keys stamp
// is taken again before the second run, so keys_cycles then holds the staging and the first run.
template <bool kModelRecord = false>
struct PhaseStamps {
  unsigned long long* t;  // null: a row past row 0, or an unstamped run
  int runs = 1;
  __device__ __forceinline__ int select_runs() const { return runs; }
  __device__ __forceinline__ PhaseStamps in_run(int run) const { return {run + 1 == runs ? t : nullptr, runs}; }
  __device__ __forceinline__ void operator()(int i) const {
    if (!t || threadIdx.x != 0) return;
    if constexpr (kModelRecord) {
      if (i == kMarkTicket)
        for (int p = 0; p < 4; ++p) t[kStampClock + kMarkPass + p] = 0;
    }
    t[kStampClock + i] = clock64();
    if (i == kMarkTicket) t[kStampTicket] = dev::globaltimer_ns();
    if (i == kMarkEmit) t[kStampEnd] = dev::globaltimer_ns();
    if constexpr (kModelRecord) {
      if (i == kMarkEmit) {
        t[kStampEntry] = ~atomicExch(t + kAccStart, 0ull);
        t[kRecStartLatest] = atomicExch(t + kAccStartLatest, 0ull);
        t[kRecStagedLatest] = atomicExch(t + kAccStagedLatest, 0ull);
        t[kRecScored] = ~atomicExch(t + kAccScored, 0ull);
        t[kRecScoredLatest] = atomicExch(t + kAccScoredLatest, 0ull);
        t[kRecLaunches] += 1;
      }
    }
  }
};

// A model record's start stamps (thread 0 of each block of row 0, at its start): active blocks of a row that scores
// (`scores`: the kernel tickets this row: V4 where n > topk, the CSA2 select where n > 0), n its visible entries,
// `blocks`, `block`: DecodeTiles's (the CSA2 selector form's grid has one more block, its block 0).
template <class Shape>
__device__ __forceinline__ void model_select_start(int n, bool scores, unsigned long long* t,
                                                   int blocks = int(gridDim.x), int block = int(blockIdx.x)) {
  const unsigned long long start = dev::globaltimer_ns();
  if (!scores) return;  // no ticket, no close
  const ShapeTiles<Shape> tiles(n, blocks, block);
  if (!tiles.block_active()) return;
  atomicMax(t + kAccStart, ~start);
  atomicMax(t + kAccStartLatest, start);
  if (tiles.block == 0) {  // score block 0
    t[kRecGrid] = gridDim.x;
    t[kRecActive] = unsigned(tiles.active);
    t[kRecEntries] = unsigned(n);
  }
}

// Every thread of a score block calls it at each score mark; after a barrier (the phase done block-wide; the stamps
// kernel's only), thread 0 stamps: row 0's score block 0 its clocks (t), and every active block of row 0 on a model
// record its staged and scored times into the record's accumulators (rec). Later score_entries calls of a block
// overwrite (t) or raise (rec) the earlier ones' stamps.
struct ScoreStamps {
  unsigned long long* t;    // null: another block
  unsigned long long* rec;  // null: not row 0, or not a model record
  __device__ __forceinline__ void operator()(int i) const {
    __syncthreads();
    if (threadIdx.x != 0) return;
    if (t) {
      t[kStampScoreClock + i] = clock64();
      if (i == kScoreMarkScored) t[kStampScored] = dev::globaltimer_ns();
    }
    if (rec && i != kScoreMarkKeys) {
      const unsigned long long now = dev::globaltimer_ns();
      if (i == kScoreMarkQueries) {
        atomicMax(rec + kAccStagedLatest, now);
      } else {
        atomicMax(rec + kAccScored, ~now);
        atomicMax(rec + kAccScoredLatest, now);
      }
    }
  }
};

}  // namespace index_scoring

// The record of the index source whose weights start at `layer` (a pointer naming the layer: its weights_proj) on the
// current device, or null where the launch should run its production kernel (no slot left, or the device has no
// records yet while `stream` captures). indexer_gpu.cu keeps the records (index_select_stamps, indexer_gpu.h).
unsigned long long* select_stamp_record(const void* layer, cudaStream_t stream);

}  // namespace deepinfer::cuda

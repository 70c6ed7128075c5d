// Host side of the MXFP4 decode stream on wgmma (cuda/stream_fp4_wgmma.cuh): the process-wide switch for callers
// that do not include CUDA headers (tests, benchmarks). On unless DEEPINFER_STREAM_FP4=f16 at start-up.
#pragma once

#include <vector>

#include "cuda/launch_span.h"

namespace deepinfer::cuda {

// Whether launch_stream runs the routed MXFP4 products (1..8 rows per group) on wgmma; the setter overrides the
// environment for the whole process (bench/gpu/NOTES.md "MXFP4 decode stream on wgmma").
bool stream_fp4_wgmma();
void set_stream_fp4_wgmma(bool on);

// Which blocks take the items left over when they do not divide evenly over the grid (cuda/stream_fp4_wgmma.cuh
// block_items): as the weights say (Fp4Experts::front_items, the default), or forced for every launch, spread over
// the grid (Even, DEEPINFER_FP4_ITEMS=even) or on the first blocks (Front, DEEPINFER_FP4_ITEMS=front). The same bits
// either way.
enum class Fp4Items : int { Weights, Even, Front };
Fp4Items stream_fp4_items();
void set_stream_fp4_items(Fp4Items items);

// The consume loop with a stage's halves overlapped (the default; DEEPINFER_FP4_HALF_OVERLAP=0 runs them in turn;
// cuda/stream_fp4_wgmma.cuh consume_stage_overlapped): one wgmma group in flight while the next batch widens. The same
// bits either way.
bool stream_fp4_half_overlap();
void set_stream_fp4_half_overlap(bool on);

// Phase stamps of the next launches (a diagnostic, roofline --fp4-phases; cuda/stream_fp4_wgmma.cuh StampSlot): each
// block writes kFp4StampSlots values at stamps + block x kFp4StampSlots (one block per SM); null (the default): off,
// the default kernel runs.
constexpr int kFp4StampSlots = 20;
constexpr int kFp4StampItems = 12;  // the slot of a block's count of items with rows (StampSlot kStItems)
void set_stream_fp4_stamps(unsigned long long* stamps);

// The same stamps inside the model's steps (bench/gpu/NOTES.md "The MXFP4 stream's stamps inside the step";
// v4_decode --fp4-stamps): with this on, every routed MXFP4 launch on wgmma (eager or captured) without the
// standalone pointer above runs the stamped kernel on its own record, one per packed weight pointer (a layer's w1|w3
// and w2) and device, in the order of the first stamped launches, at most 256; each launch overwrites its record. The
// stamped kernel computes the same output as the default one (it adds stores only). DEEPINFER_FP4_STEP_STAMPS=1 sets it
// process-wide, read once; the setter overrides it, and switching on allocates the current device's records (call it
// before a capture: a graph keeps the kernel and record it was captured with).
bool stream_fp4_step_stamps();
void set_stream_fp4_step_stamps(bool on);
// One record as the last launch that wrote it left it.
struct Fp4StepStampRecord {
  int slot = 0;
  int blocks = 0, n = 0, k = 0;  // the launch's grid and product shape (host-side, as launched / captured)
  unsigned long long start_ns = 0;  // the first block's start (%globaltimer): grows with each write; 0: never written
  std::vector<unsigned long long> stamps;  // [blocks][kFp4StampSlots], StampSlot's values
};
// The current device's records in slot order; call with the stamped launches complete (a synchronous copy).
std::vector<Fp4StepStampRecord> stream_fp4_step_stamps_read();

// One launch's stamps summarized as roofline --fp4-phases prints them: the blocks' globaltimer span (cuda/launch_span.h
// LaunchSpan), then per block, the median over blocks: SM cycles after the block's start (consumer thread 0's or the
// producer's own clock), the summed waits in cycles, and the counts.
struct Fp4LaunchPhases : LaunchSpan {
  // Consumers: past their PDL wait, the first group's B staged, the first stage's full barrier passed, the last item
  // stored (cycles after the start); warp 0's full-barrier waits (cycles) over its stages; stage_b (cycles); items.
  double cons_waited = 0, first_staged = 0, first_data = 0, cons_end = 0, full_wait = 0, stages = 0, stage_b = 0,
         items = 0;
  // The producer: past its PDL wait, its last copy issued (cycles after the start), its empty-barrier waits (cycles).
  double prod_waited = 0, prod_end = 0, empty_wait = 0;
  // The first stage_b's phases (consumer thread 0, cycles after the start): entry, zero codes stored, the rows' codes
  // stored, their scales stored.
  double b_entry = 0, b_zeroed = 0, b_codes = 0, b_scales = 0;
};
Fp4LaunchPhases fp4_launch_phases(const unsigned long long* stamps, int blocks);

}  // namespace deepinfer::cuda

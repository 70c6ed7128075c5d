// The host-side bookkeeping of a batched device step (the GPU models' step rows): which positions each slot
// holds, the compressed-KV pages it owns per compression ratio, and the five int32 row arrays the step's
// kernels read. Plain C++ with no CUDA (it lives outside src/**/gpu/ so the CPU tests cover it); the device
// side (model/gpu/step_rows.h) stages the arrays into pinned memory and uploads them with the page tables.
//
// A step is a list of (slot, token, position) rows. Rows of a slot form one consecutive run with consecutive
// positions continuing the slot's sequence; position 0 starts a new sequence in the slot and returns its pages
// to the free lists. Pages hold `page_size` compressed entries; a slot at length L holds L / ratio entries of a
// ratio, so it needs ceil((L / ratio) / page_size) pages. One page table per ratio serves every layer of that
// ratio, because those layers always hold the same number of entries for a sequence (model-spec §6).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace deepinfer {

struct StepCapacity {
  int slots = 8;            // sequences resident at once
  int max_context = 4096;   // positions per sequence
  int max_rows = 256;       // token rows per step
  int page_size = 64;       // compressed entries per page
};

// One token row of a step. A negative token -k - 1 means "the token sampled for row k of the previous step",
// resolved on the device: the asynchronous loop enqueues step N + 1 before reading step N.
struct StepRow {
  int slot = 0;
  int32_t token = 0;
  int32_t position = 0;
};

// The pages of one compression ratio: the page table [slots, max_pages] (page ids per slot, the first `used`
// valid), pages held per slot, and the free list (taken from the back).
struct RatioPages {
  int ratio = 0;
  int max_pages = 0;  // per slot
  std::vector<int32_t> table;
  std::vector<int> used;
  std::vector<int32_t> free_pages;
  bool dirty = true;  // the table changed since the device copy was last refreshed
};

class StepPlanner {
 public:
  // The row arrays, each [max_rows]: token, slot, position, and per row its slot run's first row and length.
  static constexpr int kRowArrays = 5;
  enum RowArray { kTokens = 0, kSlots = 1, kPositions = 2, kChunkFirst = 3, kChunkRows = 4 };

  // `who` prefixes the error messages ("v4 gpu model").
  StepPlanner(const StepCapacity& capacity, int vocab_size, std::string who);

  const StepCapacity& capacity() const { return capacity_; }
  // The page class of `ratio`, created on first use (every slot's pages of it free): the index into ratios().
  int add_ratio(int ratio);
  const std::vector<RatioPages>& ratios() const { return ratios_; }
  // Marks the table of class `cls` as copied to the device.
  void mark_uploaded(int cls) { ratios_[size_t(cls)].dirty = false; }
  int32_t length(int slot) const { return lengths_[size_t(slot)]; }

  // Validates the rows, releases the pages of slots restarting at position 0, reserves the pages the rows'
  // positions need, advances the slots' lengths and writes the row arrays into `arrays` [kRowArrays, max_rows]
  // (entries past the row count untouched). Throws deepinfer::Error for a bad row count / slot / position /
  // token, a position past max_context or no free page left.
  void plan(std::span<const StepRow> rows, std::span<int32_t> arrays);
  // Pretends that `slot` already holds `length` positions (its pages reserved): the benchmark's way to decode
  // at a long context without prefilling it.
  void assume_length(int slot, int32_t length);
  // Drops the sequence in `slot`: its pages go back to the free lists and its length to 0 (a context-parallel
  // prefill's non-home ranks drop the caches they built; docs/parallel.md "Context parallelism").
  void release(int slot);

 private:
  void reserve_pages(int slot, int32_t last_position);
  void release_pages(int slot);

  StepCapacity capacity_;
  int vocab_size_ = 0;
  std::string who_;
  std::vector<RatioPages> ratios_;
  std::vector<int32_t> lengths_;  // positions held per slot
};

}  // namespace deepinfer

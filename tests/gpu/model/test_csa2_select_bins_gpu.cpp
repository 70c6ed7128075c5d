// The V4.1 CSA2 indexer's decode select (csa2_decode_select_kernel: the scores and the select by bins in one launch,
// csa2_indexer_select's only form for TopK and Reindex at <= 8 rows since run 86, bench/gpu/NOTES.md "V4.1 CSA2
// indexer: decode select by bins"), checked two ways:
//   - its selection against the CPU's select_index_topk run on the kernel's own scores (read back from the
//     workspace): exact, the selection being a comparison of scores under the tie rule (equal: the lower entry);
//   - its scores and rows_out bitwise against the split kernels (csa2_score_kernel + csa2_select_kernel, the radix
//     select), which csa2_indexer_select takes above 8 rows: the same rows padded to 9 with copies of the first
//     (each row's scores and selection depend on that row's inputs only).
// TopK (ratio 2) and Reindex (ratio 1, inside random candidate blocks) rows at V4.1-Flash indexer shapes (32 heads x
// 128, top-512, blocks of 8), 1 to 8 rows, 1 to 4096 visible entries, with exact ties (duplicated and zero key rows),
// -inf scores, rows with fewer eligible entries than top-k (-1 padding) and none at all; rows past the shared copy
// of the keys (17,600 entries at dim 128: the last block reads the keys from L2, Csa2KeysInL2); the same launch
// twice (the arrival counts are reset); then the per-call time of the decode form (graphs of 20 calls).
// CandidateSourceBins: the candidate source's decode form (csa2_decode_candidates_kernel, the only one since run 92:
// the same launch, then the candidate blocks selected by bins in the row's last block) bitwise against the split
// kernels (the same rows padded to 9, as above), rows_out and the candidate flags, and against the CPU's
// select_index_topk / select_candidate_blocks on its scores; Timing prints its per-call times.
//
// ScoreShapes: the decode kernels at the other score shapes (DEEPINFER_CSA2_SCORE_SHAPE 64x1, 32x1, auto:
// csa2_indexer_gpu.h, bench/gpu/NOTES.md "Decode score shape") through the same checks (CPU, split kernels), and each
// launch entry for entry against the same launch at the reference shape (64x2): scores, rows_out, candidate flags; at
// entry counts where auto takes each branch (32-entry tiles when a row's ceil(n / 32) tiles fit its blocks, else
// the 64x2 split). GpuCsa2ScoreShape.V41StepBitwise: V4.1 test-checkpoint steps with the shapes against 64x2.
// BatchedStaging: the same checks with the score blocks' batched staging (DEEPINFER_INDEX_QUERY_STAGING=batched,
// indexer_gpu.h; bench/gpu/NOTES.md "Query staging in one round trip") at every shape, each launch entry for entry
// against the same launch at 64x2 with the loop staging; V41StepBitwise runs it too. SelectorBlock: the same checks
// with a block of its own selecting (DEEPINFER_CSA2_SELECTOR=block, csa2_indexer_gpu.h); V41StepBitwise runs it too.
//
// -inf scores: head 0's weight is -3e38 on some rows and its query is 4 on channel 0 only (the other heads' queries
// are 0 there); an entry whose key has 1 on channel 0 gets relu(q_0 . k) = 4, times -3e38 rounds to -inf in fp32
// (HeadSumF64 rounds each product to fp32 before the double sum), so its score is -inf; an entry with 0 there gets
// -0 from head 0 and a finite score.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cuda/device.h"
#include "gpu_test_model.h"
#include "gpu_test_util.h"
#include "layers/indexer/csa2_indexer.h"
#include "layers/indexer/csa2_indexer_gpu.h"
#include "module_steps.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

constexpr int kHeads = 32, kDim = 128, kTopk = 512, kBlockSize = 8, kTopkBlocks = 2048;
constexpr int kCapacity = 4096, kPageSize = 64, kMaxRows = 8;
// csa2_indexer_select takes the split kernels above kDecodeMaxRows (8, index_select_bins.cuh) rows.
constexpr int kSplitRows = kMaxRows + 1;
// Past the decode kernel's shared copy of the keys: score_smem_bytes<HeadSumF64>(128) = 70,400 bytes, 17,600 keys.
constexpr int kSharedKeys = 17600, kWideCapacity = 20480;

struct Inputs {
  int capacity = 0;  // entries per slot, also the workspace's max_entries
  Paging pg;
  std::vector<float> keys;  // [pool rows, dim]
  cuda::DeviceBuffer dkeys, table;
  cuda::PagedPool kp;
};

// Keys of `slots` slots: N(0, 1) bf16 values with 0 or 1 on channel 0 (1 marks a -inf entry on the rows whose
// head-0 weight is -3e38), a quarter of the entries copies of an earlier entry of the slot (exact ties) and a run of
// zero keys (score 0 for every row: ties at 0).
Inputs make_inputs(Rng& rng, int slots, int capacity) {
  Inputs in;
  in.capacity = capacity;
  in.pg = make_paging(rng, slots, capacity / kPageSize, kPageSize);
  in.keys.assign(size_t(in.pg.pool_rows()) * kDim, 0.0f);
  for (int s = 0; s < slots; ++s) {
    for (int e = 0; e < capacity; ++e) {
      float* k = in.keys.data() + size_t(in.pg.row(s, e)) * kDim;
      if (e >= 700 && e < 764) continue;  // zero keys
      if (e > 0 && rng.integer(0, 3) == 0) {
        const float* src = in.keys.data() + size_t(in.pg.row(s, rng.integer(0, e - 1))) * kDim;
        std::copy(src, src + kDim, k);
        continue;
      }
      std::vector<float> v = rng.normals(size_t(kDim));
      round_to_bf16(v);
      v[0] = rng.integer(0, 4) == 0 ? 1.0f : 0.0f;
      std::copy(v.begin(), v.end(), k);
    }
  }
  in.dkeys = cuda::to_device(to_bf16(in.keys));
  in.table = cuda::to_device(in.pg.table);
  in.kp = cuda::PagedPool{in.dkeys.as<cuda::bf16>(), in.table.as<int32_t>(), in.pg.max_pages, in.pg.page_size, kDim};
  return in;
}

// One step's rows (row r on slot r): queries (head 0: 4 on channel 0 only; the other heads: 0 on channel 0), head
// weights (head 0 -3e38 on about half the rows), positions for `ratio` and `visible` entries, and random candidate
// flags whose density varies by row (some rows keep fewer than top-k entries, one none).
struct Step {
  int stride = 0;  // candidate blocks per row
  std::vector<float> q, w;
  std::vector<int32_t> slots, positions;
  std::vector<uint8_t> flags;  // [rows, stride]
};

Step make_step(Rng& rng, const std::vector<int>& visible, int ratio, int capacity) {
  const int rows = int(visible.size());
  Step st;
  st.stride = capacity / kBlockSize;
  st.q = rng.normals(size_t(rows) * kHeads * kDim);
  round_to_bf16(st.q);  // the select reads bf16 queries (the engine's are FP4 values, exact in bf16)
  st.w = rng.normals(size_t(rows) * kHeads);
  st.flags.assign(size_t(rows) * st.stride, 0);
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < kHeads; ++h) {
      float* qh = st.q.data() + (size_t(r) * kHeads + h) * kDim;
      if (h == 0) std::fill(qh, qh + kDim, 0.0f);
      qh[0] = h == 0 ? 4.0f : 0.0f;
    }
    if (rng.integer(0, 1) == 1) st.w[size_t(r) * kHeads] = -3e38f;
    st.slots.push_back(r);
    st.positions.push_back(visible[size_t(r)] * ratio - 1 + rng.integer(0, ratio - 1));
    const int density = r == rows - 1 && rows > 2 ? 0 : rng.integer(1, 100);  // percent of candidate blocks
    for (int b = 0; b < st.stride; ++b) st.flags[size_t(r) * st.stride + b] = rng.integer(1, 100) <= density;
  }
  return st;
}

// The step's rows followed by copies of its first row, `rows` in all.
Step padded(const Step& st, int rows) {
  Step p = st;
  auto repeat_row0 = [](auto& v, size_t width, int to) {
    const auto row0 = std::vector(v.begin(), v.begin() + std::ptrdiff_t(width));
    for (int r = int(v.size() / width); r < to; ++r) v.insert(v.end(), row0.begin(), row0.end());
  };
  repeat_row0(p.q, size_t(kHeads) * kDim, rows);
  repeat_row0(p.w, size_t(kHeads), rows);
  repeat_row0(p.slots, 1, rows);
  repeat_row0(p.positions, 1, rows);
  repeat_row0(p.flags, size_t(p.stride), rows);
  return p;
}

// The CSA2 decode kernels' score shape (set_csa2_score_shape) and staging (set_index_score_staging) under test,
// restored at the end of a test.
using Shape = cuda::IndexScoreShape;
using Staging = cuda::IndexScoreStaging;
struct Csa2ScoreRestore {
  Shape was = cuda::csa2_score_shape();
  Staging staging_was = cuda::index_score_staging();
  cuda::Csa2Selector selector_was = cuda::csa2_selector();
  ~Csa2ScoreRestore() {
    cuda::set_csa2_score_shape(was);
    cuda::set_index_score_staging(staging_was);
    cuda::set_csa2_selector(selector_was);
  }
};
const char* shape_name(Shape s) {
  return s == Shape::Tile64x1 ? "64x1" : s == Shape::Tile32x1 ? "32x1" : s == Shape::Auto ? "auto" : "64x2";
}

struct Selected {
  std::vector<int32_t> rows_out;  // [rows, kTopk]
  std::vector<float> scores;      // the workspace: [rows, capacity]
  std::vector<uint8_t> flags;     // CandidateSource: the candidate blocks written, [rows, stride]
};

// Row r's first n scores of a launch's workspace ([rows, capacity]).
std::vector<float> row_scores(const Selected& s, int r, int capacity, int n) {
  const auto first = s.scores.begin() + std::ptrdiff_t(size_t(r) * size_t(capacity));
  return std::vector<float>(first, first + n);
}

struct Launch {
  cuda::DeviceBuffer dq, dw, dslots, dpos, flags, out, ws;
  cuda::Csa2IndexerGpu g;
  cuda::CandidateBlocks cand;
  int rows = 0, ratio = 1, capacity = 0;
  cuda::Csa2Selection selection = cuda::Csa2Selection::TopK;

  Launch(const Step& st, int ratio_, cuda::Csa2Selection sel, int capacity_)
      : ratio(ratio_), capacity(capacity_), selection(sel) {
    rows = int(st.slots.size());
    dq = cuda::to_device(to_bf16(st.q));
    dw = cuda::to_device(st.w);
    dslots = cuda::to_device(st.slots);
    dpos = cuda::to_device(st.positions);
    flags = cuda::to_device(st.flags);
    out = cuda::DeviceBuffer(size_t(rows) * kTopk * sizeof(int32_t));
    ws = cuda::DeviceBuffer(cuda::csa2_indexer_workspace_bytes(rows, capacity));
    g.heads = kHeads;
    g.dim = kDim;
    g.topk = kTopk;
    cand = cuda::CandidateBlocks{flags.as<uint8_t>(), st.stride, kBlockSize, kTopkBlocks};
  }
  void enqueue(const Inputs& in, cudaStream_t stream) {
    cuda::csa2_indexer_select(dq.as<cuda::bf16>(), dw.as<float>(), dslots.as<int32_t>(), dpos.as<int32_t>(), rows, g,
                              ratio, in.kp, capacity, selection, cand, out.as<int32_t>(), ws.get(), stream);
  }
  // run at the reference score shape (64x2) and staging (loop), the ones under test restored after.
  Selected run_default_variant(const Inputs& in) {
    const Shape shape = cuda::csa2_score_shape();
    const Staging staging = cuda::index_score_staging();
    cuda::set_csa2_score_shape(Shape::Tile64x2);
    cuda::set_index_score_staging(Staging::Loop);
    Selected s = run(in);
    cuda::set_csa2_score_shape(shape);
    cuda::set_index_score_staging(staging);
    return s;
  }
  Selected run(const Inputs& in) {
    const bool source = selection == cuda::Csa2Selection::CandidateSource;
    out.fill_bytes(0x7F);
    ws.fill_bytes(0xFF);
    if (source) flags.fill_bytes(0x55);  // every flag of the rows must be written
    enqueue(in, nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    return {cuda::to_host<int32_t>(out, size_t(rows) * kTopk), cuda::to_host<float>(ws, size_t(rows) * capacity),
            source ? cuda::to_host<uint8_t>(flags, size_t(rows) * cand.stride) : std::vector<uint8_t>{}};
  }
};

const char* selection_name(cuda::Csa2Selection s) {
  return s == cuda::Csa2Selection::TopK ? "topk" : s == cuda::Csa2Selection::Reindex ? "reindex" : "candidates";
}

// Another score shape than 64x2 or the batched staging under test: the mismatches of a launch's rows_out, the rows'
// scores and (flags) its candidate flags against the same launch at 64x2 with the loop staging.
bool variant_under_test() {
  return cuda::csa2_score_shape() != Shape::Tile64x2 || cuda::index_score_staging() != Staging::Loop;
}
size_t vs_default_variant(const Selected& got, const Selected& base, const std::vector<int>& visible, int capacity) {
  size_t bad = bitwise_mismatches(got.rows_out, base.rows_out) + bitwise_mismatches(got.flags, base.flags);
  for (int r = 0; r < int(visible.size()); ++r)
    bad += bitwise_mismatches(row_scores(got, r, capacity, visible[size_t(r)]),
                              row_scores(base, r, capacity, visible[size_t(r)]));
  return bad;
}
size_t default_variant_outputs(const Selected& got, const std::vector<int>& visible) {
  size_t n = got.rows_out.size() + got.flags.size();
  for (const int v : visible) n += size_t(v);
  return n;
}

// Mismatch counts over the cases of one selection.
struct Tally {
  size_t vs_cpu = 0, vs_split = 0, again = 0, scores = 0;  // mismatching outputs (scores: entries)
  size_t outputs = 0, entries = 0, padded = 0, selecting = 0;
  size_t vs_64x2 = 0, compared_64x2 = 0;  // another shape or staging: against the same launches at 64x2, loop

  void report(const std::string& name) const {
    std::printf("  %s: %zu of %zu outputs are -1 padding, %zu rows choose among more than top-k\n", name.c_str(),
                padded, outputs, selecting);
    EXPECT_GT(selecting, 0u) << name << ": no row exercised the top-k selection";
    report_exact("csa2_decode_select " + name + " vs cpu", vs_cpu, outputs);
    report_exact("csa2_decode_select " + name + " vs split", vs_split, outputs);
    report_exact("csa2_decode_select " + name + " again", again, outputs);
    report_exact("csa2_decode_select " + name + " scores vs split", scores, entries);
    if (compared_64x2 > 0) report_exact("csa2_decode_select " + name + " vs 64x2", vs_64x2, compared_64x2);
  }
};

// One step of `visible.size()` (<= 8) rows through the decode kernel (twice) and, padded to kSplitRows, through the
// split kernels; every row's selection also against select_index_topk on the decode kernel's scores.
void check_step(Rng& rng, const Inputs& in, const std::vector<int>& visible, int ratio, cuda::Csa2Selection sel,
                Tally& t) {
  const int rows = int(visible.size());
  const Step st = make_step(rng, visible, ratio, in.capacity);
  Launch decode(st, ratio, sel, in.capacity);
  const Selected got = decode.run(in);
  const Selected again = decode.run(in);  // the arrival counts were reset
  const Selected split = Launch(padded(st, kSplitRows), ratio, sel, in.capacity).run(in);
  if (variant_under_test()) {
    t.vs_64x2 += vs_default_variant(got, decode.run_default_variant(in), visible, in.capacity);
    t.compared_64x2 += default_variant_outputs(got, visible);
  }
  for (int r = 0; r < rows; ++r) {
    const int n = visible[size_t(r)], slot = st.slots[size_t(r)];
    const std::vector<float> scores = row_scores(got, r, in.capacity, n);
    const std::vector<float> split_scores = row_scores(split, r, in.capacity, n);
    t.scores += bitwise_mismatches(scores, split_scores);
    t.entries += size_t(n);

    std::vector<uint8_t> allowed;  // Reindex: the row's candidate blocks, per entry
    if (sel == cuda::Csa2Selection::Reindex)
      for (int e = 0; e < n; ++e) allowed.push_back(st.flags[size_t(r) * st.stride + size_t(e / kBlockSize)]);
    const std::vector<int64_t> ref = select_index_topk(scores, allowed.empty() ? nullptr : &allowed, kTopk);
    size_t eligible = 0;
    for (int e = 0; e < n; ++e) eligible += scores[size_t(e)] != -INFINITY && (allowed.empty() || allowed[size_t(e)]);
    t.selecting += eligible > size_t(kTopk);

    for (int i = 0; i < kTopk; ++i) {
      const size_t o = size_t(r) * kTopk + size_t(i);
      const int32_t want = i < int(ref.size()) ? int32_t(in.pg.row(slot, int(ref[size_t(i)]))) : -1;
      const bool bad = got.rows_out[o] != want || split.rows_out[o] != got.rows_out[o];
      if (bad && t.vs_cpu + t.vs_split == 0)  // the first one
        std::printf("  first mismatch: %s rows %d row %d (%d entries) place %d cpu %d decode %d split %d\n",
                    selection_name(sel), rows, r, n, i, want, got.rows_out[o], split.rows_out[o]);
      t.vs_cpu += got.rows_out[o] != want;
      t.vs_split += split.rows_out[o] != got.rows_out[o];
      t.again += again.rows_out[o] != got.rows_out[o];
      t.padded += want == -1;
    }
    t.outputs += size_t(kTopk);
  }
}

// ---- The candidate source at decode (csa2_decode_candidates_kernel) against the split kernels (the same rows padded
// to kSplitRows) and the CPU's selections.

struct CandidateTally {
  size_t rows_vs_cpu = 0, rows_vs_split = 0, flags_vs_cpu = 0, flags_vs_split = 0, again = 0, scores = 0;
  size_t outputs = 0, flags = 0, entries = 0, selecting = 0;
  size_t vs_64x2 = 0, compared_64x2 = 0;  // another shape or staging: against the same launches at 64x2, loop

  void report(const std::string& name, bool expect_selecting) const {
    std::printf("  %s: %zu rows keep fewer candidate blocks than are eligible\n", name.c_str(), selecting);
    if (expect_selecting) {
      EXPECT_GT(selecting, 0u) << name << ": no row exercised the candidate block selection";
    }
    report_exact("csa2_decode_candidates " + name + " rows vs cpu", rows_vs_cpu, outputs);
    report_exact("csa2_decode_candidates " + name + " rows vs split", rows_vs_split, outputs);
    report_exact("csa2_decode_candidates " + name + " flags vs cpu", flags_vs_cpu, flags);
    report_exact("csa2_decode_candidates " + name + " flags vs split", flags_vs_split, flags);
    report_exact("csa2_decode_candidates " + name + " again", again, outputs + flags);
    report_exact("csa2_decode_candidates " + name + " scores vs split", scores, entries);
    if (compared_64x2 > 0) report_exact("csa2_decode_candidates " + name + " vs 64x2", vs_64x2, compared_64x2);
  }
};

// One step of `visible.size()` (<= 8) candidate-source rows (ratio 1) with candidate blocks of `block_size` entries,
// `keep` of them kept: through the decode form (twice: the arrival counts are reset) and, padded to kSplitRows, the
// split kernels; rows_out, the flags of every row (the whole stride: the runs fill them with 0x55 first) and the
// scores compared bitwise, and the decode form's rows_out and flags against select_index_topk (unmasked) and
// select_candidate_blocks run on its scores.
void check_candidates(Rng& rng, const Inputs& in, const std::vector<int>& visible, int block_size, int keep,
                      CandidateTally& t) {
  const int rows = int(visible.size());
  Step st = make_step(rng, visible, 1, in.capacity);
  st.stride = (in.capacity + block_size - 1) / block_size;
  st.flags.assign(size_t(rows) * size_t(st.stride), 0);
  const auto source = cuda::Csa2Selection::CandidateSource;
  Launch bins(st, 1, source, in.capacity), split(padded(st, kSplitRows), 1, source, in.capacity);
  for (Launch* l : {&bins, &split}) {
    l->cand.block_size = block_size;
    l->cand.topk_blocks = keep;
  }
  const Selected got = bins.run(in);
  const Selected again = bins.run(in);
  const Selected ref = split.run(in);
  if (variant_under_test()) {
    t.vs_64x2 += vs_default_variant(got, bins.run_default_variant(in), visible, in.capacity);
    t.compared_64x2 += default_variant_outputs(got, visible);
  }

  for (int r = 0; r < rows; ++r) {
    const int n = visible[size_t(r)], slot = st.slots[size_t(r)];
    const std::vector<float> scores = row_scores(got, r, in.capacity, n);
    const std::vector<float> split_scores = row_scores(ref, r, in.capacity, n);
    t.scores += bitwise_mismatches(scores, split_scores);
    t.entries += size_t(n);

    const std::vector<int64_t> top = select_index_topk(scores, nullptr, kTopk);
    for (int i = 0; i < kTopk; ++i) {
      const size_t o = size_t(r) * kTopk + size_t(i);
      const int32_t want = i < int(top.size()) ? int32_t(in.pg.row(slot, int(top[size_t(i)]))) : -1;
      if ((got.rows_out[o] != want || ref.rows_out[o] != got.rows_out[o]) && t.rows_vs_cpu + t.rows_vs_split == 0)
        std::printf("  first rows mismatch: rows %d row %d (%d entries) place %d cpu %d bins %d split %d\n", rows, r, n,
                    i, want, got.rows_out[o], ref.rows_out[o]);
      t.rows_vs_cpu += got.rows_out[o] != want;
      t.rows_vs_split += ref.rows_out[o] != got.rows_out[o];
      t.again += again.rows_out[o] != got.rows_out[o];
    }
    t.outputs += size_t(kTopk);

    // select_candidate_blocks marks the entries of the kept blocks; a block's flag is its first entry's mark, 0 past
    // the visible blocks.
    const std::vector<uint8_t> mask = select_candidate_blocks(scores, block_size, keep);
    const int blocks = (n + block_size - 1) / block_size;
    int eligible = 0;
    for (int b = 0; b < blocks; ++b) {
      bool finite = b == blocks - 1;  // the newest block is always a candidate
      for (int e = b * block_size; e < std::min(n, (b + 1) * block_size); ++e) finite |= scores[size_t(e)] != -INFINITY;
      eligible += finite;
    }
    t.selecting += eligible > keep;
    for (int b = 0; b < st.stride; ++b) {
      const size_t o = size_t(r) * st.stride + size_t(b);
      const uint8_t want = b < blocks ? mask[size_t(b) * block_size] : 0;
      if ((got.flags[o] != want || ref.flags[o] != got.flags[o]) && t.flags_vs_cpu + t.flags_vs_split == 0)
        std::printf("  first flags mismatch: rows %d row %d (%d entries, blocks of %d, keep %d) block %d cpu %d bins %d "
                    "split %d\n",
                    rows, r, n, block_size, keep, b, want, got.flags[o], ref.flags[o]);
      t.flags_vs_cpu += got.flags[o] != want;
      t.flags_vs_split += ref.flags[o] != got.flags[o];
      t.again += again.flags[o] != got.flags[o];
    }
    t.flags += size_t(st.stride);
  }
}

}  // namespace

// 1..8 rows of 1..4096 visible entries (around top-k, the tile edges, the capacity), against the CPU and the split
// kernels.
TEST(GpuCsa2SelectBins, SameRowsAsCpuAndSplitKernels) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  const Inputs in = make_inputs(rng, kMaxRows, kCapacity);
  const std::vector<int> fixed = {1, 2, 63, 64, 65, 511, 512, 513, 640, 1000, 1024, 2047, 2048, 3001, 4095, 4096};
  for (const auto sel : {cuda::Csa2Selection::TopK, cuda::Csa2Selection::Reindex}) {
    const int ratio = sel == cuda::Csa2Selection::TopK ? 2 : 1;  // Full layers: ratio 2; the Reindex group: 1
    size_t fixed_at = 0;  // the first rows take the fixed counts (twice over), the rest random ones
    Tally t;
    for (int trial = 0; trial < 24; ++trial) {
      const int rows = trial < kMaxRows ? trial + 1 : rng.integer(1, kMaxRows);
      std::vector<int> visible;
      for (int r = 0; r < rows; ++r)
        visible.push_back(fixed_at < fixed.size() * 2 ? fixed[fixed_at++ % fixed.size()] : rng.integer(1, kCapacity));
      check_step(rng, in, visible, ratio, sel, t);
    }
    t.report(selection_name(sel));
    EXPECT_GT(t.padded, 0u) << selection_name(sel) << ": no row had fewer eligible entries than top-k";
  }
}

// Rows past the shared copy of the keys (the last block reads them from L2), next to rows at its edge.
TEST(GpuCsa2SelectBins, KeysFromL2) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  const Inputs in = make_inputs(rng, 2, kWideCapacity);
  const std::vector<std::vector<int>> steps = {
      {kSharedKeys}, {kSharedKeys + 1}, {kWideCapacity}, {kSharedKeys, kSharedKeys + 1}, {kWideCapacity - 7, 3000}};
  for (const auto sel : {cuda::Csa2Selection::TopK, cuda::Csa2Selection::Reindex}) {
    const int ratio = sel == cuda::Csa2Selection::TopK ? 2 : 1;
    Tally t;
    for (const auto& visible : steps) check_step(rng, in, visible, ratio, sel, t);
    t.report(std::string(selection_name(sel)) + " keys_from_l2");
  }
}

// The candidate source's decode form (csa2_decode_candidates_kernel) against the split kernels and the CPU: rows_out
// and the candidate flags. V4.1's blocks (8 entries, 2048 kept: every eligible block of <= 4096 entries), fewer kept
// (100, 1: the select by bins over the block keys; 1 keeps the newest block only), blocks of 3 (partial last blocks);
// then 20,480-entry rows: 2560 blocks of 8 (more than 2048 eligible, keys in shared memory, the entry keys from L2
// past 17,600), and blocks of 1 (the block keys from L2 past 15,552 blocks: with the 2048 chosen ids, the shared
// area's 17,600 words).
TEST(GpuCsa2SelectBins, CandidateSourceBins) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  struct Blocks {
    int size, keep;
    bool selecting;  // some row must keep fewer blocks than are eligible
  };
  const auto name = [](const Blocks& bl, const char* what) {
    return std::string(what) + " blocks of " + std::to_string(bl.size) + " keep " + std::to_string(bl.keep);
  };
  {
    const Inputs in = make_inputs(rng, kMaxRows, kCapacity);
    const std::vector<int> fixed = {1, 2, 7, 8, 9, 63, 64, 65, 511, 512, 513, 800, 1000, 2047, 3001, 4095, 4096};
    for (const Blocks bl : {Blocks{kBlockSize, kTopkBlocks, false}, Blocks{kBlockSize, 100, true},
                            Blocks{kBlockSize, 1, true}, Blocks{3, 300, true}}) {
      size_t fixed_at = 0;
      CandidateTally t;
      for (int trial = 0; trial < 16; ++trial) {
        const int rows = trial < kMaxRows ? trial + 1 : rng.integer(1, kMaxRows);
        std::vector<int> visible;
        for (int r = 0; r < rows; ++r)
          visible.push_back(fixed_at < fixed.size() * 2 ? fixed[fixed_at++ % fixed.size()] : rng.integer(1, kCapacity));
        check_candidates(rng, in, visible, bl.size, bl.keep, t);
      }
      t.report(name(bl, "capacity 4096"), bl.selecting);
    }
  }
  const Inputs wide = make_inputs(rng, 2, kWideCapacity);
  const std::vector<std::vector<int>> steps = {
      {kWideCapacity}, {kSharedKeys, kSharedKeys + 1}, {15552, 15553}, {kWideCapacity - 5, 3000}, {16385, 16384}};
  for (const Blocks bl : {Blocks{kBlockSize, kTopkBlocks, true}, Blocks{1, kTopkBlocks, true}}) {
    CandidateTally t;
    for (const auto& visible : steps) check_candidates(rng, wide, visible, bl.size, bl.keep, t);
    t.report(name(bl, "capacity 20480"), bl.selecting);
  }
}

// Per-call device time of the decode select, graphs of 20 calls (time_per_call_us), one row at 1024 / 2048 / 4096
// entries, at each score shape (64x2 first; the graphs are captured per shape) and staging (loop first, then
// "staging=batched").
TEST(GpuCsa2SelectBins, Timing) {
  DI_SKIP_WITHOUT_GPU();
  Csa2ScoreRestore restore;
  Rng rng;
  const Inputs in = make_inputs(rng, kMaxRows, kCapacity);
  cudaStream_t stream;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<std::pair<Shape, Staging>> variants;
  for (const Staging staging : {Staging::Loop, Staging::Batched})
    for (const Shape shape : {Shape::Tile64x2, Shape::Auto, Shape::Tile32x1, Shape::Tile64x1})
      variants.emplace_back(shape, staging);
  for (const auto& [shape, staging] : variants) {
    cuda::set_csa2_score_shape(shape);
    cuda::set_index_score_staging(staging);
    const char* staging_name = staging == Staging::Batched ? "batched" : "loop";
    for (const auto sel : {cuda::Csa2Selection::TopK, cuda::Csa2Selection::Reindex}) {
      const int ratio = sel == cuda::Csa2Selection::TopK ? 2 : 1;
      for (const int entries : {1024, 2048, 4096}) {
        Launch l(make_step(rng, {entries}, ratio, kCapacity), ratio, sel, kCapacity);
        const double us = time_per_call_us(stream, [&] { l.enqueue(in, stream); });
        std::printf("CSA2_SELECT_TIME %s rows=1 entries=%d capacity=%d decode_us=%.2f shape=%s staging=%s\n",
                    selection_name(sel), entries, kCapacity, us, shape_name(shape), staging_name);
      }
    }
    // The candidate source (ratio 1).
    for (const int entries : {1024, 2048, 4096}) {
      Launch l(make_step(rng, {entries}, 1, kCapacity), 1, cuda::Csa2Selection::CandidateSource, kCapacity);
      const double us = time_per_call_us(stream, [&] { l.enqueue(in, stream); });
      std::printf("CSA2_SELECT_TIME candidates rows=1 entries=%d capacity=%d decode_us=%.2f shape=%s staging=%s\n",
                  entries, kCapacity, us, shape_name(shape), staging_name);
    }
  }
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
}

// The score shapes (DEEPINFER_CSA2_SCORE_SHAPE 64x1, 32x1, auto) through check_step / check_candidates (the CPU, the
// split kernels, and the same launches at 64x2 entry for entry). The grid of 32-entry shapes at capacity C and R rows
// is min(ceil(C / 32), 264 / R) blocks; auto scores a row in 32-entry tiles when its ceil(n / 32) tiles fit them:
//   capacity 4096: 1 row, 128 blocks: every row (1024, 2048, 4096); 3 rows, 88 blocks: up to 2816 entries (2817 and
//   4096 take the 64x2 split); 8 rows, 33 blocks: up to 1056 (1057 .. 4096 the 64x2 split);
//   capacity 20480: 1 row, 264 blocks: up to 8448 (8449 and 20480, past the shared keys, the 64x2 split); 2 rows,
//   132 blocks: up to 4224.
namespace {

// check_step / check_candidates of the ScoreShapes steps at the score shape and staging set (against the CPU, the
// split kernels, and the same launches at 64x2 with the loop staging).
void check_score_variant(const std::string& name) {
  const std::vector<std::vector<int>> narrow_steps = {
      {1024}, {2048}, {4096}, {2816, 2817, 4096}, {1024, 2048, 4096, 600, 1056, 1057, 3001, 513}};
  const std::vector<std::vector<int>> wide_steps = {{8448}, {8449}, {kWideCapacity}, {kWideCapacity, kSharedKeys + 1},
                                                    {4224, 4225}};
  Rng rng;
  const Inputs in = make_inputs(rng, kMaxRows, kCapacity), wide = make_inputs(rng, 2, kWideCapacity);
  for (const auto sel : {cuda::Csa2Selection::TopK, cuda::Csa2Selection::Reindex}) {
    const int ratio = sel == cuda::Csa2Selection::TopK ? 2 : 1;
    Tally t;
    for (const auto& visible : narrow_steps) check_step(rng, in, visible, ratio, sel, t);
    for (const auto& visible : wide_steps) check_step(rng, wide, visible, ratio, sel, t);
    t.report(std::string(selection_name(sel)) + " " + name);
  }
  CandidateTally t, t_wide;
  for (const auto& visible : narrow_steps) check_candidates(rng, in, visible, kBlockSize, 100, t);
  for (const auto& visible : wide_steps) check_candidates(rng, wide, visible, kBlockSize, kTopkBlocks, t_wide);
  t.report(name + " capacity 4096 blocks of 8 keep 100", true);
  t_wide.report(name + " capacity 20480 blocks of 8 keep 2048", true);
}

}  // namespace

TEST(GpuCsa2SelectBins, ScoreShapes) {
  DI_SKIP_WITHOUT_GPU();
  Csa2ScoreRestore restore;
  cuda::set_index_score_staging(Staging::Loop);
  for (const Shape shape : {Shape::Auto, Shape::Tile32x1, Shape::Tile64x1}) {
    cuda::set_csa2_score_shape(shape);
    check_score_variant(std::string("shape ") + shape_name(shape));
  }
}

// The batched staging (DEEPINFER_INDEX_QUERY_STAGING=batched) at every score shape through the ScoreShapes checks:
// V4.1's 32 heads (the staged rows past them zero), rows past the first tile of a block (64x2 at 20,480 entries: two
// 64-entry tiles a block, the second staged alone), partial tiles (entries past n staged as zeros).
TEST(GpuCsa2SelectBins, BatchedStaging) {
  DI_SKIP_WITHOUT_GPU();
  Csa2ScoreRestore restore;
  cuda::set_index_score_staging(Staging::Batched);
  cuda::set_csa2_selector(cuda::Csa2Selector::Ticket);  // the selector form at these shapes: SelectorBlock
  for (const Shape shape : {Shape::Tile64x2, Shape::Auto, Shape::Tile32x1, Shape::Tile64x1}) {
    cuda::set_csa2_score_shape(shape);
    check_score_variant(std::string("batched staging shape ") + shape_name(shape));
  }
}

// The selector form (DEEPINFER_CSA2_SELECTOR=block: a block of its own rehearses the select, waits for the score
// blocks and selects) at the shapes that have it (batched staging, auto and 64x2) through the ScoreShapes checks:
// the same rows and candidate flags as the CPU, the split kernels and the ticket form at 64x2 with the loop staging.
// The selector runs where its one more block a row fits one wave (selector_fits: here the 4,096-entry rows at up to 2
// rows at auto, up to 4 at 64x2); the other steps (more rows, the 20,480-entry rows) run the ticket form under this
// switch, as in the model.
TEST(GpuCsa2SelectBins, SelectorBlock) {
  DI_SKIP_WITHOUT_GPU();
  Csa2ScoreRestore restore;
  cuda::set_index_score_staging(Staging::Batched);
  cuda::set_csa2_selector(cuda::Csa2Selector::Block);
  for (const Shape shape : {Shape::Auto, Shape::Tile64x2}) {
    cuda::set_csa2_score_shape(shape);
    check_score_variant(std::string("selector block, batched staging shape ") + shape_name(shape));
  }
}

// V4.1 test-checkpoint steps (gpu_test_model.h: index_topk 16, Full ratio 2 / 1 and the candidate source, 4 kept
// blocks of 4, Reindex) at the CSA2 score shapes against 64x2, bitwise: a 64-token prefill chunk (the split kernels,
// shape-free) then 96 decode steps, positions 64 .. 159 (32 .. 80 ratio-2 entries, 65 .. 160 ratio-1: every index
// source chooses among more than top-k, the candidate source among more than 4 blocks; the grid of 32-entry shapes
// covers a slot's capacity (at most 256 entries) in at most 8 blocks, so auto takes 32-entry tiles on every row).
// 32x1 eagerly and from the step graphs (slot 0 restarted too), auto and 64x1 eagerly; the batched staging
// (DEEPINFER_INDEX_QUERY_STAGING=batched) at auto eagerly and at 64x2 from the step graphs; the selector form
// (DEEPINFER_CSA2_SELECTOR=block) at auto with the batched staging, eagerly and from the step graphs.
TEST(GpuCsa2ScoreShape, V41StepBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Csa2ScoreRestore restore;
  gpu_steps::Models m = gpu_steps::load_cpu_and_gpu(gpu_test_model_v41_dir(), gpu_steps::make_v41_test_gpu);
  const std::vector<int32_t> prompt = gpu_steps::random_tokens(103, 160, m.config.vocab_size);
  auto feed = [&](Shape shape, int slot, bool graphs, Staging staging = Staging::Loop,
                  cuda::Csa2Selector selector = cuda::Csa2Selector::Ticket) {
    cuda::set_csa2_score_shape(shape);
    cuda::set_index_score_staging(staging);
    cuda::set_csa2_selector(selector);
    return gpu_steps::feed_chunk_then_decode(*m.gpu, prompt, slot, 64, graphs);
  };
  const std::vector<float> base = feed(Shape::Tile64x2, 0, false);
  const std::vector<std::pair<std::string, std::vector<float>>> runs = {
      {"32x1 eager", feed(Shape::Tile32x1, 1, false)},
      {"32x1 graphs", feed(Shape::Tile32x1, 2, true)},
      {"32x1 graphs, slot 0 restarted", feed(Shape::Tile32x1, 0, true)},
      {"auto eager", feed(Shape::Auto, 3, false)},
      {"64x1 eager, slot 1 restarted", feed(Shape::Tile64x1, 1, false)},
      {"batched staging auto eager, slot 2 restarted", feed(Shape::Auto, 2, false, Staging::Batched)},
      {"batched staging 64x2 graphs, slot 3 restarted", feed(Shape::Tile64x2, 3, true, Staging::Batched)},
      {"selector block auto eager, slot 0 restarted",
       feed(Shape::Auto, 0, false, Staging::Batched, cuda::Csa2Selector::Block)},
      {"selector block auto graphs, slot 1 restarted",
       feed(Shape::Auto, 1, true, Staging::Batched, cuda::Csa2Selector::Block)}};
  for (const auto& [what, logits] : runs)
    report_exact("v41 csa2 score shape " + what + " vs 64x2 eager", gpu_steps::bitwise_mismatches(base, logits),
                 base.size());
}

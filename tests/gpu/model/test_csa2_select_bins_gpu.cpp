// The V4.1 CSA2 indexer's decode select by bins (DEEPINFER_CSA2_SELECT=bins: csa2_decode_select_kernel, one launch)
// against the split radix kernels (the default, whose selection test_v41_modules_gpu.cpp checks against the CPU's
// select_index_topk), bitwise: rows_out of TopK (ratio 2) and Reindex (ratio 1, inside random candidate blocks) rows
// at V4.1-Flash indexer shapes (32 heads x 128, top-512, blocks of 8), 1 to 8 rows, 1 to 4096 visible entries, with
// exact ties (duplicated and zero key rows), -inf scores, rows with fewer eligible entries than top-k (-1 padding)
// and none at all; then the per-call times of both forms (graphs of 20 calls).
//
// -inf scores: head 0's weight is -3e38 on some rows and its query is 4 on channel 0 only (the other heads' queries
// are 0 there); an entry whose key has 1 on channel 0 gets relu(q_0 . k) = 4, times -3e38 rounds to -inf in fp32
// (HeadSumF64 rounds each product to fp32 before the double sum), so its score is -inf; an entry with 0 there gets
// -0 from head 0 and a finite score.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/device.h"
#include "gpu_test_util.h"
#include "layers/indexer/csa2_indexer_gpu.h"
#include "module_steps.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

constexpr int kHeads = 32, kDim = 128, kTopk = 512, kBlockSize = 8, kTopkBlocks = 2048;
constexpr int kCapacity = 4096, kPageSize = 64, kMaxRows = 8;

using FormScope = SwitchScope<cuda::Csa2SelectForm, cuda::csa2_select_form, cuda::set_csa2_select_form>;

struct Inputs {
  Paging pg;
  std::vector<float> keys;  // [pool rows, dim]
  cuda::DeviceBuffer dkeys, table;
  cuda::PagedPool kp;
};

// Keys of kMaxRows slots: N(0, 1) bf16 values with 0 or 1 on channel 0 (1 marks a -inf entry on the rows whose
// head-0 weight is -3e38), a quarter of the entries copies of an earlier entry of the slot (exact ties) and a run of
// zero keys (score 0 for every row: ties at 0).
Inputs make_inputs(Rng& rng) {
  Inputs in;
  in.pg = make_paging(rng, kMaxRows, kCapacity / kPageSize, kPageSize);
  in.keys.assign(size_t(in.pg.pool_rows()) * kDim, 0.0f);
  for (int s = 0; s < kMaxRows; ++s) {
    for (int e = 0; e < kCapacity; ++e) {
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

// One step's rows: queries (head 0: 4 on channel 0 only; the other heads: 0 on channel 0), head weights (head 0
// -3e38 on about half the rows), positions for `ratio` and `visible` entries, and random candidate flags whose
// density varies by row (some rows keep fewer than top-k entries, one none).
struct Step {
  std::vector<float> q, w;
  std::vector<int32_t> slots, positions;
  std::vector<uint8_t> flags;  // [rows, kCapacity / kBlockSize]
};

Step make_step(Rng& rng, const std::vector<int>& visible, int ratio) {
  const int rows = int(visible.size()), stride = kCapacity / kBlockSize;
  Step st;
  st.q = rng.normals(size_t(rows) * kHeads * kDim);
  st.w = rng.normals(size_t(rows) * kHeads);
  st.flags.assign(size_t(rows) * stride, 0);
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
    for (int b = 0; b < stride; ++b) st.flags[size_t(r) * stride + b] = rng.integer(1, 100) <= density;
  }
  return st;
}

struct Launch {
  cuda::DeviceBuffer dq, dw, dslots, dpos, flags, out, ws;
  cuda::Csa2IndexerGpu g;
  cuda::CandidateBlocks cand;
  int rows = 0, ratio = 1;
  cuda::Csa2Selection selection = cuda::Csa2Selection::TopK;

  Launch(const Step& st, int ratio_, cuda::Csa2Selection sel) : ratio(ratio_), selection(sel) {
    rows = int(st.slots.size());
    dq = cuda::to_device(st.q);
    dw = cuda::to_device(st.w);
    dslots = cuda::to_device(st.slots);
    dpos = cuda::to_device(st.positions);
    flags = cuda::to_device(st.flags);
    out = cuda::DeviceBuffer(size_t(rows) * kTopk * sizeof(int32_t));
    ws = cuda::DeviceBuffer(cuda::csa2_indexer_workspace_bytes(rows, kCapacity));
    g.heads = kHeads;
    g.dim = kDim;
    g.topk = kTopk;
    cand = cuda::CandidateBlocks{flags.as<uint8_t>(), kCapacity / kBlockSize, kBlockSize, kTopkBlocks};
  }
  void enqueue(const Inputs& in, cudaStream_t stream) {
    cuda::csa2_indexer_select(dq.as<float>(), dw.as<float>(), dslots.as<int32_t>(), dpos.as<int32_t>(), rows, g, ratio,
                              in.kp, kCapacity, selection, cand, out.as<int32_t>(), ws.get(), stream);
  }
  std::vector<int32_t> run(const Inputs& in, cuda::Csa2SelectForm form) {
    cuda::set_csa2_select_form(form);
    out.fill_bytes(0x7F);
    ws.fill_bytes(0xFF);
    enqueue(in, nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    return cuda::to_host<int32_t>(out, size_t(rows) * kTopk);
  }
};

const char* selection_name(cuda::Csa2Selection s) { return s == cuda::Csa2Selection::TopK ? "topk" : "reindex"; }

}  // namespace

// bins vs radix, bitwise, over 1..8 rows of 1..4096 visible entries (around top-k, the tile edges, the capacity).
TEST(GpuCsa2SelectBins, SameRowsAsRadix) {
  DI_SKIP_WITHOUT_GPU();
  FormScope restore;
  Rng rng;
  const Inputs in = make_inputs(rng);
  const std::vector<int> fixed = {1, 2, 63, 64, 65, 511, 512, 513, 640, 1000, 1024, 2047, 2048, 3001, 4095, 4096};
  for (const auto sel : {cuda::Csa2Selection::TopK, cuda::Csa2Selection::Reindex}) {
    const int ratio = sel == cuda::Csa2Selection::TopK ? 2 : 1;  // Full layers: ratio 2; the Reindex group: 1
    size_t fixed_at = 0;  // the first rows take the fixed counts (twice over), the rest random ones
    size_t bad = 0, total = 0, padded = 0;
    for (int trial = 0; trial < 24; ++trial) {
      const int rows = trial < kMaxRows ? trial + 1 : rng.integer(1, kMaxRows);
      std::vector<int> visible;
      for (int r = 0; r < rows; ++r)
        visible.push_back(fixed_at < fixed.size() * 2 ? fixed[fixed_at++ % fixed.size()] : rng.integer(1, kCapacity));
      const Step st = make_step(rng, visible, ratio);
      Launch l(st, ratio, sel);
      const std::vector<int32_t> radix = l.run(in, cuda::Csa2SelectForm::Radix);
      const std::vector<int32_t> bins = l.run(in, cuda::Csa2SelectForm::Bins);
      const std::vector<int32_t> again = l.run(in, cuda::Csa2SelectForm::Bins);  // the arrival counts were reset
      const size_t m = bitwise_mismatches(radix, bins) + bitwise_mismatches(radix, again);
      if (m != 0 && bad == 0) {
        for (size_t i = 0; i < radix.size(); ++i)
          if (radix[i] != bins[i]) {
            std::printf("  first mismatch: trial %d rows %d row %zu place %zu radix %d bins %d\n", trial, rows,
                        i / kTopk, i % kTopk, radix[i], bins[i]);
            break;
          }
      }
      bad += m;
      total += 2 * radix.size();
      padded += size_t(std::count(radix.begin(), radix.end(), -1));
    }
    std::printf("  %s: %zu of %zu outputs are -1 padding\n", selection_name(sel), padded, total / 2);
    report_exact(std::string("csa2_select bins vs radix ") + selection_name(sel), bad, total);
  }
}

// Per-call device time of both forms, graphs of 20 calls (time_per_call_us), one row at 1024 / 2048 / 4096 entries.
TEST(GpuCsa2SelectBins, Timing) {
  DI_SKIP_WITHOUT_GPU();
  FormScope restore;
  Rng rng;
  const Inputs in = make_inputs(rng);
  cudaStream_t stream;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const auto sel : {cuda::Csa2Selection::TopK, cuda::Csa2Selection::Reindex}) {
    const int ratio = sel == cuda::Csa2Selection::TopK ? 2 : 1;
    for (const int entries : {1024, 2048, 4096}) {
      Launch l(make_step(rng, {entries}, ratio), ratio, sel);
      double us[2];
      for (const auto form : {cuda::Csa2SelectForm::Radix, cuda::Csa2SelectForm::Bins}) {
        cuda::set_csa2_select_form(form);
        us[int(form)] = time_per_call_us(stream, [&] { l.enqueue(in, stream); });
      }
      std::printf("CSA2_SELECT_TIME %s rows=1 entries=%d capacity=%d radix_us=%.2f bins_us=%.2f\n", selection_name(sel),
                  entries, kCapacity, us[0], us[1]);
    }
  }
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
}

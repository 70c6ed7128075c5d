// The decode-fused kernels (issue 4, bench/gpu/NOTES.md "Decode-fused indexer and attention core") against the
// split kernels they replace and against the CPU references, at V4-Flash shapes:
//  - the lightning indexer's selection (layers/indexer/indexer_gpu.h, indexer_select): 64 heads x 128, top-k 512,
//    64 to 19200 visible entries, rows <= 8: the fused selection (every DEEPINFER_INDEX_SELECT form: the radix
//    select, the select by bins, with batched score loads; every DEEPINFER_INDEX_SCORE_SHAPE; both
//    DEEPINFER_INDEX_QUERY_STAGING values, both DEEPINFER_INDEX_SELECTOR forms and DEEPINFER_INDEX_LATER_PASSES
//    counts) must equal the three-kernel selection entry for entry
//    (same scores, same selection), and the CPU's lightning_top_entries up to near-ties
//    (the CPU sums in double: entries whose scores are within fp32 noise of the k-th score may trade places;
//    never an exact tie broken toward the higher id);
// (The attention core's fused split + merge cluster launch and its tests are gone: slower on the H200, run 21.)
// Both eagerly and replayed from a CUDA graph (the indexer's arrival counts must be back at zero after every
// launch, so replays repeat the eager result). Each test ends with timing lines: device us per call, split kernels
// vs fused, from graphs of 20 calls (information for bench/gpu/NOTES.md, no bound).
#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "cuda/device.h"
#include "cuda/kernels.h"
#include "gpu_test_util.h"
#include "layers/attention/decode_fused.h"
#include "layers/indexer/indexer_gpu.h"
#include "layers/indexer/lightning_indexer.h"
#include "layers/quant/fake_quant.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

// Restores the process-wide switches a test flips.
struct ModeGuard {
  bool fused = cuda::decode_fused();
  cuda::IndexDecodeForm index_form = cuda::index_decode_form();
  cuda::IndexScoreShape score_shape = cuda::index_score_shape();
  cuda::IndexScoreStaging score_staging = cuda::index_score_staging();
  cuda::IndexSelector selector = cuda::index_selector();
  cuda::IndexLaterPasses later_passes = cuda::index_later_passes();
  ~ModeGuard() {
    cuda::set_index_selector(selector);
    cuda::set_index_later_passes(later_passes);
    cuda::set_decode_fused(fused);
    cuda::set_index_decode_form(index_form);
    cuda::set_index_score_shape(score_shape);
    cuda::set_index_score_staging(score_staging);
  }
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { DI_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
};

// Thread-local capture: the kernels' one-time attribute setup may run inside it.
cudaGraphExec_t capture(cudaStream_t stream, const std::function<void()>& enqueue) {
  return capture_exec(stream, enqueue, cudaStreamCaptureModeThreadLocal);
}

// Stream-ordered poison (DeviceBuffer::fill_bytes is a legacy-stream memset, unordered with a non-blocking stream).
void poison(const cuda::DeviceBuffer& b, int byte, cudaStream_t stream) {
  DI_CUDA_CHECK(cudaMemsetAsync(b.get(), byte, b.bytes(), stream));
}

template <class T>
size_t count_differences(const std::vector<T>& a, const std::vector<T>& b) {
  size_t n = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += a[i] != b[i];
  return n;
}

// ---------------------------------------------------------------------------------------------------------
// Indexer selection.

constexpr int kIndexHeads = 64, kIndexDim = 128, kTopk = 512, kRatio = 4;
constexpr int kPageSize = 64, kMaxPages = 48;  // 3072 entries per slot unless a case asks for more

// FewDistinct / ManyZero / AllSame: exact ties at the k-th score. TopkAlone: entries 0, 2, .., 2 topk - 2 share one
// key and every other key is zero, so exactly topk scores are positive and equal, all in one radix bin above the
// zeros: the select by bins takes that bin whole after its first pass (its early stop).
enum class Keys { Random, FewDistinct, ManyZero, AllSame, TopkAlone };

// A GPU-vs-CPU difference counts as a near-tie within this fraction of the size of the score's terms (the fp32 head
// sum against the CPU's double; test_compressor_indexer_gpu.cpp uses the same bound).
constexpr double kNearTie = 1e-4;

// FP4 values (ue8m0 scale per 32) as the queries and keys are after their finish (model-spec §3): exact in bf16.
std::vector<float> fp4_rows(Rng& rng, int rows, int width) {
  std::vector<float> v = rng.normals(size_t(rows) * width);
  for (int r = 0; r < rows; ++r) fp4_fake_quant(v.data() + size_t(r) * width, width, 32, Fp4Scale::UE8M0);
  return v;
}

struct IndexCase {
  std::string name;
  std::vector<int32_t> positions;  // one row per entry; row i uses slot slot_of[i]
  std::vector<int32_t> slot_of;
  Keys keys = Keys::Random;
  int max_pages = kMaxPages;  // pages per slot
  int page_size = kPageSize;  // entries per page
};

void run_indexer_case(Rng& rng, const IndexCase& c, bool timing) {
  ModeGuard guard;
  const int max_pages = c.max_pages, page_size = c.page_size, capacity = page_size * max_pages;  // slot capacity
  const int rows = int(c.positions.size());
  const int slots = *std::max_element(c.slot_of.begin(), c.slot_of.end()) + 1;

  // Page table: every slot's pages scattered over the pool.
  std::vector<int32_t> table(size_t(slots) * max_pages);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng.engine());
  auto pool_row = [&](int slot, int e) {
    return int64_t(table[size_t(slot) * max_pages + e / page_size]) * page_size + e % page_size;
  };
  const int64_t pool_rows = int64_t(slots) * max_pages * page_size;

  // Keys per slot in entry order (the CPU's view) and scattered into the pool (the GPU's).
  std::vector<std::vector<float>> slot_keys(static_cast<size_t>(slots));
  std::vector<float> pool(size_t(pool_rows) * kIndexDim, 0.0f);
  const std::vector<float> distinct = fp4_rows(rng, 48, kIndexDim);
  for (int s = 0; s < slots; ++s) {
    std::vector<float>& k = slot_keys[size_t(s)];
    k = fp4_rows(rng, capacity, kIndexDim);
    for (int e = 0; e < capacity; ++e) {
      float* row = k.data() + size_t(e) * kIndexDim;
      if (c.keys == Keys::FewDistinct) {  // every score value repeats ~n/48 times: the k-th score is a tie
        const float* src = distinct.data() + size_t(rng.integer(0, 47)) * kIndexDim;
        std::copy(src, src + kIndexDim, row);
      } else if (c.keys == Keys::ManyZero && rng.uniform(0.0f, 1.0f) < 0.7f) {  // score 0: ties at the k-th
        std::fill(row, row + kIndexDim, 0.0f);
      } else if (c.keys == Keys::AllSame || (c.keys == Keys::TopkAlone && e % 2 == 0 && e < 2 * kTopk)) {
        std::copy(distinct.begin(), distinct.begin() + kIndexDim, row);
      } else if (c.keys == Keys::TopkAlone) {
        std::fill(row, row + kIndexDim, 0.0f);
      }
      std::copy(row, row + kIndexDim, pool.begin() + pool_row(s, e) * kIndexDim);
    }
  }
  const std::vector<float> q = fp4_rows(rng, rows * kIndexHeads, kIndexDim);
  std::vector<float> head_w(size_t(rows) * kIndexHeads);
  for (float& w : head_w) {
    w = rng.normal(0.0f, 0.05f);
    if (c.keys == Keys::ManyZero || c.keys == Keys::TopkAlone) w = std::fabs(w);
  }

  cuda::IndexerGpu w;
  w.heads = kIndexHeads;
  w.dim = kIndexDim;
  w.topk = kTopk;
  w.compressor.ratio = kRatio;
  cuda::DeviceBuffer dpool = cuda::to_device(to_bf16(pool)), dtable = cuda::to_device(table),
                     dq = cuda::to_device(to_bf16(q)), dw = cuda::to_device(head_w), dslots = cuda::to_device(c.slot_of),
                     dpos = cuda::to_device(c.positions), dout(size_t(rows) * kTopk * 4),
                     dws(cuda::indexer_workspace_bytes(rows, capacity, w));
  const cuda::PagedPool keys{dpool.as<cuda::bf16>(), dtable.as<int32_t>(), max_pages, page_size, kIndexDim};
  Stream stream;
  auto select = [&] {
    cuda::indexer_select(dq.as<cuda::bf16>(), dw.as<float>(), dslots.as<int32_t>(), dpos.as<int32_t>(), rows, w, keys,
                         dout.as<int32_t>(), dws.get(), stream.s);
  };
  using Form = cuda::IndexDecodeForm;
  using Shape = cuda::IndexScoreShape;
  using Staging = cuda::IndexScoreStaging;
  auto result = [&](bool fused, Form form = Form::Old, Shape shape = Shape::Tile64x2, Staging staging = Staging::Loop,
                    cuda::IndexSelector selector = cuda::IndexSelector::Ticket) {
    cuda::set_decode_fused(fused);
    cuda::set_index_decode_form(form);
    cuda::set_index_score_shape(shape);
    cuda::set_index_score_staging(staging);
    cuda::set_index_selector(selector);
    poison(dout, 0xAB, stream.s);
    poison(dws, 0xFF, stream.s);
    select();
    DI_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    return cuda::to_host<int32_t>(dout, size_t(rows) * kTopk);
  };
  const std::vector<int32_t> split = result(false);
  const std::vector<int32_t> fused = result(true);
  const std::vector<int32_t> fused_again = result(true);  // the arrival counts were left at zero
  // The select by bins (DEEPINFER_INDEX_SELECT=bins) and with the batched score loads (=new) against the radix
  // select: entry for entry.
  const std::vector<int32_t> by_bins = result(true, Form::Bins);
  const std::vector<int32_t> by_bins_again = result(true, Form::Bins);
  const std::vector<int32_t> batched = result(true, Form::New);
  const size_t total = size_t(rows) * kTopk;
  report_exact("decode_fused indexer " + c.name + " fused_vs_split", count_differences(fused, split), total);
  report_exact("decode_fused indexer " + c.name + " fused_repeat", count_differences(fused_again, fused), total);
  report_exact("decode_fused indexer " + c.name + " by_bins_vs_radix", count_differences(by_bins, fused), total);
  report_exact("decode_fused indexer " + c.name + " by_bins_repeat", count_differences(by_bins_again, by_bins),
               total);
  report_exact("decode_fused indexer " + c.name + " new_vs_radix", count_differences(batched, fused), total);
  // The other score shapes (DEEPINFER_INDEX_SCORE_SHAPE; the same scores bit for bit) against the default shape, in
  // the bins and new forms: entry for entry. auto takes 32-entry tiles in rows whose 32-entry tiles fit their blocks
  // and the 64x2 split in the others: at 1 row n=19200 (600 tiles > 264 blocks) and 2 rows n=17088.. (> 132) the 64x2
  // branch, at n <= 3072 the 32-entry one, and both in one launch at 8 rows ragged (33 blocks: n 513 / 1024 narrow,
  // 2048 / 2560 / 3072 not).
  const std::pair<Shape, const char*> shapes[] = {
      {Shape::Tile64x1, "64x1"}, {Shape::Tile32x1, "32x1"}, {Shape::Auto, "auto"}};
  for (const auto& [shape, shape_name] : shapes) {
    const std::vector<int32_t> shaped = result(true, Form::Bins, shape);
    const std::vector<int32_t> shaped_again = result(true, Form::Bins, shape);
    const std::vector<int32_t> shaped_new = result(true, Form::New, shape);
    const std::string tag = "decode_fused indexer " + c.name + " shape_" + shape_name;
    report_exact(tag + "_vs_64x2", count_differences(shaped, by_bins), total);
    report_exact(tag + "_repeat", count_differences(shaped_again, shaped), total);
    report_exact(tag + "_new_vs_64x2", count_differences(shaped_new, batched), total);
  }
  // The score blocks' batched staging (DEEPINFER_INDEX_QUERY_STAGING=batched; the bins form, every shape; the same
  // staged values, so the same scores bit for bit) against the loop staging at 64x2: entry for entry.
  const std::pair<Shape, const char*> staged_shapes[] = {
      {Shape::Tile64x2, "64x2"}, {Shape::Tile64x1, "64x1"}, {Shape::Tile32x1, "32x1"}, {Shape::Auto, "auto"}};
  for (const auto& [shape, shape_name] : staged_shapes) {
    const std::vector<int32_t> staged = result(true, Form::Bins, shape, Staging::Batched);
    const std::vector<int32_t> staged_again = result(true, Form::Bins, shape, Staging::Batched);
    const std::string tag = "decode_fused indexer " + c.name + " batched_staging_" + shape_name;
    report_exact(tag + "_vs_loop_64x2", count_differences(staged, by_bins), total);
    report_exact(tag + "_repeat", count_differences(staged_again, staged), total);
  }
  // The selector form (DEEPINFER_INDEX_SELECTOR=block: block 0 rehearses, then selects after the score blocks'
  // arrivals; the batched staging at auto, either later passes' count; the ticket where its one more block a row would
  // pass the grid's one wave, here at 3-8 rows and at the 17-19K-entry rows) against the loop staging at 64x2 with the
  // ticket: entry for entry, and again (the arrival and pass-1 counts left at zero).
  using Selector = cuda::IndexSelector;
  using Later = cuda::IndexLaterPasses;
  struct SelectorCase {
    Selector selector;
    Later later;
    const char* name;
  };
  for (const auto& [selector, later, name] :
       {SelectorCase{Selector::Block, Later::Match, "block_match"},
        SelectorCase{Selector::Block, Later::Plain, "block_plain"}}) {
    cuda::set_index_later_passes(later);
    const std::vector<int32_t> chosen = result(true, Form::Bins, Shape::Auto, Staging::Batched, selector);
    const std::vector<int32_t> chosen_again = result(true, Form::Bins, Shape::Auto, Staging::Batched, selector);
    const std::string tag = std::string("decode_fused indexer ") + c.name + " selector_" + name;
    report_exact(tag + "_vs_loop_64x2", count_differences(chosen, by_bins), total);
    report_exact(tag + "_repeat", count_differences(chosen_again, chosen), total);
  }
  cuda::set_index_later_passes(Later::Plain);

  // Graph replays of the fused path, both selects, the select by bins at 32-entry score tiles and at auto, and with
  // the batched staging at 64x2 and auto (counts reset inside each launch; the arrival count follows the shape's
  // active blocks).
  struct Replay {
    Form form;
    Shape shape;
    Staging staging;
    cuda::IndexSelector selector = cuda::IndexSelector::Ticket;
  };
  for (const auto& [form, shape, staging, selector] :
       {Replay{Form::Old, Shape::Tile64x2, Staging::Loop}, Replay{Form::New, Shape::Tile64x2, Staging::Loop},
        Replay{Form::Bins, Shape::Tile32x1, Staging::Loop}, Replay{Form::Bins, Shape::Auto, Staging::Loop},
        Replay{Form::Bins, Shape::Tile64x2, Staging::Batched}, Replay{Form::Bins, Shape::Auto, Staging::Batched},
        Replay{Form::Bins, Shape::Auto, Staging::Batched, cuda::IndexSelector::Block}}) {
    cuda::set_decode_fused(true);
    cuda::set_index_decode_form(form);
    cuda::set_index_score_shape(shape);
    cuda::set_index_score_staging(staging);
    cuda::set_index_selector(selector);
    cudaGraphExec_t exec = capture(stream.s, select);
    size_t diff = 0;
    for (int rep = 0; rep < 3; ++rep) {
      poison(dout, 0xAB, stream.s);
      DI_CUDA_CHECK(cudaGraphLaunch(exec, stream.s));
      DI_CUDA_CHECK(cudaStreamSynchronize(stream.s));
      diff += count_differences(cuda::to_host<int32_t>(dout, total), fused);
    }
    DI_CUDA_CHECK(cudaGraphExecDestroy(exec));
    report_exact("decode_fused indexer " + c.name + (form == Form::New ? " new" : "") +
                     (shape == Shape::Tile32x1 ? " shape_32x1" : shape == Shape::Auto ? " shape_auto" : "") +
                     (staging == Staging::Batched ? " batched_staging" : "") +
                     (selector == cuda::IndexSelector::Block ? " selector_block" : "") + " graph_replays_vs_eager",
                 diff, 3 * total);
  }
  cuda::set_index_selector(cuda::IndexSelector::Ticket);
  cuda::set_index_score_shape(Shape::Tile64x2);
  cuda::set_index_score_staging(Staging::Loop);

  // Against the CPU: lightning_top_entries over the same FP4 values, scores in double.
  int rows_exact = 0, rows_near_tie = 0, rows_bad = 0;
  for (int r = 0; r < rows; ++r) {
    const int slot = c.slot_of[size_t(r)];
    const int n = std::min((c.positions[size_t(r)] + 1) / kRatio, capacity);
    const int32_t* got = fused.data() + size_t(r) * kTopk;
    std::map<int64_t, int> entry_of_row;
    for (int e = 0; e < capacity; ++e) entry_of_row[pool_row(slot, e)] = e;
    std::vector<int64_t> sel;
    bool shape_ok = true;
    for (int i = 0; i < kTopk; ++i) {
      if (i >= std::min(n, kTopk)) {
        shape_ok &= got[i] == -1;
        continue;
      }
      auto it = entry_of_row.find(got[i]);
      if (it == entry_of_row.end() || it->second >= n || (!sel.empty() && it->second <= sel.back())) {
        shape_ok = false;
        continue;
      }
      sel.push_back(it->second);
    }
    if (!shape_ok) {
      ++rows_bad;
      ADD_FAILURE() << c.name << " row " << r << ": malformed selection (not visible, not ascending, or padding)";
      continue;
    }
    LightningIndexerWeights lw;
    lw.heads = kIndexHeads;
    lw.dim = kIndexDim;
    lw.topk = kTopk;
    IndexQuery iq;
    iq.q.assign(q.begin() + size_t(r) * kIndexHeads * kIndexDim, q.begin() + size_t(r + 1) * kIndexHeads * kIndexDim);
    iq.head_weight.assign(head_w.begin() + size_t(r) * kIndexHeads, head_w.begin() + size_t(r + 1) * kIndexHeads);
    const float* k = slot_keys[size_t(slot)].data();
    const std::vector<int64_t> ref = lightning_top_entries(lw, iq, k, n);
    if (ref == sel) {
      ++rows_exact;
      continue;
    }
    // Differences allowed only at near-ties of the k-th score: relative to the size of the score's terms.
    auto score = [&](int64_t e, double* size) {
      double s = 0, a = 0;
      for (int h = 0; h < kIndexHeads; ++h) {
        double qk = 0, qk_abs = 0;
        for (int d = 0; d < kIndexDim; ++d) {
          const double p = double(iq.q[size_t(h) * kIndexDim + d]) * k[size_t(e) * kIndexDim + d];
          qk += p;
          qk_abs += std::fabs(p);
        }
        s += iq.head_weight[size_t(h)] * std::max(qk, 0.0);
        a += std::fabs(iq.head_weight[size_t(h)]) * qk_abs;
      }
      *size = a;
      return s;
    };
    double kth = INFINITY, kth_size = 0;
    for (int64_t e : ref) {
      double a;
      const double s = score(e, &a);
      if (s < kth) kth = s, kth_size = a;
    }
    std::vector<int64_t> missing, extra;
    std::set_difference(ref.begin(), ref.end(), sel.begin(), sel.end(), std::back_inserter(missing));
    std::set_difference(sel.begin(), sel.end(), ref.begin(), ref.end(), std::back_inserter(extra));
    bool ok = missing.size() == extra.size();
    std::vector<double> sm, se;
    for (int64_t e : missing) {
      double a;
      sm.push_back(score(e, &a));
      ok &= std::fabs(sm.back() - kth) <= kNearTie * (a + kth_size);
    }
    for (int64_t e : extra) {
      double a;
      se.push_back(score(e, &a));
      ok &= std::fabs(se.back() - kth) <= kNearTie * (a + kth_size);
    }
    for (double a : sm)
      for (double b : se) ok &= a != b;  // an exact tie must go to the lower id
    if (ok) {
      ++rows_near_tie;
    } else {
      ++rows_bad;
      ADD_FAILURE() << c.name << " row " << r << ": selection differs from the CPU beyond near-ties (n=" << n
                    << ", " << missing.size() << " cpu-only, " << extra.size() << " gpu-only)";
    }
  }
  std::printf("GPU_CHECK decode_fused indexer %s vs_cpu rows=%d exact=%d near_tie=%d bad=%d bound=0\n",
              c.name.c_str(), rows, rows_exact, rows_near_tie, rows_bad);
  EXPECT_EQ(rows_bad, 0) << c.name;

  if (timing) {
    cuda::set_decode_fused(false);
    cuda::set_index_decode_form(Form::Old);
    const double split_us = time_per_call_us(stream.s, select);
    cuda::set_decode_fused(true);
    const double fused_us = time_per_call_us(stream.s, select);
    cuda::set_index_decode_form(Form::Bins);
    const double bins_us = time_per_call_us(stream.s, select);
    cuda::set_index_decode_form(Form::New);
    const double new_us = time_per_call_us(stream.s, select);
    cuda::set_index_decode_form(Form::Bins);
    cuda::set_index_score_shape(Shape::Tile32x1);
    const double bins_32_us = time_per_call_us(stream.s, select);
    cuda::set_index_score_shape(Shape::Auto);
    const double bins_auto_us = time_per_call_us(stream.s, select);
    cuda::set_index_score_staging(Staging::Batched);
    const double staged_auto_us = time_per_call_us(stream.s, select);
    cuda::set_index_score_shape(Shape::Tile64x2);
    const double staged_us = time_per_call_us(stream.s, select);
    cuda::set_index_score_shape(Shape::Auto);
    cuda::set_index_selector(cuda::IndexSelector::Block);
    const double selector_auto_us = time_per_call_us(stream.s, select);
    cuda::set_index_selector(cuda::IndexSelector::Ticket);
    cuda::set_index_score_shape(Shape::Tile64x2);
    cuda::set_index_score_staging(Staging::Loop);
    std::printf("GPU_CHECK decode_fused timing indexer_select %s: split kernels %.2f us, fused %.2f us, fused "
                "select by bins %.2f us, + batched score loads %.2f us, select by bins at 32-entry score tiles "
                "%.2f us, at auto %.2f us, batched staging at 64x2 %.2f us, at auto %.2f us, selector form at auto "
                "%.2f us per call (graph of 20; info, no bound)\n",
                c.name.c_str(), split_us, fused_us, bins_us, new_us, bins_32_us, bins_auto_us, staged_us,
                staged_auto_us, selector_auto_us);
  }
}

}  // namespace

// One decode row at 4K context (1024 visible entries) and at 8K (2048), random keys; the timing is the 4K row.
TEST(GpuDecodeFused, IndexerSelectionOneRow) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_indexer_case(rng, {"rows=1 n=1024", {4095}, {0}, Keys::Random}, true);
  run_indexer_case(rng, {"rows=1 n=2048", {8191}, {0}, Keys::Random}, true);
  run_indexer_case(rng, {"rows=1 n=3072 capped", {40000}, {0}, Keys::Random}, false);  // n = the slot's capacity
  // 19200 entries (a 76K context): more than the fused select stages in shared memory, so it reads L2.
  run_indexer_case(rng, {"rows=1 n=19200", {76799}, {0}, Keys::Random, 300}, true);
}

// Exact ties at the k-th score: the lower entry id must win on both paths.
TEST(GpuDecodeFused, IndexerSelectionTies) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_indexer_case(rng, {"rows=1 n=1024 few_distinct_keys", {4095}, {0}, Keys::FewDistinct}, false);
  run_indexer_case(rng, {"rows=1 n=1024 zero_scores", {4095}, {0}, Keys::ManyZero}, false);
  run_indexer_case(rng, {"rows=2 n=2048 few_distinct_keys", {8191, 8000}, {0, 1}, Keys::FewDistinct}, false);
  // Every score equal: the selection is entries 0 .. topk - 1 by the tie rule alone.
  run_indexer_case(rng, {"rows=1 n=2049 all_same", {8195}, {0}, Keys::AllSame}, false);
  // Exactly topk equal positive scores above zeros (the select by bins stops after its first pass).
  run_indexer_case(rng, {"rows=2 n=1024/3000 topk_alone", {4095, 11999}, {0, 1}, Keys::TopkAlone, 60}, false);
  // Ties spread over several of the select by bins' 2048-entry emit segments, in shared memory and from L2.
  run_indexer_case(rng, {"rows=2 n=17088/17089 few_distinct_keys", {68351, 68355}, {0, 1}, Keys::FewDistinct, 300},
                   false);
}

// Entry counts at the select's forms and bounds: one emit segment of the select by bins (2048 entries) and one
// more, a count that is not a multiple of its 8 entries per thread, the last count the decode kernel's shared copy
// holds at dim 128 (17088; 17472 in the form with 16-byte shared loads, whose rows are 4 floats longer) and the
// first it reads from L2; fewer entries than topk and exactly topk (every visible entry taken).
TEST(GpuDecodeFused, IndexerSelectionBounds) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_indexer_case(rng, {"rows=4 n=64/512/513/1000", {255, 2047, 2051, 3999}, {0, 1, 2, 3}, Keys::Random}, false);
  run_indexer_case(rng, {"rows=2 n=2049/2055", {8195, 8219}, {0, 1}, Keys::Random}, false);
  run_indexer_case(rng, {"rows=2 n=17088/17089", {68351, 68355}, {0, 1}, Keys::Random, 300}, true);
  run_indexer_case(rng, {"rows=2 n=17472/17473", {69887, 69891}, {0, 1}, Keys::Random, 300}, false);
  // Counts past topk at tile edges (520 / 576 / 577); pages of 4 entries (GpuCompressorIndexer's size: a thread's 8
  // emit entries cross pages).
  run_indexer_case(rng, {"rows=3 n=520/576/577", {2079, 2303, 2307}, {0, 1, 2}, Keys::Random}, false);
  run_indexer_case(rng, {"rows=2 n=1024/3000 page=4", {4095, 11999}, {0, 1}, Keys::Random, 800, 4}, false);
}

// Eight rows (the most the fused path takes): fewer entries than topk, exactly topk, one more, two rows of one
// slot, and rows whose tiles outnumber their score blocks (33 blocks per row at 8 rows: 40 and 48 tiles).
TEST(GpuDecodeFused, IndexerSelectionEightRows) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_indexer_case(rng,
                   {"rows=8 ragged", {399, 2047, 2051, 4095, 4096, 8191, 10239, 99999}, {0, 1, 2, 3, 3, 4, 5, 6},
                    Keys::Random},
                   true);
  run_indexer_case(rng, {"rows=9 split_path", {4095, 4095, 4095, 4095, 4095, 4095, 4095, 4095, 12000},
                         {0, 1, 2, 3, 4, 5, 6, 7, 8}, Keys::Random},
                   false);  // past kDecodeMaxRows: both settings run the split kernels
}

// The lightning indexer's decode select in the form DEEPINFER_INDEX_SELECT=bins2 (layers/indexer/indexer_gpu.cu
// decode_select_row: the first radix pass's histogram counted by the score blocks, the row's page-table entries
// loaded before the scoring; bench/gpu/NOTES.md "Decode select bins2") against =bins, the default: the same
// selected entries in the same order, entry for entry, on the shapes of the decode select's tests
// (test_decode_fused_gpu.cpp GpuDecodeFused.IndexerSelection*, whose cases and key kinds are repeated here: ties at
// the k-th score, the early stop after the first pass, n near topk, the shared copy's bounds, the L2 path, eight
// ragged rows) and at bins2's own bounds (16384 entries: the pages one a thread; 16385: one page past them;
// 16825 / 16826: the last count whose keys and pages fit the shared copy together and the first that reads L2).
// Eagerly, twice, and from graph replays: the score blocks' histogram must be back at zero after every launch, as
// the arrival counts. bins itself is compared with the radix select and the CPU reference in
// test_decode_fused_gpu.cpp, so equal to bins is equal to those.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cuda/device.h"
#include "gpu_test_util.h"
#include "layers/attention/decode_fused.h"
#include "layers/indexer/indexer_gpu.h"
#include "layers/quant/fake_quant.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

constexpr int kIndexHeads = 64, kIndexDim = 128, kTopk = 512, kRatio = 4;
constexpr int kPageSize = 64, kMaxPages = 48;  // 3072 entries per slot unless a case asks for more

// test_decode_fused_gpu.cpp's key kinds: FewDistinct / ManyZero / AllSame give exact ties at the k-th score;
// TopkAlone gives exactly topk equal positive scores above zeros (one first-pass bin taken whole: the early stop).
enum class Keys { Random, FewDistinct, ManyZero, AllSame, TopkAlone };

struct SelectCase {
  std::string name;
  std::vector<int32_t> positions;  // one row per entry; row i uses slot slot_of[i]
  std::vector<int32_t> slot_of;
  Keys keys = Keys::Random;
  int max_pages = kMaxPages;
  int page_size = kPageSize;  // entries per page: bins2's emit walks pages per 8 entries, any size
};

std::vector<float> fp4_rows(Rng& rng, int rows, int width) {
  std::vector<float> v = rng.normals(size_t(rows) * width);
  for (int r = 0; r < rows; ++r) fp4_fake_quant(v.data() + size_t(r) * width, width, 32, Fp4Scale::UE8M0);
  return v;
}

using FusedScope = SwitchScope<bool, cuda::decode_fused, cuda::set_decode_fused>;
using FormScope = SwitchScope<cuda::IndexDecodeForm, cuda::index_decode_form, cuda::set_index_decode_form>;

void run_bins2_case(Rng& rng, const SelectCase& c, bool timing) {
  FusedScope fused(true);
  FormScope form_scope;
  const int rows = int(c.positions.size()), max_pages = c.max_pages, page_size = c.page_size;
  const int slots = *std::max_element(c.slot_of.begin(), c.slot_of.end()) + 1;
  std::vector<int32_t> table(size_t(slots) * max_pages);  // every slot's pages scattered over the pool
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng.engine());
  const int64_t pool_rows = int64_t(slots) * max_pages * page_size;
  std::vector<float> pool(size_t(pool_rows) * kIndexDim, 0.0f);
  const std::vector<float> distinct = fp4_rows(rng, 48, kIndexDim);
  const std::vector<float> random = fp4_rows(rng, int(pool_rows), kIndexDim);
  for (int s = 0; s < slots; ++s)
    for (int e = 0; e < max_pages * page_size; ++e) {
      const int64_t pr = int64_t(table[size_t(s) * max_pages + e / page_size]) * page_size + e % page_size;
      float* row = pool.data() + size_t(pr) * kIndexDim;
      const float* src = random.data() + size_t(pr) * kIndexDim;
      if (c.keys == Keys::FewDistinct) src = distinct.data() + size_t(rng.integer(0, 47)) * kIndexDim;
      if (c.keys == Keys::AllSame || (c.keys == Keys::TopkAlone && e % 2 == 0 && e < 2 * kTopk)) src = distinct.data();
      const bool zero = (c.keys == Keys::ManyZero && rng.uniform(0.0f, 1.0f) < 0.7f) ||
                        (c.keys == Keys::TopkAlone && !(e % 2 == 0 && e < 2 * kTopk));
      if (!zero) std::copy(src, src + kIndexDim, row);
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
  const int capacity = max_pages * page_size;
  cuda::DeviceBuffer dpool = cuda::to_device(to_bf16(pool)), dtable = cuda::to_device(table),
                     dq = cuda::to_device(q), dw = cuda::to_device(head_w), dslots = cuda::to_device(c.slot_of),
                     dpos = cuda::to_device(c.positions), dout(size_t(rows) * kTopk * 4),
                     dws(cuda::indexer_workspace_bytes(rows, capacity, w));
  const cuda::PagedPool keys{dpool.as<cuda::bf16>(), dtable.as<int32_t>(), max_pages, page_size, kIndexDim};
  cudaStream_t stream = nullptr;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto select = [&] {
    cuda::indexer_select(dq.as<float>(), dw.as<float>(), dslots.as<int32_t>(), dpos.as<int32_t>(), rows, w, keys,
                         dout.as<int32_t>(), dws.get(), stream);
  };
  const size_t total = size_t(rows) * kTopk;
  auto poison = [&] {  // stream-ordered (DeviceBuffer::fill_bytes is a legacy-stream memset)
    DI_CUDA_CHECK(cudaMemsetAsync(dout.get(), 0xAB, dout.bytes(), stream));
    DI_CUDA_CHECK(cudaMemsetAsync(dws.get(), 0xFF, dws.bytes(), stream));
  };
  using Form = cuda::IndexDecodeForm;
  auto result = [&](Form form) {
    cuda::set_index_decode_form(form);
    poison();
    select();
    DI_CUDA_CHECK(cudaStreamSynchronize(stream));
    return cuda::to_host<int32_t>(dout, total);
  };
  const std::vector<int32_t> bins = result(Form::Bins);
  const std::vector<int32_t> bins2 = result(Form::Bins2);
  const std::vector<int32_t> bins2_again = result(Form::Bins2);  // the histogram and counts were left at zero
  report_exact("index_select bins2 " + c.name + " bins2_vs_bins", bitwise_mismatches(bins2, bins), total);
  report_exact("index_select bins2 " + c.name + " bins2_repeat", bitwise_mismatches(bins2_again, bins), total);

  cuda::set_index_decode_form(Form::Bins2);
  cudaGraphExec_t exec = capture_exec(stream, select, cudaStreamCaptureModeThreadLocal);
  size_t diff = 0;
  for (int rep = 0; rep < 3; ++rep) {
    poison();
    DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream));
    diff += bitwise_mismatches(cuda::to_host<int32_t>(dout, total), bins);
  }
  DI_CUDA_CHECK(cudaGraphExecDestroy(exec));
  report_exact("index_select bins2 " + c.name + " graph_replays_vs_bins", diff, 3 * total);
  // And bins after bins2's replays: bins2 leaves nothing behind that another form reads.
  report_exact("index_select bins2 " + c.name + " bins_after_bins2", bitwise_mismatches(result(Form::Bins), bins),
               total);

  if (timing) {
    cuda::set_index_decode_form(Form::Bins);
    const double bins_us = time_per_call_us(stream, select);
    cuda::set_index_decode_form(Form::Bins2);
    const double bins2_us = time_per_call_us(stream, select);
    std::printf("GPU_CHECK index_select timing %s: bins %.2f us, bins2 %.2f us per call (graph of 20; info, no "
                "bound)\n",
                c.name.c_str(), bins_us, bins2_us);
  }
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace

// GpuDecodeFused.IndexerSelectionOneRow's cases: 4K and 8K contexts, the slot's capacity, the L2 path.
TEST(GpuIndexSelectBins2, OneRow) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_bins2_case(rng, {"rows=1 n=1024", {4095}, {0}}, true);
  run_bins2_case(rng, {"rows=1 n=2048", {8191}, {0}}, false);
  run_bins2_case(rng, {"rows=1 n=3072 capped", {40000}, {0}}, false);
  run_bins2_case(rng, {"rows=1 n=16384", {65535}, {0}, Keys::Random, 300}, true);
  run_bins2_case(rng, {"rows=1 n=19200", {76799}, {0}, Keys::Random, 300}, true);
}

// GpuDecodeFused.IndexerSelectionTies's cases: exact ties at the k-th score, the lower entry id wins.
TEST(GpuIndexSelectBins2, Ties) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_bins2_case(rng, {"rows=1 n=1024 few_distinct_keys", {4095}, {0}, Keys::FewDistinct}, false);
  run_bins2_case(rng, {"rows=1 n=1024 zero_scores", {4095}, {0}, Keys::ManyZero}, false);
  run_bins2_case(rng, {"rows=2 n=2048 few_distinct_keys", {8191, 8000}, {0, 1}, Keys::FewDistinct}, false);
  run_bins2_case(rng, {"rows=1 n=2049 all_same", {8195}, {0}, Keys::AllSame}, false);
  run_bins2_case(rng, {"rows=2 n=1024/3000 topk_alone", {4095, 11999}, {0, 1}, Keys::TopkAlone, 60}, false);
  run_bins2_case(rng, {"rows=2 n=17088/17089 few_distinct_keys", {68351, 68355}, {0, 1}, Keys::FewDistinct, 300},
                 false);
}

// GpuDecodeFused.IndexerSelectionBounds's cases (n <= topk, n near topk, emit segments, the shared copy's bounds)
// and bins2's own: the pages one a thread (16384), one page more (16385), keys and pages together at the shared
// copy's bound (16825 fits, 16826 reads L2).
TEST(GpuIndexSelectBins2, Bounds) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_bins2_case(rng, {"rows=4 n=64/512/513/1000", {255, 2047, 2051, 3999}, {0, 1, 2, 3}}, false);
  run_bins2_case(rng, {"rows=3 n=520/576/577", {2079, 2303, 2307}, {0, 1, 2}}, false);
  run_bins2_case(rng, {"rows=2 n=2049/2055", {8195, 8219}, {0, 1}}, false);
  run_bins2_case(rng, {"rows=2 n=17088/17089", {68351, 68355}, {0, 1}, Keys::Random, 300}, false);
  run_bins2_case(rng, {"rows=2 n=17472/17473", {69887, 69891}, {0, 1}, Keys::Random, 300}, false);
  run_bins2_case(rng, {"rows=4 n=16384/16385/16825/16826", {65535, 65539, 67299, 67303}, {0, 1, 2, 3},
                       Keys::Random, 300},
                 false);
  run_bins2_case(rng, {"rows=2 n=16825/16826 few_distinct_keys", {67299, 67303}, {0, 1}, Keys::FewDistinct, 300},
                 false);
  // Pages that are not a multiple of the emit's 8 entries (a thread's 8 entries cross pages), and more staged pages
  // than threads: pages of 4 (GpuCompressorIndexer's size) and 12 entries.
  run_bins2_case(rng, {"rows=2 n=1024/3000 page=4", {4095, 11999}, {0, 1}, Keys::Random, 800, 4}, false);
  run_bins2_case(rng, {"rows=2 n=1000/2049 page=12 few_distinct_keys", {3999, 8195}, {0, 1}, Keys::FewDistinct, 200,
                       12},
                 false);
}

// GpuDecodeFused.IndexerSelectionEightRows's case: eight ragged rows (two of one slot; rows whose tiles outnumber
// their score blocks), each row with its own histogram.
TEST(GpuIndexSelectBins2, EightRows) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_bins2_case(rng,
                 {"rows=8 ragged", {399, 2047, 2051, 4095, 4096, 8191, 10239, 99999}, {0, 1, 2, 3, 3, 4, 5, 6}},
                 true);
}

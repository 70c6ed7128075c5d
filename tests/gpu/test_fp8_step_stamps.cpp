// The dense FP8 decode stream's stamps inside the step (layers/quant/fp8_gemm.h set_stream_fp8_step_stamps;
// v4_decode --fp8-stamps; bench/gpu/NOTES.md "Dense FP8 stream stamps inside the step"): with the switch on, an
// fp8_gemm / fp8_gemm_bf16 that takes the decode stream kernel (packed weights, <= 8 rows) runs the stamped
// instantiation on the record of its packed weights. The stamps only add clock reads and stores to their own record,
// so the output must be the same bits as with the switch off; every block of the launch's grid must have written its
// start and end, the blocks' tiles must add up to the product's, and the record must carry the launch's shape. A
// graph captured with the switch on (the model's steps) must write the same record on each replay.
#include <algorithm>
#include <cstring>

#include "cuda/kernels.h"
#include "gpu_test_util.h"
#include "layers/quant/fp8_gemm.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

// One product's device inputs: a packed random FP8 weight (fp8_pack, the decode stream's layout) and bf16 rows with
// their FP8 quantization (fp8_quantize at the weight's block).
struct Product {
  int64_t m = 0, n = 0, k = 0;
  int block = 128;
  cuda::DeviceBuffer x, q, xs, w, ws, packed;
  cuda::Fp8Linear lin;
};

Product make_product(Rng& rng, int64_t m, int64_t n, int64_t k, int block) {
  Product p;
  p.m = m, p.n = n, p.k = k, p.block = block;
  std::vector<uint8_t> codes(size_t(n * k)), scales(size_t(((n + block - 1) / block) * ((k + block - 1) / block)));
  for (uint8_t& c : codes) c = float_to_e4m3(rng.normal(0.0f, 64.0f));
  for (uint8_t& s : scales) s = uint8_t(rng.integer(127 - 12, 127 - 4));  // 2^-12 .. 2^-4
  std::vector<float> x = rng.normals(size_t(m * k), 0.0f, 2.0f);
  p.x = cuda::to_device(to_bf16(x));
  p.q = cuda::DeviceBuffer(size_t(m * k));
  p.xs = cuda::DeviceBuffer(size_t(m * (k / block)) * 4);
  p.w = cuda::to_device(codes);
  p.ws = cuda::to_device(scales);
  p.packed = cuda::DeviceBuffer(cuda::fp8_packed_bytes(n, k));
  p.lin = cuda::Fp8Linear{p.w.as<uint8_t>(), p.ws.as<uint8_t>(), n, k, block};
  cuda::fp8_pack(p.lin, p.packed.as<uint8_t>(), nullptr);
  cuda::fp8_quantize(p.x.as<cuda::bf16>(), p.q.as<uint8_t>(), p.xs.as<float>(), m, int(k), block, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  p.lin.packed = p.packed.as<uint8_t>();
  p.lin.decode = cuda::DecodeKernel::Stream;
  return p;
}

// The product into y on `stream`: fp8_gemm (f32 out) from the FP8 rows, or quant_x: fp8_gemm_bf16 (bf16 out) from the
// bf16 rows, which the stream kernel quantizes in its prologue (kQuantX) at m <= fp8_quant_prologue_rows().
void run(const Product& p, bool quant_x, void* y, cudaStream_t stream) {
  if (quant_x)
    cuda::fp8_gemm_bf16(p.x.as<cuda::bf16>(), p.m, p.lin, y, cuda::OutType::BF16, p.q.as<uint8_t>(), p.xs.as<float>(),
                        stream);
  else
    cuda::fp8_gemm(p.q.as<uint8_t>(), p.xs.as<float>(), p.m, p.lin, y, cuda::OutType::F32, stream);
}

// The record of packed weights `key` (the reader's, in slot order); null where none.
const cuda::Fp8StepStampRecord* find_record(const std::vector<cuda::Fp8StepStampRecord>& records, const void* key) {
  for (const cuda::Fp8StepStampRecord& r : records)
    if (r.key == key) return &r;
  return nullptr;
}

// Every block of the record's grid wrote its start and end (the launch's grid, at most two blocks per SM), the
// blocks' tiles add up to the product's (one group of m rows: ceil(n / 16) tiles), and the summary sees every block.
void expect_full_record(const cuda::Fp8StepStampRecord& r, const Product& p, bool quant_x, const std::string& tag,
                        int sms) {
  EXPECT_EQ(r.n, p.n) << tag;
  EXPECT_EQ(r.k, p.k) << tag;
  EXPECT_EQ(r.rows, p.m) << tag;
  EXPECT_EQ(r.quant_x, quant_x) << tag;
  EXPECT_FALSE(r.rope) << tag;
  ASSERT_GT(r.blocks, 0) << tag;
  EXPECT_LE(r.blocks, 2 * sms) << tag;
  ASSERT_EQ(r.stamps.size(), size_t(r.blocks) * cuda::kFp8StampSlots) << tag;
  int64_t items = 0, unwritten = 0;
  for (int b = 0; b < r.blocks; ++b) {
    const unsigned long long* s = r.stamps.data() + size_t(b) * cuda::kFp8StampSlots;
    unwritten += s[cuda::kFp8StStartNs] == 0 || s[cuda::kFp8StEndNs] == 0 || s[cuda::kFp8StEndNs] < s[cuda::kFp8StStartNs];
    items += int64_t(s[cuda::kFp8StItems]);
  }
  EXPECT_EQ(unwritten, 0) << tag << ": blocks without a start or end (of " << r.blocks << ")";
  EXPECT_EQ(items, (p.n + 15) / 16) << tag << ": the blocks' tiles";
  EXPECT_GT(r.start_ns, 0ull) << tag;
  EXPECT_GE(r.end_ns, r.start_ns) << tag;
  const cuda::Fp8LaunchPhases ph = cuda::fp8_launch_phases(r.stamps.data(), r.blocks);
  EXPECT_EQ(ph.blocks, r.blocks) << tag;
  EXPECT_GT(ph.span_us, 0.0) << tag;
  std::printf("GPU_CHECK %s grid=%d tiles=%lld span_us=%.2f first_staged_cycles=%.0f\n", tag.c_str(), r.blocks,
              (long long)items, ph.span_us, ph.slot[cuda::kFp8StFirstStaged]);
}

// The switches this test sets, restored when it ends.
struct Saved {
  const bool step = cuda::stream_fp8_step_stamps();
  const int prologue = cuda::fp8_quant_prologue_rows();
  ~Saved() {
    cuda::set_stream_fp8_step_stamps(step);
    cuda::set_fp8_quant_prologue_rows(prologue);
  }
};

}  // namespace

// Eager launches: V4's wo_b (kQuantX, 256 tiles on 2 x SMs blocks at most), wq_b (2048 tiles), wq_a at 8 rows, an odd
// shape (a partial tile, 3 rows) and V4.1's wo_b (block 32, kQuantX at 2 rows).
TEST(GpuFp8StepStamps, EagerSameBitsFullRecord) {
  DI_SKIP_WITHOUT_GPU();
  struct Shape {
    int64_t m, n, k;
    int block;
    bool quant_x;
  };
  const Saved saved;
  cuda::set_fp8_quant_prologue_rows(8);  // fp8_gemm_bf16 in the stream kernel's prologue at every row count here
  cuda::set_stream_fp8_step_stamps(false);
  int sms = 0;
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Rng rng;
  for (const Shape& sh : {Shape{1, 4096, 8192, 128, true}, Shape{1, 32768, 1024, 128, false},
                          Shape{8, 1024, 4096, 128, false}, Shape{3, 1040, 1152, 128, false},
                          Shape{2, 5120, 8192, 32, true}}) {
    const Product p = make_product(rng, sh.m, sh.n, sh.k, sh.block);
    const std::string tag = "fp8 step stamps eager m=" + std::to_string(sh.m) + " n=" + std::to_string(sh.n) +
                            " k=" + std::to_string(sh.k) + " block=" + std::to_string(sh.block) +
                            (sh.quant_x ? " quant_x" : "");
    const size_t bytes = size_t(sh.m * sh.n) * (sh.quant_x ? 2 : 4);
    cuda::DeviceBuffer y[2] = {cuda::DeviceBuffer(bytes), cuda::DeviceBuffer(bytes)};
    for (const bool on : {false, true}) {
      cuda::set_stream_fp8_step_stamps(on);
      y[on].fill_bytes(0xFF);
      run(p, sh.quant_x, y[on].get(), nullptr);
      DI_CUDA_CHECK(cudaDeviceSynchronize());
      cuda::set_stream_fp8_step_stamps(false);
    }
    const std::vector<uint8_t> a = cuda::to_host<uint8_t>(y[0], bytes), b = cuda::to_host<uint8_t>(y[1], bytes);
    size_t diff = 0;
    for (size_t i = 0; i < bytes; ++i) diff += a[i] != b[i];
    report_exact(tag + " bitwise", diff, bytes);
    const std::vector<cuda::Fp8StepStampRecord> records = cuda::stream_fp8_step_stamps_read();
    const cuda::Fp8StepStampRecord* r = find_record(records, p.lin.packed);
    ASSERT_NE(r, nullptr) << tag << ": no record for the packed weights (did the stamped kernel run?)";
    expect_full_record(*r, p, sh.quant_x, tag, sms);
  }
}

// A graph captured with the switch on (as v4_decode --fp8-stamps captures the step) replays the stamped kernel on the
// record taken at capture: the same bits as an eager launch with the switch off, and each replay rewrites the record
// (its first start grows).
TEST(GpuFp8StepStamps, CapturedReplaysRewriteRecord) {
  DI_SKIP_WITHOUT_GPU();
  const Saved saved;
  cuda::set_stream_fp8_step_stamps(false);
  int sms = 0;
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Rng rng;
  const Product p = make_product(rng, 1, 4096, 4096, 128);  // V4's shared w1|w3
  const size_t bytes = size_t(p.m * p.n) * 4;
  cuda::DeviceBuffer plain(bytes), graphed(bytes);
  plain.fill_bytes(0xFF);
  run(p, false, plain.get(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  cudaStream_t stream = nullptr;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda::set_stream_fp8_step_stamps(true);  // allocates the records before the capture
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  DI_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  run(p, false, graphed.get(), stream);
  DI_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cuda::set_stream_fp8_step_stamps(false);  // the graph keeps the stamped kernel and its record
  DI_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  unsigned long long starts[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    graphed.fill_bytes(0xFF);
    DI_CUDA_CHECK(cudaDeviceSynchronize());  // the fill ran on the legacy stream, which `stream` does not wait for
    DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    DI_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<cuda::Fp8StepStampRecord> records = cuda::stream_fp8_step_stamps_read();
    const cuda::Fp8StepStampRecord* r = find_record(records, p.lin.packed);
    ASSERT_NE(r, nullptr) << "captured: no record for the packed weights";
    expect_full_record(*r, p, false, "fp8 step stamps captured replay " + std::to_string(i), sms);
    starts[i] = r->start_ns;
    const std::vector<uint8_t> a = cuda::to_host<uint8_t>(plain, bytes), b = cuda::to_host<uint8_t>(graphed, bytes);
    size_t diff = 0;
    for (size_t j = 0; j < bytes; ++j) diff += a[j] != b[j];
    report_exact("fp8 step stamps captured replay " + std::to_string(i) + " bitwise", diff, bytes);
  }
  EXPECT_GT(starts[1], starts[0]) << "the second replay did not rewrite the record";
  DI_CUDA_CHECK(cudaGraphExecDestroy(exec));
  DI_CUDA_CHECK(cudaGraphDestroy(graph));
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
}

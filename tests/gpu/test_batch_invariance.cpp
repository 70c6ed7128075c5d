// Batch-invariant mode (algorithms.md §4, cuda/numerics_mode.h): with the switch on, every dispatcher of the FP8
// GEMM, the bf16 GEMM and the sink attention gives a row the same bits alone (m = 1) as inside a call of 300
// rows, at shapes where the normal dispatch would pick another kernel or split for the two. The results are also
// checked against the CPU references (core/linalg.cpp, layers/attention/sink_attention.cpp), so an invariant
// but wrong kernel fails too.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "attention_inputs.h"
#include "core/linalg.h"
#include "cuda/blas.h"
#include "cuda/kernels.h"
#include "cuda/numerics_mode.h"
#include "gpu_test_util.h"
#include "layers/attention/sink_attention.h"
#include "layers/quant/fake_quant.h"
#include "layers/quant/fp8_gemm.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

// The switch is process-wide: on for one test, off again after it (the other tests run the normal dispatch).
struct BatchInvariantScope {
  BatchInvariantScope() { cuda::set_batch_invariant(true); }
  ~BatchInvariantScope() { cuda::set_batch_invariant(false); }
};

// The rows compared alone: the first, a few inside, the last (a partial tile of every kernel).
const std::vector<int> kProbeRows = {0, 1, 63, 64, 137, 299};
constexpr int kRows = 300;

template <class T>
size_t count_diff(const std::vector<T>& a, size_t a_offset, const std::vector<T>& b, size_t count) {
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) bad += std::memcmp(&a[a_offset + i], &b[i], sizeof(T)) != 0;
  return bad;
}

// The first `count` outputs of a GEMM as floats, from their bytes (f32, or bf16 widened).
std::vector<float> output_values(const std::vector<uint8_t>& bytes, size_t count, cuda::OutType out_type) {
  std::vector<float> out(count);
  if (out_type == cuda::OutType::F32) {
    std::memcpy(out.data(), bytes.data(), bytes.size());
  } else {
    std::vector<uint16_t> h(count);
    std::memcpy(h.data(), bytes.data(), bytes.size());
    out = from_bf16(h);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// `packed`: the weight also in the decode kernels' fragment order (fp8_pack), as the model loads it, so that
// batch_invariant_fp8's mid kernels can take it.
void fp8_gemm_case(Rng& rng, int64_t n, int64_t k, int block, cuda::OutType out_type, bool packed = false) {
  const int64_t m = kRows;
  std::vector<float> x(size_t(m * k));
  for (int64_t r = 0; r < m; ++r) {
    const float s = std::exp(rng.uniform(-4.0f, 4.0f));
    for (int64_t i = 0; i < k; ++i) x[size_t(r * k + i)] = rng.normal(0.0f, s);
  }
  round_to_bf16(x);
  const int64_t nb = (n + block - 1) / block, kb = (k + block - 1) / block;
  std::vector<uint8_t> codes(size_t(n * k)), scales(size_t(nb * kb));
  for (auto& c : codes) c = float_to_e4m3(rng.normal(0.0f, 64.0f));
  for (auto& s : scales) s = uint8_t(rng.integer(127 - 12, 127 - 4));
  std::vector<float> wdq(codes.size());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      wdq[size_t(r * k + c)] = e4m3_to_float(codes[size_t(r * k + c)]) * e8m0_to_float(scales[size_t((r / block) * kb + c / block)]);

  cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dq(size_t(m * k)), ds(size_t(m * (k / block)) * 4),
                     dw = cuda::to_device(codes), dws = cuda::to_device(scales);
  const size_t ob = out_type == cuda::OutType::F32 ? 4 : 2;
  cuda::DeviceBuffer dy(size_t(m * n) * ob), dy1(size_t(n) * ob);
  dy.fill_bytes(0xFF);
  cuda::fp8_quantize(dx.as<cuda::bf16>(), dq.as<uint8_t>(), ds.as<float>(), m, int(k), block, nullptr);
  cuda::Fp8Linear lin{dw.as<uint8_t>(), dws.as<uint8_t>(), n, k, block};
  cuda::DeviceBuffer dpacked(packed ? cuda::fp8_packed_bytes(n, k) : 1);
  if (packed) {
    cuda::fp8_pack(lin, dpacked.as<uint8_t>(), nullptr);
    lin.packed = dpacked.as<uint8_t>();
  }
  cuda::fp8_gemm(dq.as<uint8_t>(), ds.as<float>(), m, lin, dy.get(), out_type, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> all = cuda::to_host<uint8_t>(dy, size_t(m * n) * ob);
  static const char* kKernel[] = {"wgmma", "mid", "split", "auto"};
  const std::string tag = "batch_invariant fp8_gemm n=" + std::to_string(n) + " k=" + std::to_string(k) +
                          " block=" + std::to_string(block) + (out_type == cuda::OutType::F32 ? " f32" : " bf16") +
                          (packed ? std::string(" packed ") + kKernel[int(cuda::batch_invariant_fp8())] : "");
  size_t bad = 0;
  for (int r : kProbeRows) {
    dy1.fill_bytes(0xFF);
    // Row r alone, and (an explicit decode request) through GemmPath::Skinny: the switch overrides both.
    for (cuda::GemmPath path : {cuda::GemmPath::Auto, cuda::GemmPath::Skinny}) {
      cuda::fp8_gemm(dq.as<uint8_t>() + r * k, ds.as<float>() + r * (k / block), 1, lin, dy1.get(), out_type, nullptr,
                     path);
      DI_CUDA_CHECK(cudaDeviceSynchronize());
      bad += count_diff(all, size_t(r * n) * ob, cuda::to_host<uint8_t>(dy1, size_t(n) * ob), size_t(n) * ob);
    }
  }
  report_exact(tag + " row-alone-vs-300-bitwise (bytes)", bad, kProbeRows.size() * 2 * size_t(n) * ob);

  std::vector<float> xq = x, ref(size_t(m * n));
  fp8_fake_quant(xq.data(), int64_t(xq.size()), block);
  matmul_nt(xq.data(), m, k, wdq.data(), n, ref.data());
  const std::vector<float> out = output_values(all, size_t(m * n), out_type);
  check_rel_l2(tag + " vs-cpu", out, ref, out_type == cuda::OutType::F32 ? 1e-3 : kBf16OutputBound + 1e-3);
}

// ---------------------------------------------------------------------------------------------------------
// y[r, b * n + j] = sum_i x[r, b * kg + i] w[b, j, i]: `groups` > 1 is wo_a's grouped form (one strided batch).
void bf16_gemm_case(Rng& rng, int64_t n, int64_t kg, int groups, cuda::OutType out_type) {
  const int64_t m = kRows, ldx = kg * groups, ldy = n * groups;
  std::vector<float> x(size_t(m * ldx)), w(size_t(groups) * size_t(n * kg));
  for (float& v : x) v = rng.normal(0.0f, 1.0f);
  for (float& v : w) v = rng.normal(0.0f, 0.05f);
  round_to_bf16(x);
  round_to_bf16(w);

  cuda::BlasHandle blas;
  const size_t ob = out_type == cuda::OutType::F32 ? 4 : 2;
  cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dw = cuda::to_device(to_bf16(w)), dy(size_t(m * ldy) * ob),
                     dy1(size_t(ldy) * ob);
  dy.fill_bytes(0xFF);
  cuda::gemm_bf16(blas.get(), dx.as<cuda::bf16>(), ldx, dw.as<cuda::bf16>(), kg, dy.get(), out_type, ldy, m, n, kg,
                  nullptr, groups, kg, n * kg, n);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> all = cuda::to_host<uint8_t>(dy, size_t(m * ldy) * ob);
  const std::string tag = "batch_invariant gemm_bf16 n=" + std::to_string(n) + " k=" + std::to_string(kg) +
                          " groups=" + std::to_string(groups) + (out_type == cuda::OutType::F32 ? " f32" : " bf16");
  size_t bad = 0;
  for (int r : kProbeRows) {
    dy1.fill_bytes(0xFF);
    cuda::gemm_bf16(blas.get(), dx.as<cuda::bf16>() + r * ldx, ldx, dw.as<cuda::bf16>(), kg, dy1.get(), out_type, ldy,
                    1, n, kg, nullptr, groups, kg, n * kg, n);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    bad += count_diff(all, size_t(r * ldy) * ob, cuda::to_host<uint8_t>(dy1, size_t(ldy) * ob), size_t(ldy) * ob);
  }
  report_exact(tag + " row-alone-vs-300-bitwise (bytes)", bad, kProbeRows.size() * size_t(ldy) * ob);

  // Against an fp32 CPU matmul (double accumulation): the bf16 products are exact in fp32, so the kernel's only
  // error is its fp32 accumulation, at most ~2 k u sum |x w| per element (u = 2^-24; twice the textbook bound for
  // the tensor cores' truncating alignment), plus one bf16 rounding (2^-8 relative) for a bf16 output.
  const std::vector<float> out = output_values(all, size_t(m * ldy), out_type);
  std::vector<float> ref(out.size());
  double worst = 0;  // max |out - ref| / bound
  for (int64_t r = 0; r < m; ++r)
    for (int g = 0; g < groups; ++g)
      for (int64_t j = 0; j < n; ++j) {
        const float* xr = x.data() + r * ldx + g * kg;
        const float* wr = w.data() + (int64_t(g) * n + j) * kg;
        double dot = 0, absdot = 0;
        for (int64_t i = 0; i < kg; ++i) {
          dot += double(xr[i]) * wr[i];
          absdot += std::fabs(double(xr[i]) * wr[i]);
        }
        const size_t idx = size_t(r * ldy + g * n + j);
        ref[idx] = float(dot);
        const double bound = 2.0 * double(kg) * std::ldexp(1.0, -24) * absdot +
                             (out_type == cuda::OutType::BF16 ? std::ldexp(1.0, -8) * std::fabs(dot) : 0.0) + 1e-30;
        worst = std::max(worst, std::isfinite(out[idx]) ? std::fabs(out[idx] - dot) / bound : INFINITY);
      }
  std::printf("GPU_CHECK %s vs-cpu max_err/bound=%.3f bound=1\n", tag.c_str(), worst);
  EXPECT_LE(worst, 1.0) << tag;
  check_rel_l2(tag + " vs-cpu", out, ref, out_type == cuda::OutType::F32 ? 1e-5 : kBf16OutputBound);
}

// ---------------------------------------------------------------------------------------------------------
constexpr int H = cuda::kAttnHeads, D = cuda::kAttnDim;

void attention_case(Rng& rng, int window_stride, int compressed_stride) {
  const int batch = kRows, pool_rows = 4000;
  const AttentionInputs in = random_attention_inputs(rng, batch, pool_rows, 2.0f);
  const auto& [window_pool, comp_pool, q, sink] = in;
  // Every third sequence fills every slot, the others a random number of theirs.
  const AttentionRows rows =
      ragged_attention_rows(rng, batch, window_stride, compressed_stride, pool_rows, false, [&](int b) {
        if (b % 3 == 0) return std::pair{window_stride, compressed_stride};
        const int nw = rng.integer(0, window_stride);
        return std::pair{nw, rng.integer(0, compressed_stride)};
      });
  const std::vector<int32_t>& wrows = rows.window;
  const std::vector<int32_t>& crows = rows.compressed;
  const float scale = 1.0f / std::sqrt(float(D));
  cuda::DeviceBuffer dwp = cuda::to_device(to_bf16(window_pool)), dcp = cuda::to_device(to_bf16(comp_pool)),
                     dsink = cuda::to_device(sink);

  // Runs queries [b0, b0 + count) with compressed lists widened to `wide` slots (the extra ones empty).
  auto run = [&](int b0, int count, int wide) {
    std::vector<int32_t> cw(size_t(count) * wide, -1);
    for (int b = 0; b < count; ++b)
      std::copy_n(crows.begin() + size_t(b0 + b) * compressed_stride, compressed_stride, cw.begin() + size_t(b) * wide);
    std::vector<float> qs(q.begin() + size_t(b0) * H * D, q.begin() + size_t(b0 + count) * H * D);
    std::vector<int32_t> ws(wrows.begin() + size_t(b0) * window_stride, wrows.begin() + size_t(b0 + count) * window_stride);
    cuda::DeviceBuffer dq = cuda::to_device(to_bf16(qs)), dwr = cuda::to_device(ws), dcr = cuda::to_device(cw),
                       dout(qs.size() * 2), dws(cuda::sink_attention_workspace_bytes(count, window_stride, wide));
    dout.fill_bytes(0xFF);
    dws.fill_bytes(0xFF);
    const cuda::KvRows window{dwp.as<cuda::bf16>(), dwr.as<int32_t>(), window_stride};
    const cuda::KvRows compressed{dcp.as<cuda::bf16>(), dcr.as<int32_t>(), wide};
    cuda::sink_attention_decode(dq.as<cuda::bf16>(), count, window, compressed, dsink.as<float>(), scale,
                                dout.as<cuda::bf16>(), dws.get(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    return cuda::to_host<uint16_t>(dout, qs.size());
  };
  const std::vector<uint16_t> all = run(0, batch, compressed_stride);
  const std::string tag = "batch_invariant sink_attention slots=" + std::to_string(window_stride) + "+" +
                          std::to_string(compressed_stride);
  size_t bad_alone = 0, bad_wide = 0;
  for (int b : kProbeRows) {
    bad_alone += count_diff(all, size_t(b) * H * D, run(b, 1, compressed_stride), size_t(H) * D);
    // A key list 100 empty slots wider (a batch whose lists are padded further) leaves the partial sums alone.
    bad_wide += count_diff(all, size_t(b) * H * D, run(b, 1, compressed_stride + 100), size_t(H) * D);
  }
  report_exact(tag + " query-alone-vs-300-bitwise", bad_alone, kProbeRows.size() * size_t(H) * D);
  report_exact(tag + " wider-list-bitwise", bad_wide, kProbeRows.size() * size_t(H) * D);

  std::vector<float> out, ref;
  for (int b : kProbeRows) {
    std::vector<float> o(size_t(H) * D);
    sink_attention_reference(in, b, wrows, window_stride, crows, compressed_stride, scale, o.data());
    ref.insert(ref.end(), o.begin(), o.end());
    for (size_t i = 0; i < size_t(H) * D; ++i) out.push_back(bf16_to_float(all[size_t(b) * H * D + i]));
  }
  // As test_attention.cpp: bf16 probabilities in the value product and one bf16 output rounding.
  check_rel_l2(tag + " vs-cpu", out, ref, 2.0 / 256.0);
}

}  // namespace

TEST(GpuBatchInvariance, Fp8GemmRowAloneEqualsRowInBatch) {
  DI_SKIP_WITHOUT_GPU();
  BatchInvariantScope on;
  Rng rng;
  fp8_gemm_case(rng, 1024, 4096, 128, cuda::OutType::F32);   // wq_a-like: Skinny alone, Wgmma at 300 normally
  fp8_gemm_case(rng, 592, 2048, 128, cuda::OutType::BF16);   // ragged n
  fp8_gemm_case(rng, 1280, 1024, 32, cuda::OutType::F32);    // V4.1 blocks
}

// The packed weights of the model through each batch_invariant_fp8 choice: the mid kernel and its split form at
// every row count (S = 1 / 2 / 4 from k = 1024 / 2048 / 4096; rows_cap 16 alone, 64 in the call), the wgmma
// kernel, which reads the checkpoint layout beside the packed copy, and Auto (n 1024 and 592: mid; 4096: wgmma).
TEST(GpuBatchInvariance, Fp8GemmPackedRowAloneEqualsRowInBatch) {
  DI_SKIP_WITHOUT_GPU();
  BatchInvariantScope on;
  Rng rng;
  using Kernel = cuda::InvariantFp8Kernel;
  for (Kernel kernel : {Kernel::Mid, Kernel::MidSplit, Kernel::Wgmma, Kernel::Auto}) {
    SwitchScope<Kernel, cuda::batch_invariant_fp8, cuda::set_batch_invariant_fp8> choice(kernel);
    fp8_gemm_case(rng, 1024, 4096, 128, cuda::OutType::F32, true);  // wq_a
    fp8_gemm_case(rng, 592, 2048, 128, cuda::OutType::BF16, true);  // ragged n
    fp8_gemm_case(rng, 1280, 1024, 32, cuda::OutType::F32, true);   // V4.1 blocks
    if (kernel == Kernel::Auto) fp8_gemm_case(rng, 4096, 1024, 128, cuda::OutType::F32, true);  // wide: wgmma
  }
}

TEST(GpuBatchInvariance, Bf16GemmRowAloneEqualsRowInBatch) {
  DI_SKIP_WITHOUT_GPU();
  BatchInvariantScope on;
  Rng rng;
  bf16_gemm_case(rng, 64, 4096, 1, cuda::OutType::F32);      // indexer weights_proj
  bf16_gemm_case(rng, 1000, 1024, 1, cuda::OutType::F32);    // ragged n (head-like, fp32 logits)
  bf16_gemm_case(rng, 256, 1032, 1, cuda::OutType::F32);     // k not a multiple of the 64-wide K step
  bf16_gemm_case(rng, 192, 512, 4, cuda::OutType::BF16);     // wo_a: grouped, strided batch, bf16 out
}

TEST(GpuBatchInvariance, SinkAttentionQueryAloneEqualsQueryInBatch) {
  DI_SKIP_WITHOUT_GPU();
  BatchInvariantScope on;
  Rng rng;
  attention_case(rng, 128, 512);  // CSA: window + top-k
  attention_case(rng, 128, 200);  // HCA: ragged compressed count
  attention_case(rng, 128, 0);    // window only
}

// Programmatic dependent launch (cuda/launch.h, bench/gpu/NOTES.md "PDL"): PDL changes scheduling only, so a chain
// of the decode step's kernels must give the same bits with it on and off, eagerly and replayed from a CUDA graph.
// The chain is an attention sublayer's kernels in the engine's order on small V4-like shapes, a few layers deep on
// the same residual streams: embedding -> per layer [mHC site (collapse, norm, FP8) -> side stream: wkv GEMM,
// kv norm, RoPE | main stream: wq_a GEMM, q_norm -> FP8, wq_b GEMM, per-head norm, RoPE -> join -> wo_a (W8A16) ->
// FP8 -> wo_b GEMM -> mHC expand] -> head collapse -> norm. Row counts pick every GEMM path the step uses: 1 and 4
// rows the decode v8 stream kernel (its producer fills the ring before the wait), 24 the v7 packed kernel, 80 the
// wgmma prefill kernel and the site's chain of four kernels. Every intermediate buffer is poisoned (0xFF: NaN in
// bf16 / fp32) before each run, so a kernel that read its input before the predecessor wrote it would show.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/kernels.h"
#include "cuda/launch.h"
#include "cuda/step_kernels.h"
#include "gpu_test_util.h"
#include "layers/quant/w8a16_gemv.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

constexpr int kHc = 4, kHidden = 2048, kQLora = 512, kHeads = 8, kHeadDim = 128, kRope = 64, kBlock = 128;
constexpr int kGroups = 2, kOLora = 256, kVocab = 64, kLayers = 3;
constexpr float kEps = 1e-6f, kHcEps = 1e-6f;

template <class T>
cuda::DeviceBuffer upload(const std::vector<T>& v) {
  return cuda::to_device(v);
}

// An FP8 linear [n, k] with random codes and scales, and its decode (packed) copy streamed by decode v8.
struct Linear {
  cuda::DeviceBuffer codes, scales, packed;
  cuda::Fp8Linear lin;
  Linear(Rng& rng, int64_t n, int64_t k) {
    std::vector<uint8_t> c(size_t(n * k)), s(size_t(((n + kBlock - 1) / kBlock) * ((k + kBlock - 1) / kBlock)));
    for (auto& v : c) v = float_to_e4m3(rng.normal(0.0f, 64.0f));
    for (auto& v : s) v = uint8_t(rng.integer(127 - 14, 127 - 10));
    codes = upload(c);
    scales = upload(s);
    lin = cuda::Fp8Linear{codes.as<uint8_t>(), scales.as<uint8_t>(), n, k, kBlock};
    packed = cuda::DeviceBuffer(cuda::fp8_packed_bytes(n, k));
    cuda::fp8_pack(lin, packed.as<uint8_t>(), nullptr);
    lin.packed = packed.as<uint8_t>();
    lin.decode = cuda::DecodeKernel::Stream;
  }
};

std::vector<uint16_t> bf16_normals(Rng& rng, size_t n, float mean, float sd) {
  return to_bf16(rng.normals(n, mean, sd));
}

struct Chain {
  int rows;
  // Weights (shared by the layers).
  cuda::DeviceBuffer table, fn, base, scale, attn_norm, q_norm, kv_norm, head_fn, head_base, head_scale, final_norm,
      inv_freq;
  Linear wq_a, wq_b, wkv, wo_a, wo_b;
  // Inputs and state.
  cuda::DeviceBuffer tokens, positions, mix_ws, X;
  // Intermediates (poisoned before every run) and outputs.
  cuda::DeviceBuffer mix, u, uq, us, f32, qrq, qrs, q, kv32, kv, z, zq, zs, y, h;
  cudaStream_t main = nullptr, side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;

  Chain(Rng& rng, int rows_)
      : rows(rows_),
        wq_a(rng, kQLora, kHidden),
        wq_b(rng, int64_t(kHeads) * kHeadDim, kQLora),
        wkv(rng, kHeadDim, kHidden),
        wo_a(rng, int64_t(kGroups) * kOLora, int64_t(kHeads) * kHeadDim / kGroups),
        wo_b(rng, kHidden, int64_t(kGroups) * kOLora) {
    const int width = kHc * kHidden, mix_rows = (2 + kHc) * kHc;
    table = upload(bf16_normals(rng, size_t(kVocab) * kHidden, 0.0f, 1.0f));
    fn = upload(rng.normals(size_t(mix_rows) * width, 0.0f, 1.0f / std::sqrt(float(width))));
    base = upload(rng.normals(size_t(mix_rows), 0.0f, 0.1f));
    scale = upload(std::vector<float>{1.0f, 0.8f, 1.2f});
    attn_norm = upload(bf16_normals(rng, kHidden, 1.0f, 0.1f));
    q_norm = upload(bf16_normals(rng, kQLora, 1.0f, 0.1f));
    kv_norm = upload(bf16_normals(rng, kHeadDim, 1.0f, 0.1f));
    head_fn = upload(rng.normals(size_t(kHc) * width, 0.0f, 1.0f / std::sqrt(float(width))));
    head_base = upload(rng.normals(size_t(kHc), 0.0f, 0.1f));
    head_scale = upload(std::vector<float>{1.0f});
    final_norm = upload(bf16_normals(rng, kHidden, 1.0f, 0.1f));
    std::vector<float> freq(kRope / 2);
    for (int i = 0; i < kRope / 2; ++i) freq[size_t(i)] = std::pow(10000.0f, -2.0f * float(i) / float(kRope));
    inv_freq = upload(freq);

    std::vector<int32_t> tok(static_cast<size_t>(rows)), pos(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      tok[size_t(r)] = rng.integer(0, kVocab - 1);
      pos[size_t(r)] = rng.integer(0, 100000);
    }
    tokens = upload(tok);
    positions = upload(pos);
    mix_ws = cuda::DeviceBuffer(cuda::hc_site_mix_workspace_bytes(rows, kHc, kHidden));
    mix_ws.fill_bytes(0);  // zero once: the site kernels leave their arrival counters at zero
    X = cuda::DeviceBuffer(size_t(rows) * kHc * kHidden * 2);

    auto buf = [&](size_t bytes) { return cuda::DeviceBuffer(bytes); };
    const size_t R = size_t(rows);
    mix = buf(R * mix_rows * 4);
    u = buf(R * kHidden * 2);
    uq = buf(R * kHidden);
    us = buf(R * (kHidden / kBlock) * 4);
    f32 = buf(R * kHeads * kHeadDim * 4);
    qrq = buf(R * kQLora);
    qrs = buf(R * (kQLora / kBlock) * 4);
    q = buf(R * kHeads * kHeadDim * 2);
    kv32 = buf(R * kHeadDim * 4);
    kv = buf(R * kHeadDim * 2);
    z = buf(R * kGroups * kOLora * 2);
    zq = buf(R * kGroups * kOLora);
    zs = buf(R * (kGroups * kOLora / kBlock) * 4);
    y = buf(R * kHidden * 2);
    h = buf(R * kHidden * 2);

    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking));
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    DI_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    DI_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    DI_CUDA_CHECK(cudaDeviceSynchronize());  // the packs on the legacy stream
  }
  ~Chain() {
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    cudaStreamDestroy(main);
    cudaStreamDestroy(side);
  }

  // One run of the chain on `main` (the side branch forks from it and joins back), from the poisoning on.
  void enqueue() {
    for (cuda::DeviceBuffer* b : {&X, &mix, &u, &uq, &us, &f32, &qrq, &qrs, &q, &kv32, &kv, &z, &zq, &zs, &y, &h})
      DI_CUDA_CHECK(cudaMemsetAsync(b->get(), 0xFF, b->bytes(), main));
    const int n = rows;
    auto* Xb = X.as<cuda::bf16>();
    cuda::embed_streams(table.as<cuda::bf16>(), tokens.as<int32_t>(), n, kHc, kHidden, Xb, main);
    const cuda::HcSite site{fn.as<float>(), base.as<float>(), scale.as<float>()};
    for (int l = 0; l < kLayers; ++l) {
      cuda::hc_site_pre(Xb, n, kHc, kHidden, site, kEps, kHcEps, 20, attn_norm.as<cuda::bf16>(), mix.as<float>(),
                        u.as<cuda::bf16>(), uq.as<uint8_t>(), us.as<float>(), kBlock, mix_ws.get(), main);
      DI_CUDA_CHECK(cudaEventRecord(fork, main));
      DI_CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));
      cuda::fp8_gemm(uq.as<uint8_t>(), us.as<float>(), n, wkv.lin, kv32.get(), cuda::OutType::F32, side);
      cuda::rms_norm_f32(kv32.as<float>(), kv_norm.as<cuda::bf16>(), kv.as<cuda::bf16>(), n, kHeadDim, kEps, side);
      cuda::rope(kv.as<cuda::bf16>(), kHeadDim, positions.as<int32_t>(), inv_freq.as<float>(), n, 1, kHeadDim, kRope,
                 false, side);
      DI_CUDA_CHECK(cudaEventRecord(join, side));

      cuda::fp8_gemm(uq.as<uint8_t>(), us.as<float>(), n, wq_a.lin, f32.get(), cuda::OutType::F32, main);
      cuda::rms_norm_f32_quantize(f32.as<float>(), q_norm.as<cuda::bf16>(), nullptr, qrq.as<uint8_t>(),
                                  qrs.as<float>(), n, kQLora, kEps, kBlock, main);
      cuda::fp8_gemm(qrq.as<uint8_t>(), qrs.as<float>(), n, wq_b.lin, f32.get(), cuda::OutType::F32, main);
      cuda::rms_norm_f32(f32.as<float>(), nullptr, q.as<cuda::bf16>(), int64_t(n) * kHeads, kHeadDim, kEps, main);
      cuda::rope(q.as<cuda::bf16>(), int64_t(kHeads) * kHeadDim, positions.as<int32_t>(), inv_freq.as<float>(), n,
                 kHeads, kHeadDim, kRope, false, main);
      DI_CUDA_CHECK(cudaStreamWaitEvent(main, join, 0));
      // No attention here: the roped query stands in for its output.
      cuda::w8a16_grouped_gemv(q.as<cuda::bf16>(), n, wo_a.lin, kGroups, z.as<cuda::bf16>(), main);
      cuda::fp8_quantize(z.as<cuda::bf16>(), zq.as<uint8_t>(), zs.as<float>(), n, kGroups * kOLora, kBlock, main);
      cuda::fp8_gemm(zq.as<uint8_t>(), zs.as<float>(), n, wo_b.lin, y.get(), cuda::OutType::BF16, main);
      cuda::hc_expand(Xb, y.as<cuda::bf16>(), mix.as<float>(), n, kHc, kHidden, Xb, main);
    }
    cuda::hc_head_collapse(Xb, n, kHc, kHidden, head_fn.as<float>(), head_base.as<float>(), head_scale.as<float>(),
                           kEps, kHcEps, h.as<cuda::bf16>(), main);
    cuda::rms_norm(h.as<cuda::bf16>(), final_norm.as<cuda::bf16>(), h.as<cuda::bf16>(), n, kHidden, kEps, main);
  }

  // Every buffer that a run leaves, as raw words.
  std::vector<uint32_t> outputs() {
    DI_CUDA_CHECK(cudaStreamSynchronize(main));
    std::vector<uint32_t> all;
    for (const cuda::DeviceBuffer* b : {&X, &h, &kv, &q, &y, &mix, &us, &qrs, &zs}) {
      const std::vector<uint32_t> v = cuda::to_host<uint32_t>(*b, b->bytes() / 4);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }

  std::vector<uint32_t> run_eager() {
    enqueue();
    return outputs();
  }

  // Captures the chain once (under the current PDL setting) and replays it `replays` times; returns every replay's
  // outputs.
  std::vector<std::vector<uint32_t>> run_graph(int replays) {
    cudaGraphExec_t exec = capture_exec(main, [&] { enqueue(); }, cudaStreamCaptureModeThreadLocal);
    std::vector<std::vector<uint32_t>> out;
    for (int i = 0; i < replays; ++i) {
      DI_CUDA_CHECK(cudaGraphLaunch(exec, main));
      out.push_back(outputs());
    }
    DI_CUDA_CHECK(cudaGraphExecDestroy(exec));
    return out;
  }
};

size_t mismatches(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += a[i] != b[i];
  return bad;
}

// Restores the process-wide PDL switch when a test ends (other tests run in the same binary).
struct PdlRestore {
  bool was = cuda::pdl_enabled();
  ~PdlRestore() { cuda::set_pdl(was); }
};

}  // namespace

TEST(GpuPdl, DecodeChainBitwiseOnAndOffEagerAndGraphs) {
  DI_SKIP_WITHOUT_GPU();
  PdlRestore restore;
  Rng rng;
  for (int rows : {1, 4, 24, 80}) {
    Chain c(rng, rows);
    const std::string tag = " rows=" + std::to_string(rows);
    cuda::set_pdl(false);
    const std::vector<uint32_t> ref = c.run_eager();
    const std::vector<uint32_t> ref_graph = c.run_graph(1)[0];
    cuda::set_pdl(true);
    const std::vector<uint32_t> on = c.run_eager();
    const std::vector<std::vector<uint32_t>> on_graph = c.run_graph(8);
    // The reference must itself be finite where it should be: no poison left in the final streams.
    size_t poisoned = 0;
    for (size_t i = 0; i < size_t(rows) * kHc * kHidden / 2; ++i) poisoned += ref[i] == 0xFFFFFFFFu;
    report_exact("pdl chain X written" + tag, poisoned, size_t(rows) * kHc * kHidden / 2);
    report_exact("pdl off graph vs off eager" + tag, mismatches(ref_graph, ref), ref.size());
    report_exact("pdl on eager vs off eager" + tag, mismatches(on, ref), ref.size());
    size_t bad = 0;
    for (const auto& g : on_graph) bad += mismatches(g, ref);
    report_exact("pdl on graph (8 replays) vs off eager" + tag, bad, ref.size() * on_graph.size());
  }
}

// The switch itself: set_pdl overrides DEEPINFER_PDL, and launches go through either way.
TEST(GpuPdl, SwitchIsReReadable) {
  PdlRestore restore;
  cuda::set_pdl(false);
  EXPECT_FALSE(cuda::pdl_enabled());
  cuda::set_pdl(true);
  EXPECT_TRUE(cuda::pdl_enabled());
}

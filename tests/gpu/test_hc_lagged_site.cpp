// V4.1's site entry in one launch (cuda::hc_lagged_site_pre; bench/gpu/NOTES.md "V4.1 site entry in one launch")
// against the chain of separate kernels V41GpuModel ran before it (model-spec §4 "Single-pass mHC": hc_expand of the
// previous sublayer's output with the previous site's row, hc_collapse with that row's pre, rms_norm, and at the
// attention site fp8_quantize at kV41Block = 32), bit for bit: the expanded streams, u, the FP8 codes and scales must
// not differ in any bit. V4.1's hidden (5120) and the GPU test model's (512), 1 / 2 / 8 / 64 rows, with and without the
// expand (the first site, the head's fallback) and the codes (the FFN site, the head); PDL on (the model's setting),
// the chain and the fused launch each on their own copy of the streams. Then a CUDA graph of the fused launch replayed
// against the eager result, and a timing line per row count (SITE_ENTRY_TIMING: the chain's four launches vs the one,
// back to back in a graph with PDL edges, no GEMMs between: a relative figure). The fused launch in both forms: at
// hidden 5120 up to 8 rows a cluster of 5 blocks per row (hc_lagged_site_spread_kernel, the default), and one block per
// row (DEEPINFER_HC_LAGGED_SITE=single), each against the chain and against each other. Last, the entry given y as
// the MoE's parts (y_parts: moe_forward's defer) against the entry on y combined first by moe_combine.
#include <string>
#include <vector>

#include "cuda/kernels.h"
#include "cuda/launch.h"
#include "cuda/step_kernels.h"
#include "gpu_test_util.h"
#include "layers/mhc/mhc_site_tail.h"
#include "mhc_site_inputs.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

constexpr int kHc = 4, kRows = (2 + kHc) * kHc, kQuantBlock = 32;  // kV41Block
constexpr float kEps = 1e-6f;

using PdlRestore = SwitchScope<bool, cuda::pdl_enabled, cuda::set_pdl>;
using SpreadRestore = SwitchScope<bool, cuda::hc_lagged_site_spread, cuda::set_hc_lagged_site_spread>;

// One entry's inputs (mhc_site_inputs.h for the streams and the norm weight), a sublayer output y and a plausible
// previous site's row (pre / post in (0, 2), positive comb weights, as test_hc_site_spread.cpp's).
struct Inputs {
  int64_t rows, hidden;
  std::vector<uint16_t> X;
  cuda::DeviceBuffer y, mix, w;
  Inputs(Rng& rng, int64_t rows_, int64_t hidden_) : rows(rows_), hidden(hidden_) {
    const SiteInputs in = site_inputs(rng, rows, hidden);
    X = to_bf16(in.X);
    std::vector<float> yv = rng.normals(size_t(rows * hidden), 0.0f, 0.5f);
    std::vector<float> row(size_t(rows * kRows));
    for (float& v : row) v = rng.uniform(0.05f, 1.95f);
    y = cuda::to_device(to_bf16(yv));
    mix = cuda::to_device(row);
    w = cuda::to_device(to_bf16(in.norm_weight));
  }
};

// One form's outputs, poisoned; X starts as the inputs' streams (the expand rewrites them in place).
struct Outputs {
  cuda::DeviceBuffer X, u, q, s;
  explicit Outputs(const Inputs& in)
      : X(cuda::to_device(in.X)),
        u(size_t(in.rows * in.hidden) * 2),
        q(size_t(in.rows * in.hidden)),
        s(size_t(in.rows * in.hidden / kQuantBlock) * 4) {
    u.fill_bytes(0xFF);
    q.fill_bytes(0xFF);
    s.fill_bytes(0xFF);
  }
  void reset(const Inputs& in) {
    X.upload(in.X.data(), in.X.size() * 2);
    u.fill_bytes(0xFF);
    q.fill_bytes(0xFF);
    s.fill_bytes(0xFF);
  }
};

// The model's chain (V41GpuModel before the fused entry) or the fused launch, on `stream`.
void enqueue(const Inputs& in, Outputs& o, bool fused, bool expand, bool codes, cudaStream_t stream) {
  auto* X = o.X.as<cuda::bf16>();
  auto* u = o.u.as<cuda::bf16>();
  const auto* y = in.y.as<cuda::bf16>();
  const auto* w = in.w.as<cuda::bf16>();
  const float* mix = in.mix.as<float>();
  uint8_t* q = codes ? o.q.as<uint8_t>() : nullptr;
  float* s = codes ? o.s.as<float>() : nullptr;
  if (fused) {
    cuda::hc_lagged_site_pre(X, expand ? y : nullptr, mix, in.rows, kHc, in.hidden, w, kEps, u, q, s, kQuantBlock,
                             stream);
    return;
  }
  if (expand) cuda::hc_expand(X, y, mix, in.rows, kHc, in.hidden, X, stream);
  cuda::hc_collapse(X, mix, in.rows, kHc, in.hidden, u, stream);
  cuda::rms_norm(u, w, u, in.rows, int(in.hidden), kEps, stream);
  if (codes) cuda::fp8_quantize(u, q, s, in.rows, int(in.hidden), kQuantBlock, stream);
}

struct Host {
  std::vector<uint16_t> X, u;
  std::vector<uint8_t> q;
  std::vector<float> s;
};

Host to_host(const Inputs& in, const Outputs& o, bool codes) {
  const size_t n_u = size_t(in.rows * in.hidden);
  Host h;
  h.X = cuda::to_host<uint16_t>(o.X, in.X.size());
  h.u = cuda::to_host<uint16_t>(o.u, n_u);
  if (codes) {
    h.q = cuda::to_host<uint8_t>(o.q, n_u);
    h.s = cuda::to_host<float>(o.s, n_u / kQuantBlock);
  }
  return h;
}

void report(const std::string& what, const Host& a, const Host& b, bool codes) {
  report_exact(what + " streams", bitwise_mismatches(a.X, b.X), a.X.size());
  report_exact(what + " u", bitwise_mismatches(a.u, b.u), a.u.size());
  if (codes) {
    report_exact(what + " fp8 codes", bitwise_mismatches(a.q, b.q), a.q.size());
    report_exact(what + " fp8 scales", bitwise_mismatches(a.s, b.s), a.s.size());
  }
}

std::string shape(const Inputs& in, bool expand, bool codes) {
  return " rows=" + std::to_string(in.rows) + " hidden=" + std::to_string(in.hidden) +
         (expand ? " expand" : " no-expand") + (codes ? " codes" : " no-codes");
}

}  // namespace

TEST(GpuHcLaggedSite, MatchesChainBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  PdlRestore restore;
  SpreadRestore spread_restore;
  cuda::set_pdl(true);
  for (int64_t hidden : {int64_t(5120), int64_t(512)})
    for (int64_t rows : {int64_t(1), int64_t(2), int64_t(8), int64_t(64)}) {
      const Inputs in(rng, rows, hidden);
      // The cluster form covers V4.1's decode rows (at 64 rows and at hidden 512 both settings run the one-block form).
      EXPECT_EQ(cuda::hc_lagged_site_spread_applies(rows, kHc, hidden), hidden == 5120 && rows <= 8)
          << shape(in, true, true);
      for (bool expand : {true, false})
        for (bool codes : {true, false}) {
          Outputs chain(in), single(in), spread(in);
          enqueue(in, chain, false, expand, codes, nullptr);
          cuda::set_hc_lagged_site_spread(false);
          enqueue(in, single, true, expand, codes, nullptr);
          cuda::set_hc_lagged_site_spread(true);
          enqueue(in, spread, true, expand, codes, nullptr);
          DI_CUDA_CHECK(cudaDeviceSynchronize());
          const Host h_chain = to_host(in, chain, codes), h_single = to_host(in, single, codes),
                     h_spread = to_host(in, spread, codes);
          report("fused vs chain" + shape(in, expand, codes), h_single, h_chain, codes);
          report("spread fused vs chain" + shape(in, expand, codes), h_spread, h_chain, codes);
          report("spread vs one-block fused" + shape(in, expand, codes), h_spread, h_single, codes);
        }
    }
}

TEST(GpuHcLaggedSite, GraphReplayMatchesEagerBitwiseAndTiming) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  PdlRestore restore;
  cuda::set_pdl(true);
  cudaStream_t stream = nullptr;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int64_t rows : {int64_t(1), int64_t(8), int64_t(64)}) {
    const Inputs in(rng, rows, 5120);
    Outputs eager(in), graph(in);
    enqueue(in, eager, true, true, true, nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    cudaGraphExec_t exec = capture_exec(stream, [&] { enqueue(in, graph, true, true, true, stream); });
    for (int replay = 0; replay < 2; ++replay) {
      graph.reset(in);
      DI_CUDA_CHECK(cudaDeviceSynchronize());
      DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      DI_CUDA_CHECK(cudaStreamSynchronize(stream));
      report("graph replay " + std::to_string(replay) + " vs eager" + shape(in, true, true),
             to_host(in, graph, true), to_host(in, eager, true), true);
    }
    DI_CUDA_CHECK(cudaGraphExecDestroy(exec));
    // The timed calls keep expanding the same streams (they grow, up to inf: the kernels' time does not depend on
    // the values); each form starts from the inputs.
    Outputs timed(in);
    DI_CUDA_CHECK(cudaDeviceSynchronize());  // the fills ran on the legacy stream; `stream` does not wait for it
    const double chain_us = time_per_call_us(stream, [&] { enqueue(in, timed, false, true, true, stream); });
    timed.reset(in);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    const double fused_us = time_per_call_us(stream, [&] { enqueue(in, timed, true, true, true, stream); });
    std::printf("SITE_ENTRY_TIMING rows=%lld hidden=5120 chain(expand,collapse,norm,fp8)=%.2f us fused=%.2f us\n",
                (long long)rows, chain_us, fused_us);
  }
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
}

// The entry reading y as the MoE's parts (y_parts, what moe_forward leaves with cuda::moe_site_combine on) against the
// entry on y that moe_combine wrote from the same parts, bit for bit: streams, u, codes and scales. Where the cluster
// kernel takes the call (hidden 5120, up to 8 rows) it sums the parts itself and y is poisoned (a read of it would
// show); elsewhere, and with the cluster form switched off, the call combines into y first. moe_combine itself against
// the combine's definition is GpuHcSiteSpread.CombinePartsMatchCombinedYBitwise. top_k 6 (V4.1), 1 and 8
// (kSiteCombineMaxTopK); fp32 and bf16 routed rows; the rows' expert rows in a shuffled order.
TEST(GpuHcLaggedSite, CombinePartsMatchCombinedYBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  PdlRestore restore;
  SpreadRestore spread_restore;
  cuda::set_pdl(true);
  struct Shape {
    int64_t rows, hidden;
    int top_k;
  };
  for (const Shape& sh : {Shape{1, 5120, 6}, Shape{2, 5120, 6}, Shape{8, 5120, 6}, Shape{1, 5120, 1},
                          Shape{1, 5120, 8}, Shape{64, 5120, 6}, Shape{1, 512, 6}}) {
    const Inputs in(rng, sh.rows, sh.hidden);
    const int64_t H = sh.hidden;
    const CombinePartsInputs moe(rng, sh.rows, H, sh.top_k);
    for (const bool bf16_parts : {false, true}) {
      const cuda::MoeCombineParts& parts = moe.parts(bf16_parts);
      cuda::DeviceBuffer combined(size_t(sh.rows * H) * 2);
      cuda::moe_combine(parts, sh.rows, H, combined.as<cuda::bf16>(), nullptr, false);
      DI_CUDA_CHECK(cudaDeviceSynchronize());
      for (const bool spread : {true, false})
        for (const bool codes : {true, false}) {
          cuda::set_hc_lagged_site_spread(spread);
          const bool cluster = spread && cuda::hc_lagged_site_spread_applies(sh.rows, kHc, H);
          // On y (the reference), or on the parts with y poisoned where the cluster kernel reads them.
          auto entry = [&](bool from_parts) {
            cuda::DeviceBuffer y(size_t(sh.rows * H) * 2);
            if (from_parts && cluster)
              y.fill_bytes(0xFF);
            else if (!from_parts)
              DI_CUDA_CHECK(cudaMemcpy(y.get(), combined.get(), y.bytes(), cudaMemcpyDeviceToDevice));
            Outputs o(in);
            cuda::hc_lagged_site_pre(o.X.as<cuda::bf16>(), y.as<cuda::bf16>(), in.mix.as<float>(), sh.rows, kHc, H,
                                     in.w.as<cuda::bf16>(), kEps, o.u.as<cuda::bf16>(),
                                     codes ? o.q.as<uint8_t>() : nullptr, codes ? o.s.as<float>() : nullptr,
                                     kQuantBlock, nullptr, from_parts ? &parts : nullptr);
            DI_CUDA_CHECK(cudaDeviceSynchronize());
            return to_host(in, o, codes);
          };
          const Host ref = entry(false), got = entry(true);
          report(std::string("entry on the combine's parts vs on y, ") + (cluster ? "cluster" : "combined first") +
                     " top_k=" + std::to_string(sh.top_k) + (bf16_parts ? " bf16 routed rows" : "") +
                     shape(in, true, codes),
                 got, ref, codes);
        }
    }
  }
}

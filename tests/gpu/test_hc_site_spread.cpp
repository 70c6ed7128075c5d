// The mHC site's one-token tail spread over the launch's blocks (DEEPINFER_HC_SITE_TAIL=spread, mhc_site_tail.h;
// bench/gpu/NOTES.md "mHC site tail spread over the blocks") against today's kernel (hc_site_kernel<1>), bit for
// bit: the spread kernel keeps every sum in today's order (the norm threads' sums of squares in their vector order,
// then rms_norm.cuh's lanes-then-warps block sum), so the mix, u, the FP8 codes and scales and (hc_expand_site_pre)
// the expanded streams must not differ in any bit. Today's kernel is itself checked bitwise against the chain of
// separate kernels and the CPU in test_mhc.cpp. Also: what a launch leaves for the next (runs back to back, on a
// workspace today's kernel used too), three launches replayed from a CUDA graph (with PDL edges) against the same
// launches run eagerly, and a chain of 16 sites in a graph against today's kernel (with a timing line).
// The spread kernel's finish (mhc_site_tail.h; bench/gpu/NOTES.md "mHC site latency": the comb steps in their own
// warp, the Sinkhorn steps in rows, sinkhorn_rows, where the lane form runs in today's kernel) against today's kernel,
// bit for bit, also with comb logits spread so far that the rows form's range check falls back to the lane form.
// The site on the MoE's output before its combine (hc_expand_site_pre's y_parts) against the site on the combined y.
#include <cstring>

#include "cuda/kernels.h"
#include "cuda/launch.h"
#include "cuda/step_kernels.h"
#include "gpu_test_util.h"
#include "layers/mhc/mhc_site_tail.h"
#include "mhc_site_inputs.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

constexpr int kHc = 4, kRows = (2 + kHc) * kHc, kIters = 20;
constexpr float kHcEps = 1e-6f;

// Restore the process-wide switches whatever the test does.
using SpreadRestore = SwitchScope<bool, cuda::hc_site_tail_spread, cuda::set_hc_site_tail_spread>;
using PdlRestore = SwitchScope<bool, cuda::pdl_enabled, cuda::set_pdl>;

// One site call's inputs on the device (mhc_site_inputs.h), and for the expand form a sublayer output y and a
// plausible previous mix row (pre / post in (0, 2), positive comb weights). comb_scale > 0 replaces the comb logits'
// multiplier (scale[2]): large values spread the logits so far that the softmax's exps leave sinkhorn_rows' range.
struct Inputs {
  int64_t tokens, hidden;
  std::vector<float> X, y, prev;
  cuda::DeviceBuffer fn, base, scale, w, dy;
  Inputs(Rng& rng, int64_t tokens_, int64_t hidden_, float comb_scale = 0.0f) : tokens(tokens_), hidden(hidden_) {
    SiteInputs in = site_inputs(rng, tokens, hidden);
    if (comb_scale > 0.0f) in.scale[2] = comb_scale;
    X = std::move(in.X);
    y = rng.normals(size_t(tokens * hidden), 0.0f, 0.5f);
    round_to_bf16(y);
    prev.resize(size_t(tokens * kRows));
    for (float& v : prev) v = rng.uniform(0.05f, 1.95f);
    fn = cuda::to_device(in.fn);
    base = cuda::to_device(in.base);
    scale = cuda::to_device(in.scale);
    w = cuda::to_device(to_bf16(in.norm_weight));
    dy = cuda::to_device(to_bf16(y));
  }
  cuda::HcSite site() const { return {fn.as<float>(), base.as<float>(), scale.as<float>()}; }
};

// One call's outputs (device), poisoned before the call; X holds the streams (the expand form rewrites them).
struct Outputs {
  cuda::DeviceBuffer X, mix, u, q, s;
  Outputs(const Inputs& in, int quant_block)
      : X(cuda::to_device(to_bf16(in.X))),
        mix(cuda::to_device(in.prev)),
        u(size_t(in.tokens * in.hidden) * 2),
        q(size_t(in.tokens * in.hidden)),
        s(std::max<size_t>(quant_block ? size_t(in.tokens * in.hidden / quant_block) : 0, 1) * 4) {
    u.fill_bytes(0xFF);
    q.fill_bytes(0xFF);
    s.fill_bytes(0xFF);
  }
  // The FP8 outputs a call takes (none without codes: quant_block 0).
  uint8_t* codes(int quant_block) { return quant_block ? q.as<uint8_t>() : nullptr; }
  float* scales(int quant_block) { return quant_block ? s.as<float>() : nullptr; }
};

// The call under test on `stream`: hc_expand_site_pre (expand) or hc_site_pre, quant_block 0 = no codes.
void enqueue(const Inputs& in, Outputs& o, bool expand, int quant_block, void* ws, cudaStream_t stream) {
  uint8_t* q = o.codes(quant_block);
  float* s = o.scales(quant_block);
  if (expand)
    cuda::hc_expand_site_pre(o.X.as<cuda::bf16>(), in.dy.as<cuda::bf16>(), in.tokens, kHc, in.hidden, in.site(),
                             1e-6f, kHcEps, kIters, in.w.as<cuda::bf16>(), o.mix.as<float>(), o.u.as<cuda::bf16>(), q,
                             s, quant_block, ws, stream);
  else
    cuda::hc_site_pre(o.X.as<cuda::bf16>(), in.tokens, kHc, in.hidden, in.site(), 1e-6f, kHcEps, kIters,
                      in.w.as<cuda::bf16>(), o.mix.as<float>(), o.u.as<cuda::bf16>(), q, s, quant_block, ws, stream);
}

struct Host {
  std::vector<uint16_t> X, u;
  std::vector<float> mix, s;
  std::vector<uint8_t> q;
};

Host to_host(const Inputs& in, const Outputs& o, int quant_block) {
  const size_t n_u = size_t(in.tokens * in.hidden);
  Host h;
  h.X = cuda::to_host<uint16_t>(o.X, in.X.size());
  h.mix = cuda::to_host<float>(o.mix, in.prev.size());
  h.u = cuda::to_host<uint16_t>(o.u, n_u);
  if (quant_block) {
    h.q = cuda::to_host<uint8_t>(o.q, n_u);
    h.s = cuda::to_host<float>(o.s, n_u / size_t(quant_block));
  }
  return h;
}

void report(const std::string& what, const Host& a, const Host& b, bool expand, int quant_block) {
  if (expand) report_exact(what + " streams", bitwise_mismatches(a.X, b.X), a.X.size());
  report_exact(what + " mix", bitwise_mismatches(a.mix, b.mix), a.mix.size());
  report_exact(what + " u", bitwise_mismatches(a.u, b.u), a.u.size());
  if (quant_block) {
    report_exact(what + " fp8 codes", bitwise_mismatches(a.q, b.q), a.q.size());
    report_exact(what + " fp8 scales", bitwise_mismatches(a.s, b.s), a.s.size());
  }
}

// Two calls back to back on one set of outputs and one workspace, with today's kernel and then with the spread
// kernel: first on other streams, then on the test's streams (the expand form then expands with the mix row the
// first call left, as the model's next site does). The second call must not take anything the first left (the old
// pre in the mix row, the sums in the workspace), and the spread kernel finds the workspace as today's left it.
// Every output of both calls: bitwise equal.
// comb_scale > 0: the comb logits' multiplier (Inputs).
void run_vs_today(Rng& rng, int64_t tokens, int64_t hidden, int quant_block, bool expand, float comb_scale = 0.0f) {
  ASSERT_TRUE(cuda::hc_site_tail_spread_applies(tokens, kHc, hidden, quant_block))
      << "the spread kernel would not run: tokens=" << tokens << " hidden=" << hidden;
  const Inputs in(rng, tokens, hidden, comb_scale);
  std::vector<float> X_other = in.X;
  for (float& v : X_other) v = round_bf16(v * -0.75f + 0.125f);
  const std::vector<uint16_t> X_bf16 = to_bf16(in.X), X_other_bf16 = to_bf16(X_other);
  cuda::DeviceBuffer ws(cuda::hc_site_mix_workspace_bytes(tokens, kHc, hidden));
  ws.fill_bytes(0);  // the arrival counters start at zero (kernels.h)
  SpreadRestore restore;
  auto run = [&](bool spread) {
    cuda::set_hc_site_tail_spread(spread);
    Outputs o(in, quant_block);
    o.X.upload(X_other_bf16.data(), X_other_bf16.size() * 2);
    enqueue(in, o, expand, quant_block, ws.get(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<Host> h{to_host(in, o, quant_block)};
    o.X.upload(X_bf16.data(), X_bf16.size() * 2);
    enqueue(in, o, expand, quant_block, ws.get(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    h.push_back(to_host(in, o, quant_block));
    return h;
  };
  const std::vector<Host> a = run(false), b = run(true);
  const std::string shape = std::string(expand ? "hc_expand_site_pre" : "hc_site_pre") +
                            " tokens=" + std::to_string(tokens) + " hidden=" + std::to_string(hidden) +
                            " quant_block=" + std::to_string(quant_block) +
                            (comb_scale > 0.0f ? " comb_scale=" + std::to_string(comb_scale) : std::string());
  report("spread vs today's kernel, first call " + shape, b[0], a[0], expand, quant_block);
  report("spread vs today's kernel, second call " + shape, b[1], a[1], expand, quant_block);
}

}  // namespace

TEST(GpuHcSiteSpread, MatchesTodaysKernelBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  for (int seed = 0; seed < 3; ++seed) {  // three draws of every shape
    for (bool expand : {false, true}) {
      run_vs_today(rng, 1, 4096, 128, expand);  // V4-Flash decode (8 tail blocks of 16 norm threads x 4 vectors)
      run_vs_today(rng, 1, 5120, 128, expand);  // V4.1-Flash decode (8 tail blocks of 16 x 5 vectors)
    }
  }
  run_vs_today(rng, 2, 4096, 128, false);  // two tokens (128 blocks), each its own counters
  run_vs_today(rng, 2, 4096, 128, true);
  run_vs_today(rng, 1, 4096, 256, false);  // quantization blocks of 32 lanes: 4 tail blocks of 32 norm threads
  run_vs_today(rng, 1, 5120, 0, true);     // no codes
  run_vs_today(rng, 1, 8192, 64, false);   // the widest rows: 8 vectors per norm thread, 128 tail threads
}

// The comb steps where sinkhorn_rows declines: comb logits spread by tens to hundreds put the softmax's exps under
// 2^-64 (and down to 0), so the comb warp reruns the lane form; and near the edge of its range, where it may or may
// not. Both decode shapes, both forms.
TEST(GpuHcSiteSpread, WideCombLogitsMatchTodaysKernelBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  for (float comb_scale : {8.0f, 30.0f, 300.0f, 3000.0f}) {
    for (bool expand : {false, true}) {
      run_vs_today(rng, 1, 4096, 128, expand, comb_scale);
      run_vs_today(rng, 1, 5120, 128, expand, comb_scale);
    }
  }
}

// Three launches replayed from a CUDA graph (PDL on: programmatic edges between them) three times, against the
// same three run eagerly: the expand form on its own streams, the plain site on the expanded streams, and the
// expand form again; the flags must be left right by every launch of every replay (no memset node resets them).
TEST(GpuHcSiteSpread, GraphReplayMatchesEagerBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  SpreadRestore restore;
  PdlRestore pdl_restore;
  cuda::set_hc_site_tail_spread(true);
  cuda::set_pdl(true);
  for (int64_t hidden : {int64_t(4096), int64_t(5120)}) {
    const int quant_block = 128;
    ASSERT_TRUE(cuda::hc_site_tail_spread_applies(1, kHc, hidden, quant_block));
    const Inputs in(rng, 1, hidden);
    cuda::DeviceBuffer ws(cuda::hc_site_mix_workspace_bytes(1, kHc, hidden));
    ws.fill_bytes(0);
    Outputs o1(in, quant_block), o2(in, quant_block), o3(in, quant_block);
    const cuda::DeviceBuffer X0 = cuda::to_device(to_bf16(in.X)), prev0 = cuda::to_device(in.prev);
    cudaStream_t stream = nullptr;
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const size_t x_bytes = in.X.size() * 2, mix_bytes = in.prev.size() * 4;
    // The sequence; each replay starts from the same streams and previous mix (the copies are graph nodes too).
    auto sequence = [&] {
      DI_CUDA_CHECK(cudaMemcpyAsync(o1.X.get(), X0.get(), x_bytes, cudaMemcpyDeviceToDevice, stream));
      DI_CUDA_CHECK(cudaMemcpyAsync(o1.mix.get(), prev0.get(), mix_bytes, cudaMemcpyDeviceToDevice, stream));
      DI_CUDA_CHECK(cudaMemcpyAsync(o3.X.get(), X0.get(), x_bytes, cudaMemcpyDeviceToDevice, stream));
      DI_CUDA_CHECK(cudaMemcpyAsync(o3.mix.get(), prev0.get(), mix_bytes, cudaMemcpyDeviceToDevice, stream));
      enqueue(in, o1, true, quant_block, ws.get(), stream);
      DI_CUDA_CHECK(cudaMemcpyAsync(o2.X.get(), o1.X.get(), x_bytes, cudaMemcpyDeviceToDevice, stream));
      enqueue(in, o2, false, quant_block, ws.get(), stream);
      enqueue(in, o3, true, quant_block, ws.get(), stream);
    };
    DI_CUDA_CHECK(cudaDeviceSynchronize());  // the fills above ran on the legacy stream; `stream` does not wait for it
    sequence();
    DI_CUDA_CHECK(cudaStreamSynchronize(stream));
    const Host e1 = to_host(in, o1, quant_block), e2 = to_host(in, o2, quant_block), e3 = to_host(in, o3, quant_block);
    cudaGraphExec_t exec = capture_exec(stream, sequence);
    for (int replay = 0; replay < 3; ++replay) {
      for (Outputs* o : {&o1, &o2, &o3}) {
        o->X.fill_bytes(0xFF);
        o->mix.fill_bytes(0xFF);
        o->u.fill_bytes(0xFF);
        o->q.fill_bytes(0xFF);
        o->s.fill_bytes(0xFF);
      }
      DI_CUDA_CHECK(cudaDeviceSynchronize());
      DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      DI_CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::string what = "graph replay " + std::to_string(replay) + " vs eager hidden=" + std::to_string(hidden);
      report(what + " launch 1 (expand)", to_host(in, o1, quant_block), e1, true, quant_block);
      report(what + " launch 2", to_host(in, o2, quant_block), e2, true, quant_block);
      report(what + " launch 3 (expand)", to_host(in, o3, quant_block), e3, true, quant_block);
    }
    DI_CUDA_CHECK(cudaGraphExecDestroy(exec));
    DI_CUDA_CHECK(cudaStreamDestroy(stream));
  }
}

// A chain of kChain hc_expand_site_pre launches (each expands the streams with the mix the previous one left, as
// the model's sites do) captured into one graph per kernel, today's and the spread one: after one replay from the
// same state the streams, mix, u and codes must be bitwise equal; then each graph is replayed kReplays more times
// and the device time per launch printed (SITE_TIMING lines: back-to-back sites with PDL edges, no GEMVs between
// them as in the model, so a relative figure).
TEST(GpuHcSiteSpread, ChainedGraphBitwiseAndTiming) {
  DI_SKIP_WITHOUT_GPU();
  constexpr int kChain = 16, kReplays = 50, quant_block = 128;
  Rng rng;
  SpreadRestore restore;
  PdlRestore pdl_restore;
  cuda::set_pdl(true);
  for (int64_t hidden : {int64_t(4096), int64_t(5120)}) {
    ASSERT_TRUE(cuda::hc_site_tail_spread_applies(1, kHc, hidden, quant_block));
    const Inputs in(rng, 1, hidden);
    const cuda::DeviceBuffer X0 = cuda::to_device(to_bf16(in.X)), prev0 = cuda::to_device(in.prev);
    cudaStream_t stream = nullptr;
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaEvent_t start = nullptr, stop = nullptr;
    DI_CUDA_CHECK(cudaEventCreate(&start));
    DI_CUDA_CHECK(cudaEventCreate(&stop));
    Host result[2];
    double us[2] = {0, 0};
    for (int spread = 0; spread < 2; ++spread) {
      cuda::set_hc_site_tail_spread(spread == 1);
      cuda::DeviceBuffer ws(cuda::hc_site_mix_workspace_bytes(1, kHc, hidden));
      ws.fill_bytes(0);
      Outputs o(in, quant_block);
      cudaGraphExec_t exec = capture_exec(stream, [&] {
        for (int i = 0; i < kChain; ++i) enqueue(in, o, true, quant_block, ws.get(), stream);
      });
      DI_CUDA_CHECK(cudaMemcpy(o.X.get(), X0.get(), in.X.size() * 2, cudaMemcpyDeviceToDevice));
      DI_CUDA_CHECK(cudaMemcpy(o.mix.get(), prev0.get(), in.prev.size() * 4, cudaMemcpyDeviceToDevice));
      DI_CUDA_CHECK(cudaDeviceSynchronize());  // fills and copies on the legacy stream, which `stream` does not wait for
      DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      DI_CUDA_CHECK(cudaStreamSynchronize(stream));
      result[spread] = to_host(in, o, quant_block);
      DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up
      DI_CUDA_CHECK(cudaEventRecord(start, stream));
      for (int r = 0; r < kReplays; ++r) DI_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      DI_CUDA_CHECK(cudaEventRecord(stop, stream));
      DI_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0.0f;
      DI_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      us[spread] = 1e3 * ms / (kReplays * kChain);
      DI_CUDA_CHECK(cudaGraphExecDestroy(exec));
    }
    report("chained graph of " + std::to_string(kChain) + " hc_expand_site_pre, spread vs today's kernel hidden=" +
               std::to_string(hidden),
           result[1], result[0], true, quant_block);
    std::printf("SITE_TIMING hc_expand_site_pre hidden=%lld graph replay us/launch: today %.2f spread %.2f\n",
                (long long)hidden, us[0], us[1]);
    DI_CUDA_CHECK(cudaEventDestroy(start));
    DI_CUDA_CHECK(cudaEventDestroy(stop));
    DI_CUDA_CHECK(cudaStreamDestroy(stream));
  }
}

// The switch itself: set_hc_site_tail_spread overrides DEEPINFER_HC_SITE_TAIL; the shapes it takes.
TEST(GpuHcSiteSpread, SwitchAndShapes) {
  DI_SKIP_WITHOUT_GPU();
  SpreadRestore restore;
  cuda::set_hc_site_tail_spread(true);
  EXPECT_TRUE(cuda::hc_site_tail_spread());
  cuda::set_hc_site_tail_spread(false);
  EXPECT_FALSE(cuda::hc_site_tail_spread());
  EXPECT_TRUE(cuda::hc_site_tail_spread_applies(1, kHc, 4096, 128));
  EXPECT_TRUE(cuda::hc_site_tail_spread_applies(1, kHc, 5120, 128));
  EXPECT_FALSE(cuda::hc_site_tail_spread_applies(2, kHc, 5120, 128));  // 160 blocks > 132 SMs
  EXPECT_FALSE(cuda::hc_site_tail_spread_applies(64, kHc, 4096, 128)); // groups of tokens: the chain
  EXPECT_FALSE(cuda::hc_site_tail_spread_applies(1, kHc, 1000, 0));    // not whole 1024-column norm passes
  EXPECT_FALSE(cuda::hc_site_tail_spread_applies(1, kHc, 8192, 256));  // 32 lanes x 8 vectors > 128 threads
}

// The site reading the MoE's output before its combine (hc_expand_site_pre's y_parts, layers/moe/moe_combine.h; what
// moe_forward leaves with cuda::moe_site_combine on) against the same site on y combined first by moe_combine
// (combine_kernel), bit for bit: streams, mix, u, codes and scales. The spread kernel sums the parts itself (y is
// poisoned and must not be read); with the spread kernel switched off the parts are combined into y first. The
// combined y itself against its definition (fp32 sums of the routed rows in order of k from +0.0, then the shared
// row, each rounded to bf16 first as the reference's GEMMs return them, the sum rounded to bf16). The routed rows as
// fp32 (the decode kernels' parts) and as bf16 (the prefill kernel's, MoeCombineParts::expert_y_bf16): the same bits.
// top_k 6 (V4 / V4.1), 1 and 8 (kSiteCombineMaxTopK); the routed rows in a shuffled order.
TEST(GpuHcSiteSpread, CombinePartsMatchCombinedYBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  SpreadRestore restore;
  struct Shape {
    int64_t tokens, hidden;
    int top_k, quant_block;
  };
  for (const Shape& sh : {Shape{1, 4096, 6, 128}, Shape{1, 5120, 6, 128}, Shape{2, 4096, 6, 128},
                          Shape{1, 4096, 1, 128}, Shape{1, 4096, 8, 0}}) {
    const Inputs in(rng, sh.tokens, sh.hidden);
    const int64_t H = sh.hidden;
    const CombinePartsInputs moe(rng, sh.tokens, H, sh.top_k);
    // The combine's definition, then moe_combine against it.
    std::vector<uint16_t> y_ref(size_t(sh.tokens * H));
    for (int64_t r = 0; r < sh.tokens; ++r)
      for (int64_t h = 0; h < H; ++h) {
        float acc = 0.0f;
        for (int k = 0; k < sh.top_k; ++k)
          acc += round_bf16(moe.expert_y[size_t(moe.slot[size_t(r * sh.top_k + k)] * H + h)]);
        acc += round_bf16(moe.shared_y[size_t(r * H + h)]);
        y_ref[size_t(r * H + h)] = float_to_bf16(acc);
      }
    for (const bool bf16_parts : {false, true}) {
      const cuda::MoeCombineParts& parts = moe.parts(bf16_parts);
      cuda::DeviceBuffer dy(y_ref.size() * 2);
      dy.fill_bytes(0xFF);
      cuda::moe_combine(parts, sh.tokens, H, dy.as<cuda::bf16>(), nullptr, false);
      DI_CUDA_CHECK(cudaDeviceSynchronize());
      const std::string shape = " tokens=" + std::to_string(sh.tokens) + " hidden=" + std::to_string(H) +
                                " top_k=" + std::to_string(sh.top_k) + (bf16_parts ? " bf16 routed rows" : "");
      report_exact("moe_combine vs its definition" + shape,
                   bitwise_mismatches(cuda::to_host<uint16_t>(dy, y_ref.size()), y_ref), y_ref.size());
      cuda::DeviceBuffer ws(cuda::hc_site_mix_workspace_bytes(sh.tokens, kHc, H));
      ws.fill_bytes(0);
      // y as a site call reads it: the combined rows, or poison where the call is given the parts instead.
      auto y_input = [&](bool from_parts) {
        cuda::DeviceBuffer y_in(y_ref.size() * 2);
        if (from_parts)
          y_in.fill_bytes(0xFF);
        else
          y_in.upload(y_ref.data(), y_ref.size() * 2);
        return y_in;
      };
      // The site on y (the reference) or on the parts with y poisoned, spread kernel on or off.
      auto site = [&](bool spread, bool from_parts) {
        cuda::set_hc_site_tail_spread(spread);
        const cuda::DeviceBuffer y_in = y_input(from_parts);
        Outputs o(in, sh.quant_block);
        cuda::hc_expand_site_pre(o.X.as<cuda::bf16>(), y_in.as<cuda::bf16>(), sh.tokens, kHc, H, in.site(), 1e-6f,
                                 kHcEps, kIters, in.w.as<cuda::bf16>(), o.mix.as<float>(), o.u.as<cuda::bf16>(),
                                 o.codes(sh.quant_block), o.scales(sh.quant_block), sh.quant_block, ws.get(), nullptr,
                                 from_parts ? &parts : nullptr);
        DI_CUDA_CHECK(cudaDeviceSynchronize());
        return to_host(in, o, sh.quant_block);
      };
      for (const bool spread : {true, false}) {
        if (spread && !cuda::hc_site_tail_spread_applies(sh.tokens, kHc, H, sh.quant_block)) continue;
        const Host ref = site(spread, false), got = site(spread, true);
        report(std::string("site on the combine's parts vs on y, ") + (spread ? "spread" : "today's kernel") + shape,
               got, ref, true, sh.quant_block);
      }
    }
  }
}

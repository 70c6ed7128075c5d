// Sink attention decode against layers/attention/sink_attention.cpp (attend_with_sink) over the same selected
// latent rows: the window ring rows plus the selected compressed rows, with empty (-1) slots.
#include <algorithm>

#include "cuda/kernels.h"
#include "attention_inputs.h"
#include "gpu_test_util.h"
#include "layers/attention/sink_attention.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

constexpr int H = cuda::kAttnHeads, D = cuda::kAttnDim;

void run_attention(Rng& rng, int batch, int window_stride, int compressed_stride, float q_sd, const char* label) {
  const int pool_rows = 3000;
  const AttentionInputs in = random_attention_inputs(rng, batch, pool_rows, q_sd);
  const auto& [window_pool, comp_pool, q, sink] = in;

  // Sequence b fills a random number of its slots; the rest are -1 (a short sequence, fewer than top-k picks).
  std::vector<int32_t> wrows(size_t(batch) * window_stride, -1), crows(size_t(batch) * compressed_stride, -1);
  for (int b = 0; b < batch; ++b) {
    const int nw = b == 0 ? window_stride : rng.integer(0, window_stride);
    const int nc = b == 0 ? compressed_stride : rng.integer(0, compressed_stride);
    for (int i = 0; i < nw; ++i) wrows[size_t(b) * window_stride + i] = rng.integer(0, pool_rows - 1);
    for (int i = 0; i < nc; ++i) crows[size_t(b) * compressed_stride + i] = rng.integer(0, pool_rows - 1);
    // A few holes in the middle as well.
    if (compressed_stride > 0) crows[size_t(b) * compressed_stride + rng.integer(0, compressed_stride - 1)] = -1;
  }

  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<float> ref(q.size());
  for (int b = 0; b < batch; ++b)
    sink_attention_reference(in, b, wrows, window_stride, crows, compressed_stride, scale, ref.data() + size_t(b) * H * D);

  cuda::DeviceBuffer dq = cuda::to_device(to_bf16(q)), dwp = cuda::to_device(to_bf16(window_pool)),
                     dcp = cuda::to_device(to_bf16(comp_pool)), dwr = cuda::to_device(wrows),
                     dcr = cuda::to_device(crows), dsink = cuda::to_device(sink), dout(q.size() * 2),
                     dws(cuda::sink_attention_workspace_bytes(batch, window_stride, compressed_stride));
  dout.fill_bytes(0xFF);
  dws.fill_bytes(0xFF);
  cuda::KvRows window{dwp.as<cuda::bf16>(), dwr.as<int32_t>(), window_stride};
  cuda::KvRows compressed{dcp.as<cuda::bf16>(), dcr.as<int32_t>(), compressed_stride};
  cuda::sink_attention_decode(dq.as<cuda::bf16>(), batch, window, compressed, dsink.as<float>(), scale,
                              dout.as<cuda::bf16>(), dws.get(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out = from_bf16(cuda::to_host<uint16_t>(dout, q.size()));
  // The probabilities enter the value product as bf16 (one rounding, 2^-8 relative, on every weight) and the
  // output is rounded once to bf16: 2 x 2^-8 at worst.
  check_rel_l2(std::string("sink_attention ") + label + " batch=" + std::to_string(batch) + " slots=" +
                   std::to_string(window_stride) + "+" + std::to_string(compressed_stride),
               out, ref, 2.0 / 256.0);
}

}  // namespace

TEST(GpuSinkAttention, WindowPlusCompressedDecode) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_attention(rng, 1, 128, 512, 1.0f, "csa");        // one sequence: many splits
  run_attention(rng, 5, 128, 512, 3.0f, "csa-peaked");  // sharper softmax, partly empty sequences
  run_attention(rng, 3, 128, 0, 1.0f, "window-only");
  run_attention(rng, 2, 128, 200, 1.0f, "hca");         // HCA: every visible compressed entry, ragged count
}

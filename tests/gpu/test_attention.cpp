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

constexpr int D = cuda::kAttnDim;

void run_attention(Rng& rng, int batch, int window_stride, int compressed_stride, float q_sd, const char* label) {
  const int pool_rows = 3000;
  const AttentionInputs in = random_attention_inputs(rng, batch, pool_rows, q_sd);

  // Sequence 0 fills every slot, the others a random number of theirs, with a hole in the middle as well.
  const AttentionRows rows =
      ragged_attention_rows(rng, batch, window_stride, compressed_stride, pool_rows, true, [&](int b) {
        if (b == 0) return std::pair{window_stride, compressed_stride};
        const int nw = rng.integer(0, window_stride);
        return std::pair{nw, rng.integer(0, compressed_stride)};
      });

  const float scale = 1.0f / std::sqrt(float(D));
  const std::vector<float> ref = sink_attention_reference(in, rows, scale);

  DeviceAttentionBatch dev(in, rows);
  dev.out.fill_bytes(0xFF);
  dev.ws.fill_bytes(0xFF);
  cuda::sink_attention_decode(dev.q.as<cuda::bf16>(), batch, dev.window, dev.compressed, dev.sink.as<float>(), scale,
                              dev.out.as<cuda::bf16>(), dev.ws.get(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out = from_bf16(cuda::to_host<uint16_t>(dev.out, in.q.size()));
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

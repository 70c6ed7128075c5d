// Sink attention decode against layers/attention/sink_attention.cpp (attend_with_sink) over the same selected
// latent rows: the window ring rows plus the selected compressed rows, with empty (-1) slots. GpuKvRecord.*: the
// packed FP8 record pools (layers/attention/kv_record.h) against the bf16 pools, bitwise, and the window writers;
// GpuKvRecordV41.*: the same for V4.1's MXFP8 window and FP4 entry records (kvrec41).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "cuda/kernels.h"
#include "cuda/numerics_mode.h"
#include "cuda/step_kernels.h"
#include "attention_inputs.h"
#include "gpu_test_util.h"
#include "layers/attention/decode_fused.h"
#include "layers/attention/kv_record.h"
#include "layers/attention/sink_attention.h"
#include "layers/norm_rope/rope.h"
#include "model/v41/gpu/v41_step_kernels.h"

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

// ---------------------------------------------------------------------------------------------------------
// The packed FP8 KV record (layers/attention/kv_record.h, bench/gpu/NOTES.md "Packed FP8 KV record"): a record
// decodes to exactly the bf16 values the bf16 pools hold, so the attention over records and its writers must give
// the bf16 format's bits.

namespace {

// The host encoder / decoder of a record format (kv_record.h): V4's FP8 row, V4.1's MXFP8 window row or FP4 entry.
void encode_record(cuda::KvFormat format, const float* row, uint8_t* record) {
  if (format == cuda::KvFormat::Mxfp8)
    cuda::kvrec41::encode_window_row(row, record);
  else if (format == cuda::KvFormat::Fp4)
    cuda::kvrec41::encode_entry(row, record);
  else
    cuda::kvrec::encode_row(row, record);
}
void decode_record(cuda::KvFormat format, const uint8_t* record, float* row) {
  if (format == cuda::KvFormat::Mxfp8)
    cuda::kvrec41::decode_window_row(record, row);
  else if (format == cuda::KvFormat::Fp4)
    cuda::kvrec41::decode_entry(record, row);
  else
    cuda::kvrec::decode_row(record, row);
}

// Every row of a [rows, D] pool through the record of `format`: `records` gets the encoded rows (kv_row_bytes each)
// and `pool` the values they decode to (what a bf16 pool of the same cache holds). Each row is first scaled by 2^k,
// k in [-6, 6], so the blocks span many scales.
std::vector<uint8_t> to_records(Rng& rng, std::vector<float>& pool, cuda::KvFormat format = cuda::KvFormat::Fp8) {
  const size_t rows = pool.size() / D, bytes = size_t(cuda::kv_row_bytes(format, D));
  std::vector<uint8_t> records(rows * bytes);
  for (size_t r = 0; r < rows; ++r) {
    const float k = std::ldexp(1.0f, rng.integer(-6, 6));
    for (int d = 0; d < D; ++d) pool[r * D + size_t(d)] *= k;
    encode_record(format, pool.data() + r * D, records.data() + r * bytes);
    decode_record(format, records.data() + r * bytes, pool.data() + r * D);
  }
  return records;
}

// sink_attention_decode over the bf16 pools and over the same rows as records (the window pool in window_format,
// the compressed pool in entry_format): outputs bit for bit, in each of the kernel's forms (split + merge;
// batch-invariant splits).
void run_attention_formats(Rng& rng, int batch, int window_stride, int compressed_stride, const char* label,
                           cuda::KvFormat window_format = cuda::KvFormat::Fp8,
                           cuda::KvFormat entry_format = cuda::KvFormat::Fp8) {
  const int pool_rows = 2000;
  AttentionInputs in = random_attention_inputs(rng, batch, pool_rows, 0.5f);
  const std::vector<uint8_t> window_rec = to_records(rng, in.window_pool, window_format),
                             comp_rec = to_records(rng, in.comp_pool, entry_format);
  const AttentionRows rows =
      ragged_attention_rows(rng, batch, window_stride, compressed_stride, pool_rows, true, [&](int b) {
        if (b == 0) return std::pair{window_stride, compressed_stride};
        return std::pair{rng.integer(0, window_stride), rng.integer(0, compressed_stride)};
      });
  DeviceAttentionBatch dev(in, rows);
  cuda::DeviceBuffer dwrec = cuda::to_device(window_rec), dcrec = cuda::to_device(comp_rec), out8(in.q.size() * 2);
  const cuda::KvRows window8{dwrec.get(), dev.window.rows, rows.window_stride, window_format};
  const cuda::KvRows comp8{dcrec.get(), dev.compressed.rows, rows.compressed_stride, entry_format};
  const std::string formats = window_format == entry_format
                                  ? std::string(cuda::kv_format_name(window_format))
                                  : std::string(cuda::kv_format_name(window_format)) + "/" +
                                        cuda::kv_format_name(entry_format);
  const float scale = 1.0f / std::sqrt(float(D));
  struct Mode {
    bool invariant;
    const char* name;
  };
  const bool invariant_before = cuda::batch_invariant();
  for (const Mode mode : {Mode{false, "split"}, Mode{true, "invariant"}}) {
    cuda::set_batch_invariant(mode.invariant);
    cuda::DeviceBuffer ws(cuda::sink_attention_workspace_bytes(batch, rows.window_stride, rows.compressed_stride));
    dev.out.fill_bytes(0xFF);
    out8.fill_bytes(0xFF);
    cuda::sink_attention_decode(dev.q.as<cuda::bf16>(), batch, dev.window, dev.compressed, dev.sink.as<float>(), scale,
                                dev.out.as<cuda::bf16>(), ws.get(), nullptr);
    cuda::sink_attention_decode(dev.q.as<cuda::bf16>(), batch, window8, comp8, dev.sink.as<float>(), scale,
                                out8.as<cuda::bf16>(), ws.get(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> a = cuda::to_host<uint16_t>(dev.out, in.q.size());
    const std::vector<uint16_t> b = cuda::to_host<uint16_t>(out8, in.q.size());
    size_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i) bad += a[i] != b[i];
    report_exact("sink_attention " + formats + " records vs bf16 pool " + label + " " + mode.name +
                     " batch=" + std::to_string(batch) + " slots=" + std::to_string(window_stride) + "+" +
                     std::to_string(compressed_stride),
                 bad, a.size());
  }
  cuda::set_batch_invariant(invariant_before);
}

// sink_attention_decode_committed with the epilogue in the merge launch (merge_epilogue on) against the two launches
// it replaces (off: sink_attention_decode, then commit_window_and_derotate): the de-rotated output and the window
// pool bit for bit, in each kernel form. The pool the
// attention reads is the pool the epilogue commits to (rings of `ring` rows for `batch` slots, then the step's
// scratch rows), so a commit that overtook the split kernel's reads would change the output. At batch 1 in the split
// form the captured graph must hold one kernel node fewer with the switch on.
void run_merge_epilogue(Rng& rng, int batch, int window_stride, int compressed_stride, cuda::KvFormat window_format,
                        cuda::KvFormat entry_format) {
  const int ring = 32, pool_rows = 2000;
  AttentionInputs in = random_attention_inputs(rng, batch, pool_rows, 0.5f);
  const bool records = window_format != cuda::KvFormat::Bf16;
  const std::vector<uint8_t> window_rec = records ? to_records(rng, in.window_pool, window_format)
                                                  : std::vector<uint8_t>{},
                             comp_rec = records ? to_records(rng, in.comp_pool, entry_format) : std::vector<uint8_t>{};
  const AttentionRows rows =
      ragged_attention_rows(rng, batch, window_stride, compressed_stride, pool_rows, true, [&](int b) {
        if (b == 0) return std::pair{window_stride, compressed_stride};
        return std::pair{rng.integer(0, window_stride), rng.integer(0, compressed_stride)};
      });
  DeviceAttentionBatch dev(in, rows);
  const cuda::DeviceBuffer dcrec = cuda::to_device(comp_rec);
  const size_t n = size_t(batch);
  std::vector<int32_t> slots(n), positions(n), first(n), chunk_rows(n, 1);
  for (int b = 0; b < batch; ++b) {
    slots[size_t(b)] = b;
    first[size_t(b)] = b;
    positions[size_t(b)] = 1000 * b + rng.integer(0, 999);
  }
  const cuda::DeviceBuffer dslots = cuda::to_device(slots), dpos = cuda::to_device(positions),
                           dfirst = cuda::to_device(first), drows = cuda::to_device(chunk_rows);
  Rope rope(cuda::kvrec::kRopeDim, 10000.0f, nullptr);
  const cuda::DeviceBuffer dfreq = cuda::to_device(rope.inv_freq());
  const std::string what = std::string(cuda::kv_format_name(window_format)) + "/" +
                           cuda::kv_format_name(entry_format) + " batch=" + std::to_string(batch) + " slots=" +
                           std::to_string(window_stride) + "+" + std::to_string(compressed_stride);
  const float scale = 1.0f / std::sqrt(float(D));
  const size_t out_n = in.q.size(), pool_bytes = size_t(pool_rows) * cuda::kv_row_bytes(window_format, D);
  const bool epilogue_before = cuda::merge_epilogue(), invariant_before = cuda::batch_invariant();
  struct Mode {
    bool invariant;
    const char* name;
  };
  for (const Mode mode : {Mode{false, "split"}, Mode{true, "invariant"}}) {
    cuda::set_batch_invariant(mode.invariant);
    std::vector<uint16_t> out[2];
    std::vector<uint8_t> pool[2];
    int nodes[2] = {0, 0};
    for (const bool on : {false, true}) {
      cuda::set_merge_epilogue(on);
      cuda::DeviceBuffer wpool = records ? cuda::to_device(window_rec) : cuda::to_device(to_bf16(in.window_pool));
      const cuda::KvRows window{wpool.get(), dev.window.rows, rows.window_stride, window_format};
      const cuda::KvRows compressed{records ? dcrec.get() : dev.comp_pool.get(), dev.compressed.rows,
                                    rows.compressed_stride, entry_format};
      const cuda::AttentionEpilogue e{wpool.get(),     dslots.as<int32_t>(), dpos.as<int32_t>(),
                                      dfirst.as<int32_t>(), drows.as<int32_t>(), batch,
                                      ring,            batch,                D,
                                      dev.out.as<cuda::bf16>(), dpos.as<int32_t>(), batch,
                                      cuda::kAttnHeads, rope.rope_dim(),     dfreq.as<float>(),
                                      window_format};
      // The split plan, hence the workspace, depends on the mode (batch-invariant splits are fixed-size).
      cuda::DeviceBuffer ws(cuda::sink_attention_workspace_bytes(batch, rows.window_stride, rows.compressed_stride));
      auto attend = [&](cudaStream_t stream) {
        cuda::sink_attention_decode_committed(dev.q.as<cuda::bf16>(), batch, window, compressed, dev.sink.as<float>(),
                                              scale, ws.get(), e, stream);
      };
      dev.out.fill_bytes(0xFF);
      ws.fill_bytes(0xFF);
      attend(nullptr);
      DI_CUDA_CHECK(cudaDeviceSynchronize());
      out[on] = cuda::to_host<uint16_t>(dev.out, out_n);
      pool[on] = cuda::to_host<uint8_t>(wpool, pool_bytes);
      if (batch == 1 && !mode.invariant) {
        cudaStream_t stream = nullptr;
        DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        nodes[on] = captured_kernel_nodes(stream, [&] { attend(stream); });
        DI_CUDA_CHECK(cudaStreamDestroy(stream));
      }
    }
    report_exact("merge epilogue on vs off: output " + what + " " + mode.name, bitwise_mismatches(out[1], out[0]),
                 out_n);
    report_exact("merge epilogue on vs off: window pool " + what + " " + mode.name,
                 bitwise_mismatches(pool[1], pool[0]), pool_bytes);
    if (batch == 1 && !mode.invariant) {
      std::printf("GPU_CHECK merge epilogue %s kernel nodes off=%d on=%d\n", what.c_str(), nodes[0], nodes[1]);
      EXPECT_EQ(nodes[1], nodes[0] - 1) << what;
    }
  }
  cuda::set_merge_epilogue(epilogue_before);
  cuda::set_batch_invariant(invariant_before);
}

// V4's query norm + RoPE in the split kernel's prologue (the QueryNormRope form of sink_attention_decode_committed,
// decode_fused.h) against the two launches V4's decode step ran (rms_norm_f32_rope of wq_b's fp32 output into q, then
// sink_attention_decode_committed of q): the de-rotated output and the window pool bit for bit, with the prologue on
// and off (off: the entry's own norm launch), in each kernel form. The fp32
// rows span scales e^[-6, 6] with one all-zero row (rsqrt(eps)); the positions reach 2^24 - 1 (sincosf's slow path),
// 64 heads of 512, rope_dim 64. In the split form the prologue leaves q as it was (the rows never leave the blocks)
// and the captured graph holds one kernel node fewer at batch 1. Every buffer is filled on the test's stream.
void run_query_prologue(Rng& rng, int batch, int window_stride, int compressed_stride, cuda::KvFormat window_format,
                        cuda::KvFormat entry_format) {
  const int ring = 32, pool_rows = 2000, heads = cuda::kAttnHeads;
  AttentionInputs pools = random_attention_inputs(rng, batch, pool_rows, 0.5f);  // pools.q unused: the rows are x
  const bool records = window_format != cuda::KvFormat::Bf16;
  const std::vector<uint8_t> window_rec = records ? to_records(rng, pools.window_pool, window_format)
                                                  : std::vector<uint8_t>{},
                             comp_rec = records ? to_records(rng, pools.comp_pool, entry_format)
                                                : std::vector<uint8_t>{};
  const AttentionRows rows =
      ragged_attention_rows(rng, batch, window_stride, compressed_stride, pool_rows, true, [&](int b) {
        if (b == 0) return std::pair{window_stride, compressed_stride};
        return std::pair{rng.integer(0, window_stride), rng.integer(0, compressed_stride)};
      });
  DeviceAttentionBatch dev(pools, rows);
  std::vector<float> x(size_t(batch) * heads * D);
  for (int r = 0; r < batch * heads; ++r) {
    const float sd = std::exp(rng.uniform(-6.0f, 6.0f));
    for (int i = 0; i < D; ++i) x[size_t(r) * D + size_t(i)] = r == 1 ? 0.0f : rng.normal(0.0f, sd);
  }
  const size_t n = size_t(batch);
  std::vector<int32_t> slots(n), positions(n), first(n), chunk_rows(n, 1);
  for (int b = 0; b < batch; ++b) {
    slots[size_t(b)] = b;
    first[size_t(b)] = b;
    positions[size_t(b)] = b == 0 ? (1 << 24) - 1 - rng.integer(0, 999) : rng.integer(0, 1 << 20);
  }
  const cuda::DeviceBuffer dcrec = cuda::to_device(comp_rec), dx = cuda::to_device(x),
                           dslots = cuda::to_device(slots), dpos = cuda::to_device(positions),
                           dfirst = cuda::to_device(first), drows = cuda::to_device(chunk_rows);
  const Rope rope(cuda::kvrec::kRopeDim, 10000.0f, nullptr);
  const cuda::DeviceBuffer dfreq = cuda::to_device(rope.inv_freq());
  const float eps = 1e-6f, scale = 1.0f / std::sqrt(float(D));
  const cuda::QueryNormRope norm{dx.as<float>(), dpos.as<int32_t>(), dfreq.as<float>(), eps, rope.rope_dim()};
  const std::string what = std::string(cuda::kv_format_name(window_format)) + "/" +
                           cuda::kv_format_name(entry_format) + " batch=" + std::to_string(batch) + " slots=" +
                           std::to_string(window_stride) + "+" + std::to_string(compressed_stride);
  const size_t out_n = x.size(), pool_bytes = size_t(pool_rows) * cuda::kv_row_bytes(window_format, D);
  const bool prologue_before = cuda::query_norm_prologue(), invariant_before = cuda::batch_invariant();
  cudaStream_t stream = nullptr;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct Mode {
    bool invariant;
    const char* name;
  };
  // The chain V4's step ran, the QueryNormRope form with the prologue off, and with it on.
  enum Path { kChain, kOff, kOn };
  const char* path_names[] = {"chain", "prologue off", "prologue on"};
  for (const Mode mode : {Mode{false, "split"}, Mode{true, "invariant"}}) {
    cuda::set_batch_invariant(mode.invariant);
    const bool counted = batch == 1 && !mode.invariant;
    std::vector<uint16_t> out[3], q[3];
    std::vector<uint8_t> pool[3];
    int nodes[3] = {0, 0, 0};
    for (const Path path : {kChain, kOff, kOn}) {
      cuda::set_query_norm_prologue(path == kOn);
      cuda::DeviceBuffer wpool = records ? cuda::to_device(window_rec) : cuda::to_device(to_bf16(pools.window_pool));
      const cuda::KvRows window{wpool.get(), dev.window.rows, rows.window_stride, window_format};
      const cuda::KvRows compressed{records ? dcrec.get() : dev.comp_pool.get(), dev.compressed.rows,
                                    rows.compressed_stride, entry_format};
      const cuda::AttentionEpilogue e{wpool.get(),     dslots.as<int32_t>(), dpos.as<int32_t>(),
                                      dfirst.as<int32_t>(), drows.as<int32_t>(), batch,
                                      ring,            batch,                D,
                                      dev.out.as<cuda::bf16>(), dpos.as<int32_t>(), batch,
                                      heads,           rope.rope_dim(),      dfreq.as<float>(),
                                      window_format};
      cuda::DeviceBuffer ws(cuda::sink_attention_workspace_bytes(batch, rows.window_stride, rows.compressed_stride)),
          dq(out_n * 2);
      auto attend = [&](cudaStream_t s) {
        if (path == kChain) {
          cuda::rms_norm_f32_rope(dx.as<float>(), nullptr, dq.as<cuda::bf16>(), int64_t(batch) * heads, D, eps, heads,
                                  dpos.as<int32_t>(), dfreq.as<float>(), rope.rope_dim(), cuda::KvCacheRows{}, s);
          cuda::sink_attention_decode_committed(dq.as<cuda::bf16>(), batch, window, compressed, dev.sink.as<float>(),
                                                scale, ws.get(), e, s);
        } else {
          cuda::sink_attention_decode_committed(norm, dq.as<cuda::bf16>(), batch, window, compressed,
                                                dev.sink.as<float>(), scale, ws.get(), e, s);
        }
      };
      DI_CUDA_CHECK(cudaDeviceSynchronize());  // the synchronous uploads land before the stream's work
      DI_CUDA_CHECK(cudaMemsetAsync(dev.out.get(), 0xFF, dev.out.bytes(), stream));
      DI_CUDA_CHECK(cudaMemsetAsync(ws.get(), 0xFF, ws.bytes(), stream));
      DI_CUDA_CHECK(cudaMemsetAsync(dq.get(), 0xFF, dq.bytes(), stream));
      attend(stream);
      DI_CUDA_CHECK(cudaStreamSynchronize(stream));
      out[path] = cuda::to_host<uint16_t>(dev.out, out_n);
      pool[path] = cuda::to_host<uint8_t>(wpool, pool_bytes);
      q[path] = cuda::to_host<uint16_t>(dq, out_n);
      if (counted) nodes[path] = captured_kernel_nodes(stream, [&] { attend(stream); });
    }
    for (const Path path : {kOff, kOn}) {
      const std::string name = std::string(path_names[path]) + " vs chain: ";
      report_exact("query prologue " + name + "output " + what + " " + mode.name,
                   bitwise_mismatches(out[path], out[kChain]), out_n);
      report_exact("query prologue " + name + "window pool " + what + " " + mode.name,
                   bitwise_mismatches(pool[path], pool[kChain]), pool_bytes);
    }
    // The prologue keeps the rows in the blocks.
    report_exact("query prologue on: q untouched " + what + " " + mode.name,
                 bitwise_mismatches(q[kOn], std::vector<uint16_t>(out_n, 0xFFFF)), out_n);
    report_exact("query prologue off: q as the chain's " + what + " " + mode.name,
                 bitwise_mismatches(q[kOff], q[kChain]), out_n);
    if (counted) {
      std::printf("GPU_CHECK query prologue %s kernel nodes chain=%d off=%d on=%d\n", what.c_str(), nodes[kChain],
                  nodes[kOff], nodes[kOn]);
      EXPECT_EQ(nodes[kOff], nodes[kChain]) << what;
      EXPECT_EQ(nodes[kOn], nodes[kChain] - 1) << what;
    }
  }
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
  cuda::set_query_norm_prologue(prologue_before);
  cuda::set_batch_invariant(invariant_before);
}

}  // namespace

TEST(GpuKvRecord, AttentionOverRecordsIsBitwiseTheBf16Pool) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_attention_formats(rng, 1, 128, 512, "csa");  // one sequence: many splits
  run_attention_formats(rng, 3, 128, 0, "window-only");
  run_attention_formats(rng, 6, 128, 200, "hca");  // ragged counts, holes
  run_attention_formats(rng, 37, 128, 512, "csa");  // odd tile counts per split
}

// The attention core's epilogue (window commit + de-rotation) inside the merge launch, bitwise the separate launch:
// V4's FP8 records, V4.1's MXFP8 window with FP4 entries, bf16 pools; one row (many splits), ragged rows with holes,
// a window-only layer, and 37 rows.
// The (window, compressed entry) pool formats of the decode attention: V4's FP8 records, V4.1's MXFP8 window with FP4
// entries, bf16 pools.
constexpr std::pair<cuda::KvFormat, cuda::KvFormat> kPoolFormats[] = {{cuda::KvFormat::Fp8, cuda::KvFormat::Fp8},
                                                                      {cuda::KvFormat::Mxfp8, cuda::KvFormat::Fp4},
                                                                      {cuda::KvFormat::Bf16, cuda::KvFormat::Bf16}};

TEST(GpuSinkAttention, MergeEpilogueIsBitwiseTheSeparateLaunch) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  for (const auto& [win, entry] : kPoolFormats) {
    run_merge_epilogue(rng, 1, 128, 512, win, entry);
    run_merge_epilogue(rng, 5, 128, 200, win, entry);
    run_merge_epilogue(rng, 3, 128, 0, win, entry);
    run_merge_epilogue(rng, 37, 128, 512, win, entry);
    // Batch <= 2 loads every split at once up to 24 splits (merge_head<kHeld>; the first case above: 20 splits, and
    // batch-invariant mode's 1-4): 4 splits (one batch held), 11 (two, the second row ragged: splits without a key),
    // 24 (three), 26 (past them: the batched form at batch 1).
    run_merge_epilogue(rng, 1, 128, 0, win, entry);
    run_merge_epilogue(rng, 2, 128, 200, win, entry);
    run_merge_epilogue(rng, 1, 128, 640, win, entry);
    run_merge_epilogue(rng, 1, 128, 704, win, entry);
  }
}

// V4's query norm + RoPE in the attention split kernel's prologue, bitwise the norm's own launch in front of the
// attention core: V4's FP8 records and bf16 pools (V4's decode step), V4.1's record pair (the kernel's third
// instantiation); one row (many splits, the node count), two ragged rows, eight.
TEST(GpuSinkAttention, QueryNormPrologueIsBitwiseTheNormLaunch) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  for (const auto& [win, entry] : kPoolFormats) {
    run_query_prologue(rng, 1, 128, 512, win, entry);
    run_query_prologue(rng, 2, 128, 200, win, entry);
    run_query_prologue(rng, 8, 128, 512, win, entry);
  }
}

// The step's window writers in the record format against the bf16 format: the fused KV-row norm (rms_norm_f32_rope
// with a cache, the decode path) and kv_fake_quant (DEEPINFER_FUSED_ATTENTION_STEPS=0). Each record decodes to the
// bf16 cache row bit for bit; both kernels write the same record bytes, and those are the host encoder's bytes of
// the same bf16 row (the device's e4m3 conversion, the layout and the zero padding).
TEST(GpuKvRecord, WindowWritersEncodeTheBf16CacheRows) {
  DI_SKIP_WITHOUT_GPU();
  namespace kvrec = cuda::kvrec;
  Rng rng;
  const int rows = 37, n = kvrec::kDim, rope_dim = kvrec::kRopeDim;
  const Rope rope(rope_dim, 10000.0f, nullptr);
  std::vector<float> x(static_cast<size_t>(rows * n)), w(static_cast<size_t>(n));
  for (int r = 0; r < rows; ++r) {
    const float row_scale = std::exp(rng.uniform(-4.0f, 4.0f));
    for (int i = 0; i < n; ++i) x[size_t(r) * n + size_t(i)] = rng.normal(0.0f, row_scale);
  }
  for (float& v : w) v = rng.normal(1.0f, 0.3f);
  round_to_bf16(w);
  std::vector<int32_t> pos(static_cast<size_t>(rows));
  for (auto& p : pos) p = rng.integer(0, 1 << 20);
  const size_t count = x.size(), rec_bytes = size_t(rows) * kvrec::kRowBytes;
  cuda::DeviceBuffer dx = cuda::to_device(x), dw = cuda::to_device(to_bf16(w)), dpos = cuda::to_device(pos),
                     dfreq = cuda::to_device(rope.inv_freq()), dy(count * 2), dcache(count * 2), drec(rec_bytes),
                     drec_q(rec_bytes);
  for (cuda::DeviceBuffer* b : {&dy, &dcache, &drec, &drec_q}) b->fill_bytes(0xFF);
  const float eps = 1e-6f;
  cuda::rms_norm_f32_rope(dx.as<float>(), dw.as<cuda::bf16>(), dy.as<cuda::bf16>(), rows, n, eps, 1,
                          dpos.as<int32_t>(), dfreq.as<float>(), rope_dim,
                          cuda::KvCacheRows{dcache.get(), kvrec::kBlock, kvrec::kNope}, nullptr);
  cuda::rms_norm_f32_rope(dx.as<float>(), dw.as<cuda::bf16>(), nullptr, rows, n, eps, 1, dpos.as<int32_t>(),
                          dfreq.as<float>(), rope_dim,
                          cuda::KvCacheRows{drec.get(), kvrec::kBlock, kvrec::kNope, cuda::KvFormat::Fp8}, nullptr);
  cuda::kv_fake_quant(dy.as<cuda::bf16>(), rows, n, rope_dim, drec_q.get(), nullptr, cuda::KvFormat::Fp8);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> y = from_bf16(cuda::to_host<uint16_t>(dy, count));
  const std::vector<uint16_t> cache = cuda::to_host<uint16_t>(dcache, count);
  const std::vector<uint8_t> rec = cuda::to_host<uint8_t>(drec, rec_bytes);
  const std::vector<uint8_t> rec_q = cuda::to_host<uint8_t>(drec_q, rec_bytes);
  std::vector<float> decoded(count);
  std::vector<uint8_t> host_rec(rec_bytes);
  for (int r = 0; r < rows; ++r) {
    kvrec::decode_row(rec.data() + size_t(r) * kvrec::kRowBytes, decoded.data() + size_t(r) * n);
    kvrec::encode_row(y.data() + size_t(r) * n, host_rec.data() + size_t(r) * kvrec::kRowBytes);
  }
  size_t bad_values = 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t u;
    std::memcpy(&u, &decoded[i], 4);
    bad_values += u != uint32_t(cache[i]) << 16;
  }
  report_exact("rms_norm_f32_rope record decoded vs its bf16 cache row", bad_values, count);
  size_t bad_q = 0, bad_host = 0;
  for (size_t i = 0; i < rec_bytes; ++i) {
    bad_q += rec_q[i] != rec[i];
    bad_host += host_rec[i] != rec[i];
  }
  report_exact("kv_fake_quant record vs rms_norm_f32_rope record (bytes)", bad_q, rec_bytes);
  report_exact("host encode_row of the bf16 row vs rms_norm_f32_rope record (bytes)", bad_host, rec_bytes);
}

namespace {

// The window commit in a record format (rows copied as whole records) against the bf16 format: after window_commit
// and window_commit_derotate (no query rows) every ring row of the record pool decodes to the bf16 pool's row. One
// step: a 20-row chunk (only its last `window` rows reach the ring), a decode row, a 5-row chunk.
void check_window_commit(cuda::KvFormat record_format) {
  Rng rng;
  const int window = 16, slots = 3;
  const size_t row_bytes = size_t(cuda::kv_row_bytes(record_format, D));
  const std::vector<int32_t> slot{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 2, 2, 2, 2};
  const int rows = int(slot.size()), pool_rows = slots * window + rows;
  const size_t n_rows = slot.size();
  std::vector<int32_t> positions(n_rows), first(n_rows), chunk_rows(n_rows);
  for (int r = 0; r < rows; ++r) {
    const int f = r < 20 ? 0 : r == 20 ? 20 : 21, n = r < 20 ? 20 : r == 20 ? 1 : 5;
    first[size_t(r)] = f;
    chunk_rows[size_t(r)] = n;
    positions[size_t(r)] = (slot[size_t(r)] == 0 ? 100 : slot[size_t(r)] == 1 ? 7 : 0) + (r - f);
  }
  // Zero rings (a zero record decodes to +0), then the step's scratch rows.
  std::vector<float> values(size_t(pool_rows) * D, 0.0f);
  for (size_t i = size_t(slots) * window * D; i < values.size(); ++i) values[i] = rng.normal(0.0f, 3.0f);
  std::vector<uint8_t> records = to_records(rng, values, record_format);
  for (size_t i = 0; i < size_t(slots) * window * row_bytes; ++i) records[i] = 0;
  for (size_t i = 0; i < size_t(slots) * window * D; ++i) values[i] = 0.0f;
  const cuda::DeviceBuffer dslot = cuda::to_device(slot), dpos = cuda::to_device(positions),
                           dfirst = cuda::to_device(first), drows = cuda::to_device(chunk_rows);
  for (const bool fused : {false, true}) {
    cuda::DeviceBuffer bf = cuda::to_device(to_bf16(values)), rec = cuda::to_device(records);
    for (const cuda::KvFormat format : {cuda::KvFormat::Bf16, record_format}) {
      void* pool = format == record_format ? rec.get() : bf.get();
      if (fused)
        cuda::window_commit_derotate(pool, dslot.as<int32_t>(), dpos.as<int32_t>(), dfirst.as<int32_t>(),
                                     drows.as<int32_t>(), rows, window, slots, D, nullptr, nullptr, 0, cuda::kAttnHeads,
                                     cuda::kvrec::kRopeDim, nullptr, nullptr, format);
      else
        cuda::window_commit(pool, dslot.as<int32_t>(), dpos.as<int32_t>(), dfirst.as<int32_t>(), drows.as<int32_t>(),
                            rows, window, slots, D, nullptr, format);
    }
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> ring = cuda::to_host<uint16_t>(bf, size_t(slots) * window * D);
    const std::vector<uint8_t> ring_rec = cuda::to_host<uint8_t>(rec, size_t(slots) * window * row_bytes);
    size_t bad = 0, filled = 0;
    std::vector<float> row(D);
    for (int i = 0; i < slots * window; ++i) {
      decode_record(record_format, ring_rec.data() + size_t(i) * row_bytes, row.data());
      bool nonzero = false;
      for (int d = 0; d < D; ++d) {
        uint32_t u;
        std::memcpy(&u, &row[size_t(d)], 4);
        bad += u != uint32_t(ring[size_t(i) * D + size_t(d)]) << 16;
        nonzero |= ring[size_t(i) * D + size_t(d)] != 0;
      }
      filled += nonzero;
    }
    // 16 rows of the long chunk, the decode row, the 5-row chunk: 22 ring rows written.
    EXPECT_EQ(filled, 22u);
    report_exact(std::string("window_commit") + (fused ? "_derotate " : " ") + cuda::kv_format_name(record_format) +
                     " records vs bf16 rows (ring decoded)",
                 bad, size_t(slots) * window * D);
  }
}

}  // namespace

TEST(GpuKvRecord, WindowCommitMovesRecords) {
  DI_SKIP_WITHOUT_GPU();
  check_window_commit(cuda::KvFormat::Fp8);
}

// The key lists' index kernels (cuda::window_rows, cuda::visible_entry_rows; step_kernels.h) against their definitions,
// exactly: a decode row, a prefill chunk whose rows reach back into the ring, a row near position 0 (positions before 0
// are -1) and one whose visible entries span pages, in one call each.
TEST(GpuKvLists, WindowAndVisibleEntryRowsMatchTheirDefinitions) {
  DI_SKIP_WITHOUT_GPU();
  const int window = 128, slots_capacity = 4;
  // Step rows: slot 2 at 700 (decode), slot 0 at 130..134 (a chunk), slot 3 at 5 (decode), slot 1 at 40..41.
  const std::vector<int32_t> slots = {2, 0, 0, 0, 0, 0, 3, 1, 1};
  const std::vector<int32_t> positions = {700, 130, 131, 132, 133, 134, 5, 40, 41};
  const std::vector<int32_t> first = {0, 1, 1, 1, 1, 1, 6, 7, 7};
  const int rows = int(slots.size());
  cuda::DeviceBuffer dslots = cuda::to_device(slots), dpos = cuda::to_device(positions),
                     dfirst = cuda::to_device(first), dwin(size_t(rows) * window * sizeof(int32_t));
  dwin.fill_bytes(0x7F);
  cuda::window_rows(dslots.as<int32_t>(), dpos.as<int32_t>(), dfirst.as<int32_t>(), rows, window, slots_capacity,
                    dwin.as<int32_t>(), nullptr);
  // Position q of row r: -1 before 0, the scratch row of the step row that holds it when it is in r's chunk, else
  // its slot's ring row.
  std::vector<int32_t> want_win(size_t(rows) * window);
  for (int r = 0; r < rows; ++r)
    for (int w = 0; w < window; ++w) {
      const int q = positions[size_t(r)] - (window - 1) + w;
      const int chunk_start = positions[size_t(r)] - (r - first[size_t(r)]);
      want_win[size_t(r) * window + w] = q < 0                ? -1
                                         : q >= chunk_start ? slots_capacity * window + first[size_t(r)] +
                                                                  (q - chunk_start)
                                                            : slots[size_t(r)] * window + q % window;
    }

  const int ratio = 4, page_size = 16, max_pages = 12, stride = 192;
  std::vector<int32_t> table(size_t(slots_capacity) * max_pages);
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t((i * 7 + 3) % table.size());  // a permutation
  cuda::DeviceBuffer dtable = cuda::to_device(table), dvis(size_t(rows) * stride * sizeof(int32_t));
  dvis.fill_bytes(0x7F);
  cuda::visible_entry_rows(dslots.as<int32_t>(), dpos.as<int32_t>(), rows, ratio, dtable.as<int32_t>(), max_pages,
                           page_size, stride, dvis.as<int32_t>(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  // Entry e of row r: its page's pool row when e < (position + 1) / ratio, else -1.
  std::vector<int32_t> want_vis(size_t(rows) * stride);
  for (int r = 0; r < rows; ++r)
    for (int e = 0; e < stride; ++e)
      want_vis[size_t(r) * stride + e] =
          e < (positions[size_t(r)] + 1) / ratio
              ? table[size_t(slots[size_t(r)]) * max_pages + e / page_size] * page_size + e % page_size
              : -1;

  report_exact("window_rows", bitwise_mismatches(cuda::to_host<int32_t>(dwin, want_win.size()), want_win),
               want_win.size());
  report_exact("visible_entry_rows", bitwise_mismatches(cuda::to_host<int32_t>(dvis, want_vis.size()), want_vis),
               want_vis.size());
}

// Device time per sink_attention_decode call over bf16 pools and over record pools of the same rows (info, no bound):
// pools of 2^18 rows (256 MB bf16, 148 MB records: past the 50 MB L2), every slot of every sequence a random pool
// row, as a decode step at a long context reads them; a graph of 20 calls, the default kernel form (split + merge).
// The GB/s are key-row bytes only (query, partials and index lists excluded).
TEST(GpuKvRecord, AttentionTimingInfo) {
  DI_SKIP_WITHOUT_GPU();
  namespace kvrec = cuda::kvrec;
  Rng rng;
  constexpr int kPoolRows = 1 << 18, kDistinct = 4096;  // 4096 random rows repeated through the pool
  std::vector<float> distinct = rng.normals(size_t(kDistinct) * D);
  const std::vector<uint8_t> rec_distinct = to_records(rng, distinct);
  const std::vector<uint16_t> bf_distinct = to_bf16(distinct);
  std::vector<uint16_t> bf(size_t(kPoolRows) * D);
  std::vector<uint8_t> rec(size_t(kPoolRows) * kvrec::kRowBytes);
  for (size_t r = 0; r < size_t(kPoolRows); ++r) {
    const size_t from = r % kDistinct;
    std::memcpy(bf.data() + r * D, bf_distinct.data() + from * D, D * 2);
    std::memcpy(rec.data() + r * kvrec::kRowBytes, rec_distinct.data() + from * kvrec::kRowBytes, kvrec::kRowBytes);
  }
  const cuda::DeviceBuffer dbf = cuda::to_device(bf), drec = cuda::to_device(rec);
  cudaStream_t stream;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const float scale = 1.0f / std::sqrt(float(D));
  struct Shape {
    int batch, window, compressed;
  };
  for (const Shape sh : {Shape{1, 128, 512}, Shape{8, 128, 512}, Shape{64, 128, 512}, Shape{256, 128, 512}}) {
    std::vector<float> q = rng.normals(size_t(sh.batch) * cuda::kAttnHeads * D, 0.0f, 0.5f);
    std::vector<int32_t> wrows(size_t(sh.batch) * sh.window), crows(size_t(sh.batch) * sh.compressed);
    for (int32_t& r : wrows) r = rng.integer(0, kPoolRows - 1);
    for (int32_t& r : crows) r = rng.integer(0, kPoolRows - 1);
    const cuda::DeviceBuffer dq = cuda::to_device(to_bf16(q)), dsink = cuda::to_device(rng.normals(cuda::kAttnHeads)),
                             dw = cuda::to_device(wrows), dc = cuda::to_device(crows),
                             out(size_t(sh.batch) * cuda::kAttnHeads * D * 2),
                             ws(cuda::sink_attention_workspace_bytes(sh.batch, sh.window, sh.compressed));
    double us[2];
    for (const cuda::KvFormat format : {cuda::KvFormat::Bf16, cuda::KvFormat::Fp8}) {
      const void* pool = format == cuda::KvFormat::Fp8 ? drec.get() : dbf.get();
      const cuda::KvRows window{pool, dw.as<int32_t>(), sh.window, format};
      const cuda::KvRows compressed{pool, dc.as<int32_t>(), sh.compressed, format};
      auto attend = [&] {
        cuda::sink_attention_decode(dq.as<cuda::bf16>(), sh.batch, window, compressed, dsink.as<float>(), scale,
                                    out.as<cuda::bf16>(), ws.get(), stream);
      };
      attend();  // the kernels' one-time attribute setup outside the capture
      DI_CUDA_CHECK(cudaStreamSynchronize(stream));
      us[int(format)] = time_per_call_us(stream, attend);
    }
    const double keys = double(sh.batch) * (sh.window + sh.compressed);
    std::printf("GPU_CHECK kv_record timing attention batch=%d keys=%d+%d: bf16 %.2f us (%.0f GB/s), fp8 records %.2f "
                "us (%.0f GB/s) per call, fp8 / bf16 %.3f (graph of 20; info, no bound)\n",
                sh.batch, sh.window, sh.compressed, us[0], keys * 2 * D / (us[0] * 1e3), us[1],
                keys * kvrec::kRowBytes / (us[1] * 1e3), us[1] / us[0]);
  }
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
}

// ---------------------------------------------------------------------------------------------------------
// V4.1's packed records (kv_record.h kvrec41, bench/gpu/NOTES.md "V4.1 packed KV records"): the window ring as
// 528-byte MXFP8 records, the compressed KV as 288-byte FP4 records; both decode to exactly the bf16 values the bf16
// pools hold, so the attention over them and their writers must give the bf16 format's bits.

TEST(GpuKvRecordV41, AttentionOverRecordsIsBitwiseTheBf16Pool) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  const cuda::KvFormat win = cuda::KvFormat::Mxfp8, ent = cuda::KvFormat::Fp4;
  run_attention_formats(rng, 1, 128, 512, "v41-csa2", win, ent);     // production: window 128, top-k 512
  run_attention_formats(rng, 3, 128, 0, "v41-window-only", win, ent);  // layers 0-1: no compressed segment
  run_attention_formats(rng, 6, 40, 200, "v41-straddle", win, ent);  // a tile holds window and compressed rows
  run_attention_formats(rng, 5, 16, 77, "v41-small-window", win, ent);  // the test model's window, ragged top-k
  run_attention_formats(rng, 37, 128, 512, "v41-csa2", win, ent);    // odd tile counts per split
}

// The V4.1 window writers in the record format against the bf16 format: rms_norm_f32_rope with an MXFP8 cache (the
// decode path) and mxfp8_window_fake_quant (DEEPINFER_FUSED_ATTENTION_STEPS=0). Each record decodes to the bf16
// cache row bit for bit; both kernels write the same record bytes, and those are the host encoder's bytes of the
// same bf16 row.
TEST(GpuKvRecordV41, WindowWritersEncodeTheBf16CacheRows) {
  DI_SKIP_WITHOUT_GPU();
  namespace kvrec41 = cuda::kvrec41;
  Rng rng;
  const int rows = 37, n = kvrec41::kDim, rope_dim = 64;
  const Rope rope(rope_dim, 10000.0f, nullptr);
  std::vector<float> x(static_cast<size_t>(rows * n)), w(static_cast<size_t>(n));
  for (int r = 0; r < rows; ++r) {
    const float row_scale = std::exp(rng.uniform(-4.0f, 4.0f));
    for (int i = 0; i < n; ++i) x[size_t(r) * n + size_t(i)] = rng.normal(0.0f, row_scale);
  }
  for (float& v : w) v = rng.normal(1.0f, 0.3f);
  round_to_bf16(w);
  std::vector<int32_t> pos(static_cast<size_t>(rows));
  for (auto& p : pos) p = rng.integer(0, 1 << 20);
  const size_t count = x.size(), rec_bytes = size_t(rows) * kvrec41::kWindowRowBytes;
  cuda::DeviceBuffer dx = cuda::to_device(x), dw = cuda::to_device(to_bf16(w)), dpos = cuda::to_device(pos),
                     dfreq = cuda::to_device(rope.inv_freq()), dy(count * 2), dcache(count * 2), drec(rec_bytes),
                     drec_q(rec_bytes);
  for (cuda::DeviceBuffer* b : {&dy, &dcache, &drec, &drec_q}) b->fill_bytes(0xFF);
  const float eps = 1e-20f;  // V4.1's rms_norm_eps
  cuda::rms_norm_f32_rope(dx.as<float>(), dw.as<cuda::bf16>(), dy.as<cuda::bf16>(), rows, n, eps, 1,
                          dpos.as<int32_t>(), dfreq.as<float>(), rope_dim,
                          cuda::KvCacheRows{dcache.get(), cuda::kV41WindowKvBlock, n}, nullptr);
  cuda::rms_norm_f32_rope(dx.as<float>(), dw.as<cuda::bf16>(), nullptr, rows, n, eps, 1, dpos.as<int32_t>(),
                          dfreq.as<float>(), rope_dim,
                          cuda::KvCacheRows{drec.get(), cuda::kV41WindowKvBlock, n, cuda::KvFormat::Mxfp8}, nullptr);
  cuda::mxfp8_window_fake_quant(dy.as<cuda::bf16>(), rows, n, drec_q.get(), nullptr, cuda::KvFormat::Mxfp8);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> y = from_bf16(cuda::to_host<uint16_t>(dy, count));
  const std::vector<uint16_t> cache = cuda::to_host<uint16_t>(dcache, count);
  const std::vector<uint8_t> rec = cuda::to_host<uint8_t>(drec, rec_bytes);
  const std::vector<uint8_t> rec_q = cuda::to_host<uint8_t>(drec_q, rec_bytes);
  std::vector<float> decoded(count);
  std::vector<uint8_t> host_rec(rec_bytes);
  for (int r = 0; r < rows; ++r) {
    kvrec41::decode_window_row(rec.data() + size_t(r) * kvrec41::kWindowRowBytes, decoded.data() + size_t(r) * n);
    kvrec41::encode_window_row(y.data() + size_t(r) * n, host_rec.data() + size_t(r) * kvrec41::kWindowRowBytes);
  }
  size_t bad_values = 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t u;
    std::memcpy(&u, &decoded[i], 4);
    bad_values += u != uint32_t(cache[i]) << 16;
  }
  report_exact("rms_norm_f32_rope mxfp8 record decoded vs its bf16 cache row", bad_values, count);
  size_t bad_q = 0, bad_host = 0;
  for (size_t i = 0; i < rec_bytes; ++i) {
    bad_q += rec_q[i] != rec[i];
    bad_host += host_rec[i] != rec[i];
  }
  report_exact("mxfp8_window_fake_quant record vs rms_norm_f32_rope mxfp8 record (bytes)", bad_q, rec_bytes);
  report_exact("host encode_window_row of the bf16 row vs rms_norm_f32_rope mxfp8 record (bytes)", bad_host,
               rec_bytes);
}

TEST(GpuKvRecordV41, WindowCommitMovesRecords) {
  DI_SKIP_WITHOUT_GPU();
  check_window_commit(cuda::KvFormat::Mxfp8);
}

// AttentionTimingInfo's measurement for V4.1's pools (info, no bound): window rows as MXFP8 records, compressed rows
// as FP4 records, against both pools in bf16; the GB/s count each format's own row bytes.
TEST(GpuKvRecordV41, AttentionTimingInfo) {
  DI_SKIP_WITHOUT_GPU();
  namespace kvrec41 = cuda::kvrec41;
  Rng rng;
  constexpr int kPoolRows = 1 << 18, kDistinct = 4096;
  std::vector<float> win_distinct = rng.normals(size_t(kDistinct) * D), ent_distinct = win_distinct;
  const std::vector<uint8_t> win_rec_distinct = to_records(rng, win_distinct, cuda::KvFormat::Mxfp8);
  const std::vector<uint8_t> ent_rec_distinct = to_records(rng, ent_distinct, cuda::KvFormat::Fp4);
  const std::vector<uint16_t> win_bf_distinct = to_bf16(win_distinct), ent_bf_distinct = to_bf16(ent_distinct);
  std::vector<uint16_t> win_bf(size_t(kPoolRows) * D), ent_bf(size_t(kPoolRows) * D);
  std::vector<uint8_t> win_rec(size_t(kPoolRows) * kvrec41::kWindowRowBytes),
      ent_rec(size_t(kPoolRows) * kvrec41::kEntryRowBytes);
  for (size_t r = 0; r < size_t(kPoolRows); ++r) {
    const size_t from = r % kDistinct;
    std::memcpy(win_bf.data() + r * D, win_bf_distinct.data() + from * D, D * 2);
    std::memcpy(ent_bf.data() + r * D, ent_bf_distinct.data() + from * D, D * 2);
    std::memcpy(win_rec.data() + r * kvrec41::kWindowRowBytes,
                win_rec_distinct.data() + from * kvrec41::kWindowRowBytes, kvrec41::kWindowRowBytes);
    std::memcpy(ent_rec.data() + r * kvrec41::kEntryRowBytes, ent_rec_distinct.data() + from * kvrec41::kEntryRowBytes,
                kvrec41::kEntryRowBytes);
  }
  const cuda::DeviceBuffer dwin_bf = cuda::to_device(win_bf), dent_bf = cuda::to_device(ent_bf),
                           dwin_rec = cuda::to_device(win_rec), dent_rec = cuda::to_device(ent_rec);
  cudaStream_t stream;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const float scale = 1.0f / std::sqrt(float(D));
  for (const int batch : {1, 8, 64, 256}) {
    const int window = 128, compressed = 512;
    std::vector<float> q = rng.normals(size_t(batch) * cuda::kAttnHeads * D, 0.0f, 0.5f);
    std::vector<int32_t> wrows(size_t(batch) * window), crows(size_t(batch) * compressed);
    for (int32_t& r : wrows) r = rng.integer(0, kPoolRows - 1);
    for (int32_t& r : crows) r = rng.integer(0, kPoolRows - 1);
    const cuda::DeviceBuffer dq = cuda::to_device(to_bf16(q)), dsink = cuda::to_device(rng.normals(cuda::kAttnHeads)),
                             dw = cuda::to_device(wrows), dc = cuda::to_device(crows),
                             out(size_t(batch) * cuda::kAttnHeads * D * 2),
                             ws(cuda::sink_attention_workspace_bytes(batch, window, compressed));
    double us[2];
    for (const bool packed : {false, true}) {
      const cuda::KvRows w{packed ? dwin_rec.get() : dwin_bf.get(), dw.as<int32_t>(), window,
                           packed ? cuda::KvFormat::Mxfp8 : cuda::KvFormat::Bf16};
      const cuda::KvRows c{packed ? dent_rec.get() : dent_bf.get(), dc.as<int32_t>(), compressed,
                           packed ? cuda::KvFormat::Fp4 : cuda::KvFormat::Bf16};
      auto attend = [&] {
        cuda::sink_attention_decode(dq.as<cuda::bf16>(), batch, w, c, dsink.as<float>(), scale, out.as<cuda::bf16>(),
                                    ws.get(), stream);
      };
      attend();  // the kernels' one-time attribute setup outside the capture
      DI_CUDA_CHECK(cudaStreamSynchronize(stream));
      us[int(packed)] = time_per_call_us(stream, attend);
    }
    const double keys = double(batch) * (window + compressed);
    const double packed_bytes = double(batch) * (double(window) * kvrec41::kWindowRowBytes +
                                                 double(compressed) * kvrec41::kEntryRowBytes);
    std::printf("GPU_CHECK kv_record_v41 timing attention batch=%d keys=%d+%d: bf16 %.2f us (%.0f GB/s), mxfp8/fp4 "
                "records %.2f us (%.0f GB/s) per call, records / bf16 %.3f (graph of 20; info, no bound)\n",
                batch, window, compressed, us[0], keys * 2 * D / (us[0] * 1e3), us[1], packed_bytes / (us[1] * 1e3),
                us[1] / us[0]);
  }
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
}

// Sink attention decode against layers/attention/sink_attention.cpp (attend_with_sink) over the same selected
// latent rows: the window ring rows plus the selected compressed rows, with empty (-1) slots. GpuKvRecord.*: the
// packed FP8 record pools (layers/attention/kv_record.h) against the bf16 pools, bitwise, and the window writers.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda/kernels.h"
#include "cuda/numerics_mode.h"
#include "cuda/step_kernels.h"
#include "attention_inputs.h"
#include "gpu_test_util.h"
#include "layers/attention/decode_fused.h"
#include "layers/attention/kv_record.h"
#include "layers/attention/sink_attention.h"
#include "layers/norm_rope/rope.h"

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

// Every row of a [rows, D] pool through the record: `records` gets the encoded rows (kvrec::kRowBytes each) and
// `pool` the values they decode to (what a bf16 pool of the same cache holds). Each row is first scaled by 2^k,
// k in [-6, 6], so the 64-channel blocks span many scales.
std::vector<uint8_t> to_records(Rng& rng, std::vector<float>& pool) {
  namespace kvrec = cuda::kvrec;
  const size_t rows = pool.size() / D;
  std::vector<uint8_t> records(rows * kvrec::kRowBytes);
  for (size_t r = 0; r < rows; ++r) {
    const float k = std::ldexp(1.0f, rng.integer(-6, 6));
    for (int d = 0; d < D; ++d) pool[r * D + size_t(d)] *= k;
    kvrec::encode_row(pool.data() + r * D, records.data() + r * kvrec::kRowBytes);
    kvrec::decode_row(records.data() + r * kvrec::kRowBytes, pool.data() + r * D);
  }
  return records;
}

// sink_attention_decode over the bf16 pools and over the same rows as records: outputs bit for bit, in each of the
// kernel's forms (split + merge; the fused cluster at <= 8 rows; batch-invariant splits).
void run_attention_formats(Rng& rng, int batch, int window_stride, int compressed_stride, const char* label) {
  const int pool_rows = 2000;
  AttentionInputs in = random_attention_inputs(rng, batch, pool_rows, 0.5f);
  const std::vector<uint8_t> window_rec = to_records(rng, in.window_pool), comp_rec = to_records(rng, in.comp_pool);
  const AttentionRows rows =
      ragged_attention_rows(rng, batch, window_stride, compressed_stride, pool_rows, true, [&](int b) {
        if (b == 0) return std::pair{window_stride, compressed_stride};
        return std::pair{rng.integer(0, window_stride), rng.integer(0, compressed_stride)};
      });
  DeviceAttentionBatch dev(in, rows);
  cuda::DeviceBuffer dwrec = cuda::to_device(window_rec), dcrec = cuda::to_device(comp_rec), out8(in.q.size() * 2);
  const cuda::KvRows window8{dwrec.get(), dev.window.rows, rows.window_stride, cuda::KvFormat::Fp8};
  const cuda::KvRows comp8{dcrec.get(), dev.compressed.rows, rows.compressed_stride, cuda::KvFormat::Fp8};
  const float scale = 1.0f / std::sqrt(float(D));
  struct Mode {
    bool fused, invariant;
    const char* name;
  };
  const bool fused_before = cuda::decode_fused_attention(), invariant_before = cuda::batch_invariant();
  for (const Mode mode : {Mode{false, false, "split"}, Mode{true, false, "fused"}, Mode{false, true, "invariant"}}) {
    cuda::set_decode_fused_attention(mode.fused);
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
    report_exact(std::string("sink_attention fp8 records vs bf16 pool ") + label + " " + mode.name +
                     " batch=" + std::to_string(batch) + " slots=" + std::to_string(window_stride) + "+" +
                     std::to_string(compressed_stride),
                 bad, a.size());
  }
  cuda::set_decode_fused_attention(fused_before);
  cuda::set_batch_invariant(invariant_before);
}

}  // namespace

TEST(GpuKvRecord, AttentionOverRecordsIsBitwiseTheBf16Pool) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_attention_formats(rng, 1, 128, 512, "csa");  // one sequence: many splits, fused clusters
  run_attention_formats(rng, 3, 128, 0, "window-only");
  run_attention_formats(rng, 6, 128, 200, "hca");  // ragged counts, holes
  run_attention_formats(rng, 37, 128, 512, "csa");  // past the fused batch limit; odd tile counts per split
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

// The window commit in the record format (rows copied as 592-byte records) against the bf16 format: after
// window_commit and window_commit_derotate (no query rows) every ring row of the record pool decodes to the bf16
// pool's row. One step: a 20-row chunk (only its last `window` rows reach the ring), a decode row, a 5-row chunk.
TEST(GpuKvRecord, WindowCommitMovesRecords) {
  DI_SKIP_WITHOUT_GPU();
  namespace kvrec = cuda::kvrec;
  Rng rng;
  const int window = 16, slots = 3;
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
  std::vector<uint8_t> records = to_records(rng, values);
  for (size_t i = 0; i < size_t(slots) * window * kvrec::kRowBytes; ++i) records[i] = 0;
  for (size_t i = 0; i < size_t(slots) * window * D; ++i) values[i] = 0.0f;
  const cuda::DeviceBuffer dslot = cuda::to_device(slot), dpos = cuda::to_device(positions),
                           dfirst = cuda::to_device(first), drows = cuda::to_device(chunk_rows);
  for (const bool fused : {false, true}) {
    cuda::DeviceBuffer bf = cuda::to_device(to_bf16(values)), rec = cuda::to_device(records);
    for (const cuda::KvFormat format : {cuda::KvFormat::Bf16, cuda::KvFormat::Fp8}) {
      void* pool = format == cuda::KvFormat::Fp8 ? rec.get() : bf.get();
      if (fused)
        cuda::window_commit_derotate(pool, dslot.as<int32_t>(), dpos.as<int32_t>(), dfirst.as<int32_t>(),
                                     drows.as<int32_t>(), rows, window, slots, D, nullptr, nullptr, 0, cuda::kAttnHeads,
                                     kvrec::kRopeDim, nullptr, nullptr, format);
      else
        cuda::window_commit(pool, dslot.as<int32_t>(), dpos.as<int32_t>(), dfirst.as<int32_t>(), drows.as<int32_t>(),
                            rows, window, slots, D, nullptr, format);
    }
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> ring = cuda::to_host<uint16_t>(bf, size_t(slots) * window * D);
    const std::vector<uint8_t> ring_rec = cuda::to_host<uint8_t>(rec, size_t(slots) * window * kvrec::kRowBytes);
    size_t bad = 0, filled = 0;
    std::vector<float> row(D);
    for (int i = 0; i < slots * window; ++i) {
      kvrec::decode_row(ring_rec.data() + size_t(i) * kvrec::kRowBytes, row.data());
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
    report_exact(std::string("window_commit") + (fused ? "_derotate" : "") + " records vs bf16 rows (ring decoded)",
                 bad, size_t(slots) * window * D);
  }
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

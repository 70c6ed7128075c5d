// RMSNorm and partial interleaved RoPE / YaRN kernels against layers/norm_rope/{rms_norm,rope}.cpp; the fused
// norm -> FP8 quantization against the two kernels it replaces, bitwise (the same fp32 math in the same order).
// Issue 4's decode-latency forms, bitwise too: rope against rope_reference (its old kernel), kv_fake_quant against
// the CPU cache format, rms_norm_f32_rope against rms_norm_f32 -> rope (-> kv_fake_quant), window_commit_derotate
// against window_commit -> rope(inverse).
#include <algorithm>
#include <cstring>

#include "cuda/kernels.h"
#include "cuda/step_kernels.h"
#include "gpu_test_util.h"
#include "layers/norm_rope/rms_norm.h"
#include "core/dtype.h"
#include "layers/norm_rope/rope.h"
#include "layers/norm_rope/rope_gpu_ref.h"
#include "layers/quant/fake_quant.h"
#include "model/v41/gpu/v41_step_kernels.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

void run_rms_norm(Rng& rng, int64_t rows, int n, bool weighted, float eps) {
  std::vector<float> x(size_t(rows * n)), w(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::exp(rng.uniform(-4.0f, 4.0f));  // rows of very different magnitude
    for (int i = 0; i < n; ++i) x[size_t(r * n + i)] = rng.normal(0.0f, row_scale);
  }
  for (float& v : w) v = rng.normal(1.0f, 0.3f);
  round_to_bf16(x);
  round_to_bf16(w);

  std::vector<float> ref(x.size());
  for (int64_t r = 0; r < rows; ++r)
    rms_norm(x.data() + r * n, weighted ? w.data() : nullptr, n, eps, ref.data() + r * n);

  cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dw = cuda::to_device(to_bf16(w)), dy(x.size() * 2);
  dy.fill_bytes(0xFF);
  cuda::rms_norm(dx.as<cuda::bf16>(), weighted ? dw.as<cuda::bf16>() : nullptr, dy.as<cuda::bf16>(), rows, n, eps,
                 nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out = from_bf16(cuda::to_host<uint16_t>(dy, x.size()));
  // One bf16 rounding of an fp32 result (kBf16OutputBound).
  check_rel_l2("rms_norm rows=" + std::to_string(rows) + " n=" + std::to_string(n) + (weighted ? "" : " unweighted"),
               out, ref, kBf16OutputBound);
}

void run_rope(Rng& rng, const Rope& rope, const char* label, int64_t tokens, int heads, int head_dim, bool inverse) {
  const int rope_dim = rope.rope_dim();
  std::vector<float> x(size_t(tokens * heads * head_dim));
  for (float& v : x) v = rng.normal(0.0f, 2.0f);
  round_to_bf16(x);
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  for (auto& p : pos) p = rng.integer(0, 1 << 20);  // up to max_position_embeddings (1M)
  pos[0] = 0;

  std::vector<float> ref = x;
  for (int64_t t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h)
      rope.apply(ref.data() + (t * heads + h) * head_dim + (head_dim - rope_dim), pos[size_t(t)], inverse);

  cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dpos = cuda::to_device(pos),
                     dfreq = cuda::to_device(rope.inv_freq());
  cuda::rope(dx.as<cuda::bf16>(), int64_t(heads) * head_dim, dpos.as<int32_t>(), dfreq.as<float>(), tokens, heads,
             head_dim, rope_dim, inverse, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> out = from_bf16(cuda::to_host<uint16_t>(dx, x.size()));

  size_t touched = 0;  // channels outside the rope slice must come back bit-identical
  for (int64_t t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h)
      for (int d = 0; d < head_dim - rope_dim; ++d) {
        size_t i = size_t((t * heads + h) * head_dim + d);
        touched += out[i] != x[i];
      }
  std::string name = std::string("rope ") + label + (inverse ? " inverse" : "");
  report_exact(name + " nope-channels-untouched", touched, size_t(tokens * heads * (head_dim - rope_dim)));
  // The rotated pairs are rounded once to bf16; sin/cos of the same fp32 angle differ by a few fp32 ulps.
  check_rel_l2(name, out, ref, kBf16OutputBound);
}

// rms_norm_f32 (fp32 rows, a GEMM's output) against the CPU norm of the rows' bf16 values (the reference's GEMM
// output), then rms_norm_f32_quantize against rms_norm_f32 -> fp8_quantize on the device: the bf16 values, codes and
// scales must be identical. Both kernels read the rows as bf16 (dev::gemm_out4): given the rows rounded to bf16 they
// must write the same bits (a kernel that normalised the fp32 values would differ wherever a row's rounding moves r
// or a value across a bf16 rounding boundary). Unweighted (V4's per-head query norm) rms_norm_f32 computes the
// reference's bf16 ops: the same bf16 values as the CPU's head_rms_norm_bf16 (an fp32 factor r, up to 2^-9 away, moves many of them).
void run_rms_norm_f32_quantize(Rng& rng, int64_t rows, int n, bool weighted, float eps, int block) {
  std::vector<float> x(size_t(rows * n)), w(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::exp(rng.uniform(-4.0f, 4.0f));
    for (int i = 0; i < n; ++i) x[size_t(r * n + i)] = rng.normal(0.0f, row_scale);
  }
  for (float& v : w) v = rng.normal(1.0f, 0.3f);
  round_to_bf16(w);
  std::vector<float> x_bf16 = x, ref(x.size());
  round_to_bf16(x_bf16);
  if (weighted) {
    for (int64_t r = 0; r < rows; ++r) rms_norm(x_bf16.data() + r * n, w.data(), n, eps, ref.data() + r * n);
  } else {
    ref = x_bf16;
    head_rms_norm_bf16(ref.data(), rows, n, eps);
  }

  const size_t count = x.size(), scales = count / size_t(block);
  cuda::DeviceBuffer dx = cuda::to_device(x), dw = cuda::to_device(to_bf16(w)), dy_a(count * 2), dy_b(count * 2),
                     dq_a(count), dq_b(count), ds_a(scales * 4), ds_b(scales * 4);
  for (cuda::DeviceBuffer* b : {&dy_a, &dy_b, &dq_a, &dq_b, &ds_a, &ds_b}) b->fill_bytes(0xFF);
  const cuda::bf16* wp = weighted ? dw.as<cuda::bf16>() : nullptr;
  cuda::rms_norm_f32(dx.as<float>(), wp, dy_a.as<cuda::bf16>(), rows, n, eps, nullptr);
  cuda::fp8_quantize(dy_a.as<cuda::bf16>(), dq_a.as<uint8_t>(), ds_a.as<float>(), rows, n, block, nullptr);
  cuda::rms_norm_f32_quantize(dx.as<float>(), wp, dy_b.as<cuda::bf16>(), dq_b.as<uint8_t>(), ds_b.as<float>(), rows,
                              n, eps, block, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());

  const std::string shape = " rows=" + std::to_string(rows) + " n=" + std::to_string(n) +
                            (weighted ? "" : " unweighted") + " block=" + std::to_string(block);
  const auto y_a = cuda::to_host<uint16_t>(dy_a, count), y_b = cuda::to_host<uint16_t>(dy_b, count);
  check_rel_l2("rms_norm_f32" + shape, from_bf16(y_a), ref, kBf16OutputBound);
  if (!weighted) report_exact("rms_norm_f32 vs the CPU's bf16 ops" + shape, bitwise_mismatches(y_a, to_bf16(ref)), count);
  auto mismatches = [](const auto& a, const auto& b) {
    size_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i) bad += std::memcmp(&a[i], &b[i], sizeof(a[i])) != 0;
    return bad;
  };
  report_exact("rms_norm_f32_quantize y vs rms_norm_f32" + shape, mismatches(y_b, y_a), count);
  report_exact("rms_norm_f32_quantize codes vs fp8_quantize" + shape,
               mismatches(cuda::to_host<uint8_t>(dq_b, count), cuda::to_host<uint8_t>(dq_a, count)), count);
  report_exact("rms_norm_f32_quantize scales vs fp8_quantize" + shape,
               mismatches(cuda::to_host<float>(ds_b, scales), cuda::to_host<float>(ds_a, scales)), scales);
  // Without y: the same codes.
  dq_b.fill_bytes(0xFF);
  cuda::rms_norm_f32_quantize(dx.as<float>(), wp, nullptr, dq_b.as<uint8_t>(), ds_b.as<float>(), rows, n, eps, block,
                              nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  report_exact("rms_norm_f32_quantize (codes only) vs fp8_quantize" + shape,
               mismatches(cuda::to_host<uint8_t>(dq_b, count), cuda::to_host<uint8_t>(dq_a, count)), count);
  // The rows rounded to bf16 first: the same values, codes and scales.
  cuda::DeviceBuffer dxr = cuda::to_device(x_bf16), dy_r(count * 2), dq_r(count), ds_r(scales * 4);
  cuda::rms_norm_f32(dxr.as<float>(), wp, dy_r.as<cuda::bf16>(), rows, n, eps, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  report_exact("rms_norm_f32 of the fp32 rows vs of their bf16 values" + shape,
               mismatches(cuda::to_host<uint16_t>(dy_r, count), y_a), count);
  cuda::rms_norm_f32_quantize(dxr.as<float>(), wp, dy_r.as<cuda::bf16>(), dq_r.as<uint8_t>(), ds_r.as<float>(), rows,
                              n, eps, block, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  report_exact("rms_norm_f32_quantize of the fp32 rows vs of their bf16 values" + shape,
               mismatches(cuda::to_host<uint16_t>(dy_r, count), y_b), count);
  report_exact("rms_norm_f32_quantize codes, fp32 rows vs bf16 values" + shape,
               mismatches(cuda::to_host<uint8_t>(dq_r, count), cuda::to_host<uint8_t>(dq_a, count)), count);
}

template <class T>
size_t count_mismatches(const std::vector<T>& a, const std::vector<T>& b) {
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return bad;
}

// cuda::rope (every head's pair loaded before the first store, issue 4) against rope_reference (the kernel before):
// the same bf16 bits on random rows, in place, both directions.
void run_rope_vs_reference(Rng& rng, const Rope& rope, int64_t tokens, int heads, int head_dim, bool inverse) {
  const int rope_dim = rope.rope_dim();
  std::vector<float> x(size_t(tokens * heads * head_dim));
  for (float& v : x) v = rng.normal(0.0f, 2.0f);
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  for (auto& p : pos) p = rng.integer(0, 1 << 20);
  const auto bits = to_bf16(x);
  cuda::DeviceBuffer da = cuda::to_device(bits), db = cuda::to_device(bits), dpos = cuda::to_device(pos),
                     dfreq = cuda::to_device(rope.inv_freq());
  cuda::rope(da.as<cuda::bf16>(), int64_t(heads) * head_dim, dpos.as<int32_t>(), dfreq.as<float>(), tokens, heads,
             head_dim, rope_dim, inverse, nullptr);
  cuda::rope_reference(db.as<cuda::bf16>(), int64_t(heads) * head_dim, dpos.as<int32_t>(), dfreq.as<float>(), tokens,
                       heads, head_dim, rope_dim, inverse, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  report_exact("rope vs rope_reference tokens=" + std::to_string(tokens) + " heads=" + std::to_string(heads) +
                   " head_dim=" + std::to_string(head_dim) + " rope_dim=" + std::to_string(rope_dim) +
                   (inverse ? " inverse" : ""),
               count_mismatches(cuda::to_host<uint16_t>(da, bits.size()), cuda::to_host<uint16_t>(db, bits.size())),
               bits.size());
}

// kv_fake_quant (its loads batched, issue 4) against the CPU's cache format (v4_quantize_kv_row's rule: FP8 e4m3
// per 64 nope channels with a power-of-two scale, a last partial block on its own, rope channels as they are): both
// compute e4m3(x / 2^k) * 2^k exactly, so the bf16 values must be identical.
void run_kv_fake_quant(Rng& rng, int rows, int dim, int rope_dim) {
  std::vector<float> x(size_t(rows) * dim);
  for (int r = 0; r < rows; ++r) {
    const float row_scale = std::exp(rng.uniform(-6.0f, 4.0f));  // some blocks under the 1e-4 amax floor
    for (int i = 0; i < dim; ++i) x[size_t(r) * dim + i] = rng.normal(0.0f, row_scale);
  }
  round_to_bf16(x);
  std::vector<float> ref = x;
  for (int r = 0; r < rows; ++r) fp8_fake_quant_ragged(ref.data() + size_t(r) * dim, dim - rope_dim, 64);
  for (float& v : ref) v = round_bf16(v);
  cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dy(x.size() * 2);
  dy.fill_bytes(0xFF);
  cuda::kv_fake_quant(dx.as<cuda::bf16>(), rows, dim, rope_dim, dy.as<cuda::bf16>(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  report_exact("kv_fake_quant vs CPU rows=" + std::to_string(rows) + " dim=" + std::to_string(dim) +
                   " rope_dim=" + std::to_string(rope_dim),
               count_mismatches(cuda::to_host<uint16_t>(dy, x.size()), to_bf16(ref)), x.size());
}

// The window KV cache format rms_norm_f32_rope also writes: none, V4's (kv_fake_quant), V4.1's (MXFP8).
enum class CacheFormat { None, V4, V41 };

// rms_norm_f32_rope against the chain it replaces at decode, on the device: rms_norm_f32 -> rope (-> kv_fake_quant
// or mxfp8_window_fake_quant of the rotated row): y and the cache row bit for bit. `heads` rows per token.
void run_rms_norm_f32_rope(Rng& rng, const Rope& rope, int64_t tokens, int heads, int n, bool weighted,
                           CacheFormat format, float eps) {
  const bool cache = format != CacheFormat::None;
  const int rope_dim = rope.rope_dim();
  const int64_t rows = tokens * heads;
  std::vector<float> x(size_t(rows * n)), w(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::exp(rng.uniform(-4.0f, 4.0f));
    for (int i = 0; i < n; ++i) x[size_t(r * n + i)] = rng.normal(0.0f, row_scale);
  }
  for (float& v : w) v = rng.normal(1.0f, 0.3f);
  round_to_bf16(w);
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  for (auto& p : pos) p = rng.integer(0, 1 << 20);
  const size_t count = x.size();
  cuda::DeviceBuffer dx = cuda::to_device(x), dw = cuda::to_device(to_bf16(w)), dpos = cuda::to_device(pos),
                     dfreq = cuda::to_device(rope.inv_freq()), dy_a(count * 2), dy_b(count * 2), dc_a(count * 2),
                     dc_b(count * 2);
  for (cuda::DeviceBuffer* b : {&dy_a, &dy_b, &dc_a, &dc_b}) b->fill_bytes(0xFF);
  const cuda::bf16* wp = weighted ? dw.as<cuda::bf16>() : nullptr;
  cuda::rms_norm_f32(dx.as<float>(), wp, dy_a.as<cuda::bf16>(), rows, n, eps, nullptr);
  cuda::rope(dy_a.as<cuda::bf16>(), int64_t(heads) * n, dpos.as<int32_t>(), dfreq.as<float>(), tokens, heads, n,
             rope_dim, false, nullptr);
  cuda::KvCacheRows rows_b;
  if (format == CacheFormat::V4) {
    cuda::kv_fake_quant(dy_a.as<cuda::bf16>(), int(rows), n, rope_dim, dc_a.as<cuda::bf16>(), nullptr);
    rows_b = cuda::KvCacheRows{dc_b.as<cuda::bf16>(), 64, n - rope_dim};
  } else if (format == CacheFormat::V41) {
    cuda::mxfp8_window_fake_quant(dy_a.as<cuda::bf16>(), int(rows), n, dc_a.as<cuda::bf16>(), nullptr);
    rows_b = cuda::KvCacheRows{dc_b.as<cuda::bf16>(), cuda::kV41WindowKvBlock, n};
  }
  cuda::rms_norm_f32_rope(dx.as<float>(), wp, dy_b.as<cuda::bf16>(), rows, n, eps, heads, dpos.as<int32_t>(),
                          dfreq.as<float>(), rope_dim, rows_b, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const std::string shape = " tokens=" + std::to_string(tokens) + " heads=" + std::to_string(heads) +
                            " n=" + std::to_string(n) + " rope_dim=" + std::to_string(rope_dim) +
                            (weighted ? "" : " unweighted") +
                            (format == CacheFormat::V4 ? " v4-cache" : format == CacheFormat::V41 ? " v41-cache" : "");
  report_exact("rms_norm_f32_rope y vs rms_norm_f32 -> rope" + shape,
               count_mismatches(cuda::to_host<uint16_t>(dy_b, count), cuda::to_host<uint16_t>(dy_a, count)), count);
  if (!cache) return;
  report_exact("rms_norm_f32_rope cache vs the cache kernel" + shape,
               count_mismatches(cuda::to_host<uint16_t>(dc_b, count), cuda::to_host<uint16_t>(dc_a, count)), count);
  // The cache alone (y null): the same row.
  dc_b.fill_bytes(0xFF);
  cuda::rms_norm_f32_rope(dx.as<float>(), wp, nullptr, rows, n, eps, heads, dpos.as<int32_t>(), dfreq.as<float>(),
                          rope_dim, rows_b, nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  report_exact("rms_norm_f32_rope (cache only) vs the cache kernel" + shape,
               count_mismatches(cuda::to_host<uint16_t>(dc_b, count), cuda::to_host<uint16_t>(dc_a, count)), count);
}

// window_commit_derotate against window_commit -> rope(inverse) (the attention core's two successors): the window
// pool and the de-rotated output bit for bit. `rows` step rows in chunks of chunk_len rows (slot = chunk index),
// the last o_rows of them query rows (context parallelism: o_rows < rows).
void run_window_commit_derotate(Rng& rng, const Rope& rope, int rows, int chunk_len, int o_rows, int heads, int dim,
                                int window) {
  const int rope_dim = rope.rope_dim(), slots_capacity = (rows + chunk_len - 1) / chunk_len;
  const auto n_rows = static_cast<size_t>(rows);
  std::vector<int32_t> slots(n_rows), positions(n_rows), first(n_rows), chunk_rows(n_rows);
  for (int r = 0; r < rows; ++r) {
    const int c = r / chunk_len, start = c * chunk_len;
    slots[size_t(r)] = c;
    first[size_t(r)] = start;
    chunk_rows[size_t(r)] = std::min(chunk_len, rows - start);
    positions[size_t(r)] = 1000 * c + (r - start) + 3;  // consecutive inside a chunk
  }
  // o keeps one row's worth when there are no query rows (an empty buffer is not allocated): left untouched.
  const size_t pool_n = size_t(slots_capacity * window + rows) * dim,
               o_n = size_t(std::max(o_rows, 1)) * heads * dim;
  std::vector<float> pool(pool_n), o(o_n);
  for (float& v : pool) v = rng.normal(0.0f, 1.0f);
  for (float& v : o) v = rng.normal(0.0f, 2.0f);
  const auto pool_bits = to_bf16(pool), o_bits = to_bf16(o);
  cuda::DeviceBuffer dpool_a = cuda::to_device(pool_bits), dpool_b = cuda::to_device(pool_bits),
                     do_a = cuda::to_device(o_bits), do_b = cuda::to_device(o_bits), dslots = cuda::to_device(slots),
                     dpos = cuda::to_device(positions), dfirst = cuda::to_device(first),
                     drows = cuda::to_device(chunk_rows), dfreq = cuda::to_device(rope.inv_freq());
  const int q0 = rows - o_rows;
  const int32_t* o_pos = dpos.as<int32_t>() + q0;
  cuda::window_commit(dpool_a.as<cuda::bf16>(), dslots.as<int32_t>(), dpos.as<int32_t>(), dfirst.as<int32_t>(),
                      drows.as<int32_t>(), rows, window, slots_capacity, dim, nullptr);
  cuda::rope(do_a.as<cuda::bf16>(), int64_t(heads) * dim, o_pos, dfreq.as<float>(), o_rows, heads, dim, rope_dim, true,
             nullptr);
  cuda::window_commit_derotate(dpool_b.as<cuda::bf16>(), dslots.as<int32_t>(), dpos.as<int32_t>(),
                               dfirst.as<int32_t>(), drows.as<int32_t>(), rows, window, slots_capacity, dim,
                               do_b.as<cuda::bf16>(), o_pos, o_rows, heads, rope_dim, dfreq.as<float>(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const std::string shape = " rows=" + std::to_string(rows) + " chunk=" + std::to_string(chunk_len) +
                            " o_rows=" + std::to_string(o_rows) + " heads=" + std::to_string(heads) +
                            " dim=" + std::to_string(dim) + " window=" + std::to_string(window);
  report_exact("window_commit_derotate pool vs window_commit" + shape,
               count_mismatches(cuda::to_host<uint16_t>(dpool_b, pool_n), cuda::to_host<uint16_t>(dpool_a, pool_n)),
               pool_n);
  report_exact("window_commit_derotate o vs rope inverse" + shape,
               count_mismatches(cuda::to_host<uint16_t>(do_b, o_n), cuda::to_host<uint16_t>(do_a, o_n)), o_n);
}

}  // namespace

TEST(GpuRmsNorm, F32QuantizeMatchesTwoKernels) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_rms_norm_f32_quantize(rng, 1, 1024, true, 1e-6f, 128);   // V4-Flash q_norm at decode
  run_rms_norm_f32_quantize(rng, 9, 1536, true, 1e-6f, 128);   // q_lora 1536: a partial last pass of vectors
  run_rms_norm_f32_quantize(rng, 4, 1024, true, 1e-20f, 32);   // V4.1 blocks and eps
  run_rms_norm_f32_quantize(rng, 3, 512, false, 1e-6f, 256);   // unweighted, widest block
  run_rms_norm_f32_quantize(rng, 192, 512, false, 1e-6f, 128); // V4's 64 query heads x 3 tokens: the loop form
  run_rms_norm_f32_quantize(rng, 1, 1280, true, 1e-20f, 32);   // V4.1 q_norm at decode (two held vectors)
  run_rms_norm_f32_quantize(rng, 2, 2560, true, 1e-6f, 64);    // past the held registers: the loop's rest
  run_rms_norm_f32_quantize(rng, 130, 1024, true, 1e-6f, 128); // more than kFewRows: the loop form
  run_rms_norm_f32_quantize(rng, 2, 1024, true, 1e-40f, 128);  // eps < FLT_MIN: r's divide form (rms_factor.h)
}

TEST(GpuRmsNorm, MatchesReference) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_rms_norm(rng, 7, 4096, true, 1e-6f);    // V4 hidden
  run_rms_norm(rng, 33, 5120, true, 1e-20f);  // V4.1 hidden, its eps
  run_rms_norm(rng, 64 * 3, 512, false, 1e-6f);  // V4 per-head q norm (unweighted)
  run_rms_norm(rng, 2, 16384, true, 1e-6f);   // wider than the register slice
}

TEST(GpuRope, PartialInterleavedWithYarn) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  YarnScaling yarn;
  yarn.factor = 16.0f;
  yarn.original_max_position_embeddings = 65536;
  yarn.beta_fast = 32.0f;
  yarn.beta_slow = 1.0f;
  Rope compressed(64, 160000.0f, &yarn);  // compressed layers: compress_rope_theta + YaRN (model-spec §2)
  Rope window(64, 10000.0f, nullptr);     // window-only layers
  run_rope(rng, compressed, "yarn q", 5, 64, 512, false);
  run_rope(rng, compressed, "yarn q", 5, 64, 512, true);
  run_rope(rng, window, "plain kv", 9, 1, 512, false);
  run_rope(rng, compressed, "yarn index-q", 3, 64, 128, false);
}

// Issue 4 (batch-1 decode latency): the rewritten kernels and the fused norm -> RoPE (-> KV cache format) against
// the kernels they replace, bit for bit.
TEST(GpuRope, MatchesReferenceBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  YarnScaling yarn;
  yarn.factor = 16.0f;
  yarn.original_max_position_embeddings = 65536;
  yarn.beta_fast = 32.0f;
  yarn.beta_slow = 1.0f;
  Rope compressed(64, 160000.0f, &yarn);
  Rope window(64, 10000.0f, nullptr);
  Rope narrow(32, 10000.0f, nullptr);
  run_rope_vs_reference(rng, compressed, 1, 64, 512, false);  // V4-Flash query at decode
  run_rope_vs_reference(rng, compressed, 1, 64, 512, true);   // the attention output's de-rotation
  run_rope_vs_reference(rng, window, 7, 64, 512, true);
  run_rope_vs_reference(rng, window, 9, 1, 512, false);  // the KV row
  run_rope_vs_reference(rng, compressed, 3, 64, 128, false);  // index queries
  run_rope_vs_reference(rng, narrow, 5, 13, 96, false);  // a partial last head group
}

TEST(GpuKvCache, FakeQuantMatchesCpuBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_kv_fake_quant(rng, 1, 512, 64);   // V4-Flash KV row at decode: 7 blocks
  run_kv_fake_quant(rng, 9, 512, 64);   // rows of several warps' blocks
  run_kv_fake_quant(rng, 3, 1152, 64);  // 17 blocks: a second window of 8
  run_kv_fake_quant(rng, 2, 200, 64);   // a partial last block (136 = 64 + 64 + 8)
  run_kv_fake_quant(rng, 2, 96, 0);     // no rope channels
}

TEST(GpuRmsNorm, F32RopeMatchesChainBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  YarnScaling yarn;
  yarn.factor = 16.0f;
  yarn.original_max_position_embeddings = 65536;
  yarn.beta_fast = 32.0f;
  yarn.beta_slow = 1.0f;
  Rope compressed(64, 160000.0f, &yarn);
  Rope window(64, 10000.0f, nullptr);
  Rope odd(38, 10000.0f, nullptr);
  using F = CacheFormat;
  run_rms_norm_f32_rope(rng, compressed, 1, 64, 512, false, F::None, 1e-6f);  // V4-Flash query heads at decode
  run_rms_norm_f32_rope(rng, window, 5, 64, 512, false, F::None, 1e-6f);
  run_rms_norm_f32_rope(rng, window, 1, 1, 512, true, F::V4, 1e-6f);  // the KV row + V4's window cache format
  run_rms_norm_f32_rope(rng, compressed, 9, 1, 512, true, F::V4, 1e-6f);
  run_rms_norm_f32_rope(rng, window, 3, 1, 1024, true, F::V4, 1e-20f);  // two passes of the block
  // nope 162: a partial cache block, a float4 half nope half rope.
  run_rms_norm_f32_rope(rng, odd, 2, 3, 200, true, F::V4, 1e-6f);
  run_rms_norm_f32_rope(rng, window, 1, 1, 512, true, F::V41, 1e-20f);  // V4.1's KV row: MXFP8 over every channel
  run_rms_norm_f32_rope(rng, compressed, 7, 1, 512, true, F::V41, 1e-20f);
}

// mxfp8_window_fake_quant (its loads batched, issue 4) against the CPU's fp8_fake_quant(kv, dim, 32), exactly.
TEST(GpuKvCache, Mxfp8WindowFakeQuantMatchesCpuBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  for (auto [rows, dim] : {std::pair{1, 512}, std::pair{9, 512}, std::pair{3, 1024}, std::pair{2, 96}}) {
    std::vector<float> x(size_t(rows) * dim);
    for (int r = 0; r < rows; ++r) {
      const float row_scale = std::exp(rng.uniform(-6.0f, 4.0f));
      for (int i = 0; i < dim; ++i) x[size_t(r) * dim + i] = rng.normal(0.0f, row_scale);
    }
    round_to_bf16(x);
    std::vector<float> ref = x;
    fp8_fake_quant(ref.data(), int64_t(ref.size()), cuda::kV41WindowKvBlock);
    for (float& v : ref) v = round_bf16(v);
    cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dy(x.size() * 2);
    dy.fill_bytes(0xFF);
    cuda::mxfp8_window_fake_quant(dx.as<cuda::bf16>(), rows, dim, dy.as<cuda::bf16>(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    report_exact("mxfp8_window_fake_quant vs CPU rows=" + std::to_string(rows) + " dim=" + std::to_string(dim),
                 count_mismatches(cuda::to_host<uint16_t>(dy, x.size()), to_bf16(ref)), x.size());
  }
}

TEST(GpuKvCache, CommitDerotateMatchesTwoKernelsBitwise) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  Rope window(64, 10000.0f, nullptr);
  Rope narrow(32, 10000.0f, nullptr);
  run_window_commit_derotate(rng, window, 1, 1, 1, 64, 512, 128);    // V4-Flash batch-1 decode
  run_window_commit_derotate(rng, window, 64, 1, 64, 64, 512, 128);  // batch 64
  run_window_commit_derotate(rng, window, 40, 20, 40, 64, 512, 8);   // prefill chunks longer than the window
  run_window_commit_derotate(rng, window, 6, 3, 0, 64, 512, 8);      // a rank without query rows: commit only
  run_window_commit_derotate(rng, narrow, 9, 4, 5, 13, 96, 4);       // partial head group, query rows a suffix
}

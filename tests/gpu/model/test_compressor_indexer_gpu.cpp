// The V4 compressor and lightning indexer on the GPU (layers/compressor/compressor_gpu.h,
// layers/indexer/indexer_gpu.h) against the CPU reference (v4_compressor_push + the entry finish of
// update_compressed_caches, lightning_index_query / lightning_index_key / lightning_top_entries) with the official
// numerics, on fresh random weights (the random_v4_* stand-ins, read back) and inputs. Three slots are fed 64-76
// positions each in interleaved calls that mix single rows with prefill chunks longer than the ring, so entries
// close inside chunks, across chunk boundaries and from ring rows.
//
// Tolerances: the GPU and the CPU differ only by fp32-vs-double sums (GEMMs, softmax pooling, the norm) and
// sincosf-vs-libm ulps; the stored formats round those to bf16 / FP8 / FP4, so almost every value is
// bit-identical and the rest are single rounding flips (one FP8 step is 2^-3 of a value, one FP4 step up to half
// of it). A layout or ordering bug moves whole entries and fails by orders of magnitude.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <set>
#include <utility>

#include "core/dtype.h"
#include "core/linalg.h"
#include "cuda/blas.h"
#include "gpu_test_util.h"
#include "module_steps.h"
#include "layers/attention/kv_record.h"
#include "layers/compressor/compressor_gpu.h"
#include "layers/compressor/v4_compressor.h"
#include "layers/indexer/indexer_gpu.h"
#include "layers/indexer/lightning_indexer.h"
#include "layers/norm_rope/rope.h"
#include "model/v4/gpu/v4_gpu_compressor.h"
#include "model/v4/v4_numerics.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

using namespace module_io;

constexpr int64_t kHidden = 512;
constexpr float kEps = 1e-6f;
constexpr int kSlots = 4;                        // slot 1 stays unused: its pages must stay untouched
const std::vector<int> kUsedSlots = {2, 0, 3};
constexpr int kMinLength = 64, kMaxLength = 76;
constexpr int kMaxChunk = 24;                    // longer than both rings (8 for ratio 4 overlap, 16 for ratio 16)
constexpr int kIdenticalDigits = 2;  // decimals of the printed bit-identical bound (as the logs have it)

// Compressed layers rotate with compress_rope_theta and YaRN (model-spec §2), as in production.
Rope compressed_rope(int rope_dim) {
  YarnScaling yarn;
  yarn.factor = 16.0f;
  yarn.original_max_position_embeddings = 65536;
  yarn.beta_fast = 32.0f;
  yarn.beta_slow = 1.0f;
  return Rope(rope_dim, 160000.0f, &yarn);
}

V4Numerics official_numerics() {
  V4Numerics n;
  n.quantize_cache = true;
  n.quantize_activations = true;
  n.bf16_activations = true;
  return n;
}

std::vector<float> download_f32(const float* p, size_t n) {
  std::vector<float> v(n);
  DI_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}
std::vector<float> download_bf16(const cuda::bf16* p, size_t n) {
  std::vector<uint16_t> v(n);
  DI_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  return from_bf16(v);
}
std::vector<uint8_t> download_u8(const uint8_t* p, size_t n) {
  std::vector<uint8_t> v(n);
  DI_CUDA_CHECK(cudaMemcpy(v.data(), p, n, cudaMemcpyDeviceToHost));
  return v;
}

// The CPU weights of the device compressor: the same numbers (bf16 projections, fp32 ape / norm).
V4CompressorWeights cpu_compressor(const cuda::CompressorGpu& g) {
  V4CompressorWeights w;
  w.ratio = g.ratio;
  w.dim = g.dim;
  w.overlap = g.overlap;
  const int64_t width = int64_t(g.series()) * g.dim;
  w.wkv = tensor_of({width, g.hidden}, download_bf16(g.wkv, size_t(width * g.hidden)));
  w.wgate = tensor_of({width, g.hidden}, download_bf16(g.wgate, size_t(width * g.hidden)));
  w.ape = tensor_of({g.ratio, width}, download_f32(g.ape, size_t(g.ratio * width)));
  w.norm = tensor_of({g.dim}, download_f32(g.norm, size_t(g.dim)));
  return w;
}

// FP8 codes times their e8m0 block scales, as fp32 (exact).
Tensor dequantize_fp8(const cuda::Fp8Linear& l) {
  const int64_t sb_k = (l.k + l.block - 1) / l.block;
  const std::vector<uint8_t> codes = download_u8(l.weight, size_t(l.n * l.k));
  const std::vector<uint8_t> scales = download_u8(l.scale, size_t(((l.n + l.block - 1) / l.block) * sb_k));
  Tensor t({l.n, l.k});
  for (int64_t n = 0; n < l.n; ++n)
    for (int64_t k = 0; k < l.k; ++k)
      t.data[size_t(n * l.k + k)] =
          e4m3_to_float(codes[size_t(n * l.k + k)]) * e8m0_to_float(scales[size_t((n / l.block) * sb_k + k / l.block)]);
  return t;
}

// What a module sees of kUsedSlots in a test: their random lengths (kMinLength .. kMaxLength), the calls of their
// schedule (make_schedule) and its most rows, and page tables of 4-entry pages for compression `ratio` (drawn in that
// order).
struct SlotRun {
  std::vector<int> lengths;
  std::vector<Call> calls;
  int R = 0;
  Paging pg;
};

SlotRun random_slot_run(Rng& rng, int ratio) {
  SlotRun run;
  for (size_t i = 0; i < kUsedSlots.size(); ++i) run.lengths.push_back(rng.integer(kMinLength, kMaxLength));
  run.calls = make_schedule(rng, kUsedSlots, run.lengths, kMaxChunk);
  run.R = max_rows(run.calls);
  const int page_size = 4;
  run.pg = make_paging(rng, kSlots, (kMaxLength / ratio + page_size - 1) / page_size + 1, page_size);
  return run;
}

// ---------------------------------------------------------------------------------------------------------
// The KV compressor (EntryFormat::KvFp8). At V4's entry shape (512 channels, 64 RoPE) the same calls also run with
// EntryFormat::KvFp8Record into a pool of packed FP8 records (layers/attention/kv_record.h, own state rings): every
// record must decode to the bf16 pool's entry bit for bit.

void run_kv_compressor(Rng& rng, int ratio, bool overlap, int dim, int rope_dim) {
  const std::string name = std::string("compressor_kv ratio=") + std::to_string(ratio) +
                           (overlap ? " overlap" : " plain") + " dim=" + std::to_string(dim) +
                           " rope=" + std::to_string(rope_dim);
  gpu::DeviceArena arena;
  const cuda::CompressorGpu g = gpu::random_v4_compressor(arena, ratio, dim, overlap, kHidden, rng.engine()());
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const V4CompressorWeights cw = cpu_compressor(g);
  const Rope rope = compressed_rope(rope_dim);
  const V4Numerics num = official_numerics();

  const SlotRun run = random_slot_run(rng, ratio);
  const auto& [lengths, calls, R, pg] = run;
  cuda::DeviceBuffer pool(size_t(pg.pool_rows()) * size_t(dim) * 2), table = cuda::to_device(pg.table),
      inv_freq = cuda::to_device(rope.inv_freq()), ring_kv(cuda::compressor_state_floats(g, kSlots) * 4),
      ring_gate(cuda::compressor_state_floats(g, kSlots) * 4), ws(cuda::compressor_workspace_bytes(R, g));
  pool.fill_bytes(0xFF);
  ring_kv.fill_bytes(0xFF);  // NaN: a ring row read before it was saved poisons its entry
  ring_gate.fill_bytes(0xFF);
  cuda::BlasHandle blas;
  const cuda::CompressorGpuState state{ring_kv.as<float>(), ring_gate.as<float>()};
  const cuda::EntryFinish finish{inv_freq.as<float>(), rope_dim, cuda::EntryFormat::KvFp8, kEps};
  const cuda::PagedPool out{pool.as<cuda::bf16>(), table.as<int32_t>(), pg.max_pages, pg.page_size, dim};
  namespace kvrec = cuda::kvrec;
  const bool records = dim == kvrec::kDim && rope_dim == kvrec::kRopeDim;
  cuda::DeviceBuffer rec_pool(records ? size_t(pg.pool_rows()) * kvrec::kRowBytes : 1),
      rec_ring_kv(ring_kv.bytes()), rec_ring_gate(ring_gate.bytes());
  for (cuda::DeviceBuffer* b : {&rec_pool, &rec_ring_kv, &rec_ring_gate}) b->fill_bytes(0xFF);
  const cuda::CompressorGpuState rec_state{rec_ring_kv.as<float>(), rec_ring_gate.as<float>()};
  const cuda::EntryFinish rec_finish{inv_freq.as<float>(), rope_dim, cuda::EntryFormat::KvFp8Record, kEps};
  const cuda::PagedPool rec_out{nullptr, table.as<int32_t>(), pg.max_pages, pg.page_size, dim,
                                rec_pool.as<uint8_t>()};

  std::map<int, V4CompressorState> cpu_state;
  for (int s : kUsedSlots) cpu_state[s].reset(cw);
  EntryMap expected;
  int multi_row_calls = 0;
  for (const Call& call : calls) {
    const int rows = call.rows();
    multi_row_calls += rows > 1;
    std::vector<float> x = rng.normals(size_t(rows) * kHidden);
    round_to_bf16(x);
    // CPU: update_compressed_caches for the KV compressor (entry at its group's first position, v4_quantize_kv_row).
    for (int r = 0; r < rows; ++r) {
      std::vector<float> entry(static_cast<size_t>(dim));
      V4CompressorState& s = cpu_state[call.slots[size_t(r)]];
      if (v4_compressor_push(cw, s, x.data() + r * kHidden, kHidden, call.positions[size_t(r)], kEps, true,
                             entry.data())) {
        const int e = int(s.entries - 1);
        rope.apply(entry.data() + dim - rope_dim, int64_t(e) * ratio);
        v4_quantize_kv_row(entry.data(), dim, rope_dim, num);
        expected[{call.slots[size_t(r)], e}] = std::move(entry);
      }
    }
    cuda::DeviceBuffer dx = cuda::to_device(to_bf16(x)), dslots = cuda::to_device(call.slots),
                       dpos = cuda::to_device(call.positions);
    cuda::compressor_push(dx.as<cuda::bf16>(), dslots.as<int32_t>(), dpos.as<int32_t>(), rows, g, state, finish, out,
                          ws.get(), blas.get(), nullptr);
    if (records)
      cuda::compressor_push(dx.as<cuda::bf16>(), dslots.as<int32_t>(), dpos.as<int32_t>(), rows, g, rec_state,
                            rec_finish, rec_out, ws.get(), blas.get(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
  }
  int total_entries = 0;
  for (int len : lengths) total_entries += len / ratio;
  ASSERT_EQ(int(expected.size()), total_entries);
  std::printf("%s: %zu calls (%d with several rows, up to %d rows), %d entries\n", name.c_str(), calls.size(),
              multi_row_calls, R, total_entries);
  // One FP8 flip moves a value by up to 2^-3 of itself; a few per mille of flipped values stay far below 1e-2,
  // while a missing quantization (~3%) or a misplaced row (O(1)) does not.
  const std::vector<uint16_t> got = cuda::to_host<uint16_t>(pool, size_t(pg.pool_rows()) * size_t(dim));
  compare_pool(name, got, dim, pg, expected, 1e-2, 0.98, kIdenticalDigits);
  if (!records) return;
  const std::vector<uint8_t> rec = cuda::to_host<uint8_t>(rec_pool, size_t(pg.pool_rows()) * kvrec::kRowBytes);
  std::vector<float> decoded(static_cast<size_t>(dim));
  size_t bad = 0;
  for (const auto& entry : expected) {
    const int64_t row = pg.row(entry.first.first, entry.first.second);
    kvrec::decode_row(rec.data() + size_t(row) * kvrec::kRowBytes, decoded.data());
    for (int d = 0; d < dim; ++d) {
      uint32_t u;
      std::memcpy(&u, &decoded[size_t(d)], 4);
      bad += u != uint32_t(got[size_t(row) * size_t(dim) + size_t(d)]) << 16;
    }
  }
  report_exact(name + " fp8 records decoded vs the bf16 pool", bad, expected.size() * size_t(dim));
}

// ---------------------------------------------------------------------------------------------------------
// Selection checks shared by the indexer tests.

struct SelectionStats {
  int rows = 0, exact = 0, near_tie_rows = 0, near_tie_entries = 0, bad_rows = 0, selecting_rows = 0;
};

// One row's GPU selection (pool rows) against the CPU's lightning_top_entries over the same queries, head weights
// and keys the GPU used (its own FP4 values), so the check judges the selection, not quantizer noise. The sets may
// differ only where the scores of the differing entries are within `tol` (relative to the absolute size of the
// score terms) of the k-th score, and never by the tie-break: exactly equal scores take the lower entry id.
void check_selection(SelectionStats& st, const std::string& what, const int32_t* got, int topk, int n,
                     const std::map<int64_t, int>& entry_of_row, const float* q, const float* w, const float* keys,
                     int heads, int dim, double tol) {
  ++st.rows;
  const int expect_count = std::min(n, topk);
  std::vector<int64_t> sel;
  bool structure_ok = true;
  for (int i = 0; i < topk; ++i) {
    if (i >= expect_count) {
      structure_ok &= got[i] == -1;
      continue;
    }
    auto it = entry_of_row.find(got[i]);
    if (it == entry_of_row.end() || it->second >= n) {
      structure_ok = false;
      continue;
    }
    if (!sel.empty() && it->second <= sel.back()) structure_ok = false;  // ascending, distinct
    sel.push_back(it->second);
  }
  if (!structure_ok) {
    ++st.bad_rows;
    ADD_FAILURE() << what << ": malformed selection (rows outside the slot's visible entries, not ascending, or "
                             "wrong -1 padding); n_visible=" << n;
    return;
  }
  LightningIndexerWeights lw;
  lw.heads = heads;
  lw.dim = dim;
  lw.topk = topk;
  IndexQuery iq;
  iq.q.assign(q, q + size_t(heads) * dim);
  iq.head_weight.assign(w, w + heads);
  const std::vector<int64_t> ref = lightning_top_entries(lw, iq, keys, n);
  if (ref == sel) {
    ++st.exact;
    if (n > topk) ++st.selecting_rows;
    return;
  }
  ++st.selecting_rows;
  // Scores as the reference computes them, and the size of their terms.
  auto score = [&](int64_t e, double* abs_size) {
    double s = 0, a = 0;
    for (int h = 0; h < heads; ++h) {
      const float* qh = q + h * dim;
      const float* k = keys + e * dim;
      double qk = dot(qh, k, dim), qk_abs = 0;
      for (int d = 0; d < dim; ++d) qk_abs += std::fabs(double(qh[d]) * k[d]);
      s += double(w[h]) * std::max(qk, 0.0);
      a += std::fabs(double(w[h])) * qk_abs;
    }
    *abs_size = a;
    return s;
  };
  double kth_abs = 0, kth = INFINITY;
  for (int64_t e : ref) {
    double a;
    const double s = score(e, &a);
    if (s < kth || (s == kth && a > kth_abs)) {
      kth = s;
      kth_abs = a;
    }
  }
  std::vector<int64_t> missing, extra;
  std::set_difference(ref.begin(), ref.end(), sel.begin(), sel.end(), std::back_inserter(missing));
  std::set_difference(sel.begin(), sel.end(), ref.begin(), ref.end(), std::back_inserter(extra));
  bool ok = missing.size() == extra.size();
  std::vector<double> s_missing, s_extra;
  for (int64_t e : missing) {
    double a;
    s_missing.push_back(score(e, &a));
    ok &= std::fabs(s_missing.back() - kth) <= tol * (a + kth_abs);
  }
  for (int64_t e : extra) {
    double a;
    s_extra.push_back(score(e, &a));
    ok &= std::fabs(s_extra.back() - kth) <= tol * (a + kth_abs);
  }
  // An exact tie between a dropped and a taken entry means the GPU broke the tie toward the higher id.
  for (double a : s_missing)
    for (double b : s_extra) ok &= a != b;
  if (ok) {
    ++st.near_tie_rows;
    st.near_tie_entries += int(missing.size());
    return;
  }
  ++st.bad_rows;
  std::string detail;
  for (size_t i = 0; i < missing.size() && i < 4; ++i)
    detail += " cpu-only e" + std::to_string(missing[i]) + " (score " + std::to_string(s_missing[i]) + ")";
  for (size_t i = 0; i < extra.size() && i < 4; ++i)
    detail += " gpu-only e" + std::to_string(extra[i]) + " (score " + std::to_string(s_extra[i]) + ")";
  ADD_FAILURE() << what << ": selection differs beyond near-ties; n_visible=" << n << " k-th score " << kth
                << detail;
}

void report_selection(const std::string& name, const SelectionStats& st) {
  std::printf("GPU_CHECK %s rows=%d selecting=%d exact=%d near_tie_rows=%d near_tie_entries=%d bad_rows=%d bound=0\n",
              name.c_str(), st.rows, st.selecting_rows, st.exact, st.near_tie_rows, st.near_tie_entries, st.bad_rows);
  EXPECT_EQ(st.bad_rows, 0) << name;
}

std::map<int64_t, int> entries_by_row(const Paging& pg, int slot) {
  std::map<int64_t, int> m;
  for (int e = 0; e < pg.capacity(); ++e) m[pg.row(slot, e)] = e;
  return m;
}

}  // namespace

TEST(GpuCompressorIndexer, KvCompressorCsaOverlap) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_kv_compressor(rng, 4, true, 512, 64);  // V4 CSA: entry w pools Ca of group w-1 and Cb of group w
}

TEST(GpuCompressorIndexer, KvCompressorHcaPlain) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  run_kv_compressor(rng, 16, false, 512, 64);  // HCA layout (production ratio 128, same code path)
}

TEST(GpuCompressorIndexer, KvCompressorRaggedFp8Block) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  // nope = 96 = 64 + a ragged block of 32 with its own scale (tiny configs: head_dim 64, rope 16 -> 48).
  run_kv_compressor(rng, 4, true, 112, 16);
}

// The indexer end to end: its compressor writes FP4 index keys, the queries and head weights, and the top-k.
TEST(GpuCompressorIndexer, IndexerKeysQueriesSelection) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  ModelConfig c;
  c.hidden_size = int(kHidden);
  c.q_lora_rank = 256;
  c.index_n_heads = 16;
  c.index_head_dim = 128;
  c.index_topk = 16;
  c.rope_dim = 64;
  c.weight_block_size = 128;
  const int heads = c.index_n_heads, dim = c.index_head_dim, topk = c.index_topk, rope_dim = c.rope_dim;
  const int q_lora = c.q_lora_rank;

  gpu::DeviceArena arena;
  const cuda::IndexerGpu g = gpu::random_v4_indexer(arena, c, rng.engine()());
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  ASSERT_EQ(g.compressor.ratio, 4);
  ASSERT_TRUE(g.compressor.overlap);
  const int ratio = g.compressor.ratio;
  LightningIndexerWeights ix;
  ix.compressor = cpu_compressor(g.compressor);
  ix.wq_b = dequantize_fp8(g.wq_b);
  ix.weights_proj = tensor_of({heads, kHidden}, download_bf16(g.weights_proj, size_t(heads) * kHidden));
  ix.heads = heads;
  ix.dim = dim;
  ix.topk = topk;
  const Rope rope = compressed_rope(rope_dim);

  const SlotRun run = random_slot_run(rng, ratio);
  const auto& [lengths, calls, R, pg] = run;
  // As the GPU model sizes it: the most entries a row can see, which the page rounding exceeds.
  const int max_entries = (kMaxLength + ratio - 1) / ratio;

  cuda::DeviceBuffer pool(size_t(pg.pool_rows()) * size_t(dim) * 2), table = cuda::to_device(pg.table),
      inv_freq = cuda::to_device(rope.inv_freq()), ring_kv(cuda::compressor_state_floats(g.compressor, kSlots) * 4),
      ring_gate(cuda::compressor_state_floats(g.compressor, kSlots) * 4),
      ws(std::max(cuda::compressor_workspace_bytes(R, g.compressor), cuda::indexer_workspace_bytes(R, max_entries, g))),
      q_out(size_t(R) * heads * dim * 4), q_fp4(size_t(R) * heads * dim * 2), head_w(size_t(R) * heads * 4),
      rows_out(size_t(R) * topk * 4);
  pool.fill_bytes(0xFF);
  ring_kv.fill_bytes(0xFF);
  ring_gate.fill_bytes(0xFF);
  cuda::BlasHandle blas;
  const cuda::CompressorGpuState state{ring_kv.as<float>(), ring_gate.as<float>()};
  const cuda::EntryFinish finish{inv_freq.as<float>(), rope_dim, cuda::EntryFormat::IndexFp4, kEps};
  const cuda::PagedPool keys{pool.as<cuda::bf16>(), table.as<int32_t>(), pg.max_pages, pg.page_size, dim};

  std::map<int, V4CompressorState> cpu_state;
  for (int s : kUsedSlots) cpu_state[s].reset(ix.compressor);
  EntryMap expected;
  std::vector<float> q_gpu, q_ref, w_gpu, w_ref;
  struct RowRecord {
    int slot, pos;
    std::vector<float> q, w;
    std::vector<int32_t> sel;
  };
  std::vector<RowRecord> records;
  for (const Call& call : calls) {
    const int rows = call.rows();
    std::vector<float> u = rng.normals(size_t(rows) * kHidden);
    round_to_bf16(u);
    std::vector<float> qr = rng.normals(size_t(rows) * q_lora);
    round_to_bf16(qr);
    const Fp8Rows qr8 = quantize_rows(qr, rows, q_lora, 128);
    for (int r = 0; r < rows; ++r) {
      const int slot = call.slots[size_t(r)], pos = call.positions[size_t(r)];
      std::vector<float> key(static_cast<size_t>(dim));
      V4CompressorState& s = cpu_state[slot];
      if (v4_compressor_push(ix.compressor, s, u.data() + r * kHidden, kHidden, pos, kEps, true, key.data())) {
        const int e = int(s.entries - 1);
        lightning_index_key(key.data(), dim, int64_t(e) * ratio, rope, true);
        expected[{slot, e}] = std::move(key);
      }
      // The attention hands the indexer the FP8-quantized q_lora rows (v4_attention_step's qr_gemm).
      const IndexQuery iq =
          lightning_index_query(ix, qr8.dequantized.data() + size_t(r) * q_lora, u.data() + r * kHidden, kHidden, pos,
                                rope, true);
      q_ref.insert(q_ref.end(), iq.q.begin(), iq.q.end());
      for (double hw : iq.head_weight) w_ref.push_back(float(hw));
    }
    cuda::DeviceBuffer du = cuda::to_device(to_bf16(u)), dslots = cuda::to_device(call.slots),
                       dpos = cuda::to_device(call.positions), dqr = cuda::to_device(qr8.codes),
                       dqs = cuda::to_device(qr8.scales);
    q_out.fill_bytes(0xFF);
    q_fp4.fill_bytes(0xFF);
    head_w.fill_bytes(0xFF);
    rows_out.fill_bytes(0x7F);
    cuda::compressor_push(du.as<cuda::bf16>(), dslots.as<int32_t>(), dpos.as<int32_t>(), rows, g.compressor, state,
                          finish, keys, ws.get(), blas.get(), nullptr);
    cuda::indexer_query(dqr.as<uint8_t>(), dqs.as<float>(), q_lora, du.as<cuda::bf16>(), dpos.as<int32_t>(), rows, g,
                        inv_freq.as<float>(), rope_dim, q_out.as<float>(), q_fp4.as<cuda::bf16>(), head_w.as<float>(),
                        blas.get(), nullptr);
    cuda::indexer_select(q_fp4.as<cuda::bf16>(), head_w.as<float>(), dslots.as<int32_t>(), dpos.as<int32_t>(), rows, g,
                         keys, rows_out.as<int32_t>(), ws.get(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> qh = from_bf16(cuda::to_host<uint16_t>(q_fp4, size_t(rows) * heads * dim));
    const std::vector<float> wh = cuda::to_host<float>(head_w, size_t(rows) * heads);
    const std::vector<int32_t> sh = cuda::to_host<int32_t>(rows_out, size_t(rows) * topk);
    q_gpu.insert(q_gpu.end(), qh.begin(), qh.end());
    w_gpu.insert(w_gpu.end(), wh.begin(), wh.end());
    for (int r = 0; r < rows; ++r)
      records.push_back({call.slots[size_t(r)], call.positions[size_t(r)],
                         std::vector<float>(qh.begin() + size_t(r) * heads * dim, qh.begin() + size_t(r + 1) * heads * dim),
                         std::vector<float>(wh.begin() + size_t(r) * heads, wh.begin() + size_t(r + 1) * heads),
                         std::vector<int32_t>(sh.begin() + size_t(r) * topk, sh.begin() + size_t(r + 1) * topk)});
  }

  // Keys: Hadamard + FP4 of the pooled, normalised, rotated entry. One FP4 step is up to half a value, but flips
  // are rare (the inputs of the quantizer agree to ~1e-6); 3e-2 still fails a missing rotation or quantization.
  const std::vector<uint16_t> pool_h = cuda::to_host<uint16_t>(pool, size_t(pg.pool_rows()) * size_t(dim));
  compare_pool("indexer_keys ratio=4 overlap dim=128", pool_h, dim, pg, expected, 3e-2, 0.95, kIdenticalDigits);
  // Queries: FP8 GEMM (fp32) then the same RoPE + Hadamard + FP4 as the keys.
  compare_values("indexer_queries heads=16 dim=128", q_gpu, q_ref, 3e-2, 0.95, kIdenticalDigits);
  // Head weights: one fp32 GEMM over hidden = 512 bf16 products (exact) against double sums.
  check_rel_l2("indexer_head_weights heads=16", w_gpu, w_ref, 1e-5);

  SelectionStats st;
  std::map<int, std::map<int64_t, int>> entry_of_row;
  for (int s : kUsedSlots) entry_of_row[s] = entries_by_row(pg, s);
  for (size_t i = 0; i < records.size(); ++i) {
    const RowRecord& rec = records[i];
    const int n = (rec.pos + 1) / ratio;
    std::vector<float> kv(size_t(n) * dim);
    for (int e = 0; e < n; ++e)
      for (int d = 0; d < dim; ++d) kv[size_t(e) * dim + d] = bf16_to_float(pool_h[size_t(pg.row(rec.slot, e) * dim + d)]);
    check_selection(st, "row " + std::to_string(i) + " slot " + std::to_string(rec.slot) + " pos " +
                            std::to_string(rec.pos),
                    rec.sel.data(), topk, n, entry_of_row[rec.slot], rec.q.data(), rec.w.data(), kv.data(), heads, dim,
                    1e-4);
  }
  report_selection("indexer_select heads=16 topk=16", st);
}

namespace {

// An indexer with only what the select reads (no weights): the selection tests below.
cuda::IndexerGpu select_only_indexer(int heads, int dim, int topk, int ratio) {
  cuda::IndexerGpu g;
  g.heads = heads;
  g.dim = dim;
  g.topk = topk;
  g.compressor.ratio = ratio;
  g.compressor.overlap = true;
  return g;
}

}  // namespace

// The selection alone at production shapes: 64 heads x 128, topk 512, up to 16384 visible entries (64K context),
// more rows than one workspace tile, exact ties (duplicated keys, zero keys, a slot of 8 distinct keys).
TEST(GpuCompressorIndexer, SelectProductionShapes) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  const int heads = 64, dim = 128, topk = 512, ratio = 4, page_size = 64, slots = 3;
  const int capacity = 16384;
  const Paging pg = make_paging(rng, slots, capacity / page_size, page_size);

  // Keys by (slot, entry), bf16 numbers.
  std::vector<float> keys(size_t(pg.pool_rows()) * dim);
  std::vector<std::vector<float>> distinct(8);
  for (auto& v : distinct) {
    v = rng.normals(size_t(dim));
    round_to_bf16(v);
  }
  std::vector<float> dup = rng.normals(size_t(dim));
  round_to_bf16(dup);
  for (int s = 0; s < slots; ++s) {
    for (int e = 0; e < capacity; ++e) {
      float* k = keys.data() + size_t(pg.row(s, e)) * dim;
      if (s == 1) {
        std::copy(distinct[size_t(e % 8)].begin(), distinct[size_t(e % 8)].end(), k);
      } else if (s == 0 && e >= 300 && e < 364) {
        std::fill(k, k + dim, 0.0f);
      } else if (s == 0 && e >= 100 && e < 200) {
        std::copy(dup.begin(), dup.end(), k);
      } else {
        for (int d = 0; d < dim; ++d) k[d] = round_bf16(rng.normal());
      }
    }
  }

  // Rows: (slot, visible entries). The edges around topk, full capacity, then enough small rows for two tiles.
  std::vector<std::pair<int, int>> wanted = {{0, 0},     {0, 1},    {0, 511},  {0, 512},  {0, 513},
                                              {0, 1000},  {0, 16384}, {1, 600}, {1, 4000}, {1, 16384},
                                              {2, 16384}, {2, 12345}, {2, 2},   {2, 7000}};
  while (wanted.size() < 300) wanted.push_back({rng.integer(0, slots - 1), rng.integer(0, 600)});
  const int rows = int(wanted.size());
  std::vector<int32_t> row_slots, positions;
  for (const auto& [s, n] : wanted) {
    row_slots.push_back(s);
    // Any position with (pos + 1) / ratio == n.
    positions.push_back(n == 0 ? rng.integer(0, ratio - 2) : n * ratio - 1 + rng.integer(0, ratio - 1));
  }
  std::vector<float> q = rng.normals(size_t(rows) * heads * dim);
  round_to_bf16(q);  // the select reads bf16 queries (the engine's are FP4 values, exact in bf16)
  const std::vector<float> w = rng.normals(size_t(rows) * heads);

  const cuda::IndexerGpu g = select_only_indexer(heads, dim, topk, ratio);
  cuda::DeviceBuffer dkeys = cuda::to_device(to_bf16(keys)), table = cuda::to_device(pg.table),
                     dq = cuda::to_device(to_bf16(q)), dw = cuda::to_device(w), dslots = cuda::to_device(row_slots),
                     dpos = cuda::to_device(positions), out(size_t(rows) * topk * 4),
                     ws(cuda::indexer_workspace_bytes(rows, capacity, g));
  out.fill_bytes(0x7F);
  const cuda::PagedPool kp{dkeys.as<cuda::bf16>(), table.as<int32_t>(), pg.max_pages, pg.page_size, dim};
  cuda::indexer_select(dq.as<cuda::bf16>(), dw.as<float>(), dslots.as<int32_t>(), dpos.as<int32_t>(), rows, g, kp,
                       out.as<int32_t>(), ws.get(), nullptr);
  DI_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> sel = cuda::to_host<int32_t>(out, size_t(rows) * topk);

  SelectionStats st;
  std::vector<std::map<int64_t, int>> entry_of_row;
  for (int s = 0; s < slots; ++s) entry_of_row.push_back(entries_by_row(pg, s));
  std::vector<float> kv;
  for (int r = 0; r < rows; ++r) {
    const int s = row_slots[size_t(r)], n = wanted[size_t(r)].second;
    kv.resize(size_t(n) * dim);
    for (int e = 0; e < n; ++e)
      std::copy_n(keys.begin() + pg.row(s, e) * dim, dim, kv.begin() + int64_t(e) * dim);
    check_selection(st, "row " + std::to_string(r) + " slot " + std::to_string(s), sel.data() + size_t(r) * topk,
                    topk, n, entry_of_row[size_t(s)], q.data() + size_t(r) * heads * dim, w.data() + size_t(r) * heads,
                    kv.data(), heads, dim, 1e-4);
  }
  report_selection("indexer_select heads=64 dim=128 topk=512 entries<=16384", st);
}

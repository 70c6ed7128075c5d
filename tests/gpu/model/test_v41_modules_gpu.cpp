// The V4.1-specific GPU modules against their CPU references, on fresh random weights and inputs with
// V4.1-Flash widths (head_dim 512, index heads 32 x 128, rope 64, Engram rows 256 x 24 heads) and a hidden size
// scaled down to 512:
//  - the CSA2 compressor (layers/compressor/csa2_compressor_gpu.h) vs csa2_compress_token + the entry finish of
//    V41Model::update_caches (csa2_index_key, RoPE, FP4 / e4m3 / 16), ratios 2 and 1, three slots fed in
//    interleaved calls that mix single rows with prefill chunks (groups close inside chunks and across calls);
//    and the same rows as one call vs the interleaved calls, bitwise (the partial-group carry);
//  - the CSA2 indexer (layers/indexer/csa2_indexer_gpu.h) vs csa2_index_scores / select_candidate_blocks /
//    select_index_topk: a ratio-2 Full layer (TopK), a ratio-1 candidate source and a Reindex layer of its group,
//    end to end on the compressor's keys; and the selection alone at production shapes (top-512, blocks of 8,
//    2048 candidate blocks, up to 20480 visible entries, exact ties);
//  - Engram (layers/engram/engram_gpu.h) vs engram_apply, with the table in device memory and in mapped pinned
//    host memory.
//
// Expected bits: the GPU follows the CPU operation by operation except for the fp32 accumulation of the GEMMs
// (cuBLAS / FP8 GEMM) against the CPU's double dot products (~1e-7 relative), which the bf16 / FP4 roundings of
// the stored values mostly absorb: almost every stored value is bit-identical and the rest are single rounding
// flips (one FP4 step is up to half a value). Index scores of FP4 queries and keys are exact sums, so given the
// same head weights they match bitwise (the production-shape selection test); end to end the head weights come from
// cuBLAS' fp32 sums and differ by ulps, so there the scores are compared by rel L2. The selections are checked
// exactly against the CPU selection functions run on the GPU's own scores (read back from the select workspace), so
// a near-tie cannot hide a selection bug.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <unistd.h>

#include "core/dtype.h"
#include "core/linalg.h"
#include "cuda/blas.h"
#include "cuda/numerics_mode.h"
#include "gpu_test_util.h"
#include "module_steps.h"
#include "layers/compressor/csa2_compressor.h"
#include "layers/compressor/csa2_compressor_gpu.h"
#include "layers/engram/engram.h"
#include "layers/engram/engram_gpu.h"
#include "layers/indexer/csa2_indexer.h"
#include "layers/indexer/csa2_indexer_gpu.h"
#include "layers/norm_rope/rope.h"
#include "layers/quant/fake_quant.h"
#include "model/checkpoint.h"

using namespace deepinfer;
using namespace deepinfer::gputest;

namespace {

using namespace module_io;

constexpr int64_t kHidden = 512;
constexpr float kEps = 1e-20f;  // V4.1 rms_norm_eps (model-spec §1.2)
constexpr int kDim = 512, kIndexDim = 128, kRopeDim = 64, kIndexHeads = 32, kQLora = 256;
constexpr int kSlots = 4;  // slot 1 stays unused: its pages must stay untouched
const std::vector<int> kUsedSlots = {2, 0, 3};
constexpr int kMinLength = 64, kMaxLength = 76;
constexpr int kMaxChunk = 24;
constexpr int kPageSize = 4;
constexpr int kIdenticalDigits = 3;  // decimals of the printed bit-identical bound (as the logs have it)

// Compressed layers rotate with compress_rope_theta and YaRN (model-spec §2).
Rope compressed_rope() {
  YarnScaling yarn;
  yarn.factor = 16.0f;
  yarn.original_max_position_embeddings = 65536;
  yarn.beta_fast = 32.0f;
  yarn.beta_slow = 1.0f;
  return Rope(kRopeDim, 160000.0f, &yarn);
}

std::vector<float> bf16_normals(Rng& rng, size_t n, float mean, float sd) {
  std::vector<float> v = rng.normals(n, mean, sd);
  round_to_bf16(v);
  return v;
}

cuda::DeviceBuffer upload_bf16(const std::vector<float>& v) { return cuda::to_device(to_bf16(v)); }


// An FP8 weight [n, k] with 32 x 32 e8m0 blocks (model-spec §5 V4.1), ~ N(0, 1/sqrt(k)): device codes and scales,
// and the dequantized fp32 copy for the CPU.
struct Fp8Weight {
  cuda::DeviceBuffer codes, scales;
  Tensor dequantized;
  cuda::Fp8Linear linear;
};

Fp8Weight random_fp8_weight(Rng& rng, int64_t n, int64_t k) {
  const int B = 32;
  const std::vector<float> v = rng.normals(size_t(n * k), 0.0f, float(1.0 / std::sqrt(double(k))));
  const int64_t nb = (n + B - 1) / B, kb = (k + B - 1) / B;
  std::vector<uint8_t> codes(size_t(n * k)), scales(size_t(nb * kb));
  Tensor deq({n, k});
  for (int64_t bn = 0; bn < nb; ++bn) {
    for (int64_t bk = 0; bk < kb; ++bk) {
      float amax = 0;
      for (int64_t i = bn * B; i < std::min(n, (bn + 1) * B); ++i)
        for (int64_t j = bk * B; j < std::min(k, (bk + 1) * B); ++j) amax = std::max(amax, std::fabs(v[size_t(i * k + j)]));
      const float scale = pow2_ceil(std::max(amax, 1e-4f) / 448.0f);
      scales[size_t(bn * kb + bk)] = float_to_e8m0(scale);
      for (int64_t i = bn * B; i < std::min(n, (bn + 1) * B); ++i) {
        for (int64_t j = bk * B; j < std::min(k, (bk + 1) * B); ++j) {
          const size_t at = size_t(i * k + j);
          codes[at] = float_to_e4m3(v[at] / scale);
          deq.data[at] = e4m3_to_float(codes[at]) * scale;
        }
      }
    }
  }
  Fp8Weight w;
  w.codes = cuda::to_device(codes);
  w.scales = cuda::to_device(scales);
  w.dequantized = std::move(deq);
  w.linear.weight = w.codes.as<uint8_t>();
  w.linear.scale = w.scales.as<uint8_t>();
  w.linear.n = n;
  w.linear.k = k;
  w.linear.block = B;
  return w;
}

// ---------------------------------------------------------------------------------------------------------
// A Full layer's compressor and index-key weights, on the host (the CPU modules) and the device.

struct Csa2Weights {
  Csa2CompressorWeights cpu;
  Csa2IndexerWeights cpu_keys;  // wk / k_norm only (the key half of the indexer)
  cuda::DeviceBuffer wkv, wgate, norm, wk, k_norm;
  cuda::Csa2CompressorGpu gpu;
};

Csa2Weights make_csa2_weights(Rng& rng, int ratio) {
  Csa2Weights w;
  const float proj = float(1.0 / std::sqrt(double(kHidden)));
  // Norm weights are bf16 in the checkpoint (model-spec §5); the GPU takes them as fp32 copies.
  std::vector<float> wkv = bf16_normals(rng, size_t(kDim) * kHidden, 0.0f, proj);
  std::vector<float> wgate = bf16_normals(rng, size_t(kDim) * kHidden, 0.0f, proj);
  std::vector<float> norm = bf16_normals(rng, size_t(kDim), 1.0f, 0.1f);
  std::vector<float> wk = bf16_normals(rng, size_t(kIndexDim) * kDim, 0.0f, float(1.0 / std::sqrt(double(kDim))));
  std::vector<float> k_norm = bf16_normals(rng, size_t(kIndexDim), 1.0f, 0.1f);
  w.wkv = upload_bf16(wkv);
  w.norm = cuda::to_device(norm);
  w.wk = upload_bf16(wk);
  w.k_norm = cuda::to_device(k_norm);
  w.cpu.ratio = ratio;
  w.cpu.wkv = tensor_of({kDim, kHidden}, wkv);
  w.cpu.norm = tensor_of({kDim}, norm);
  if (ratio > 1) {
    w.wgate = upload_bf16(wgate);
    w.cpu.wgate = tensor_of({kDim, kHidden}, wgate);
  }
  w.cpu_keys.wk = tensor_of({kIndexDim, kDim}, wk);
  w.cpu_keys.k_norm = tensor_of({kIndexDim}, k_norm);
  w.cpu_keys.heads = kIndexHeads;
  w.cpu_keys.head_dim = kIndexDim;
  w.gpu.wkv = w.wkv.as<cuda::bf16>();
  w.gpu.wgate = ratio > 1 ? w.wgate.as<cuda::bf16>() : nullptr;
  w.gpu.norm = w.norm.as<float>();
  w.gpu.wk = w.wk.as<cuda::bf16>();
  w.gpu.k_norm = w.k_norm.as<float>();
  w.gpu.ratio = ratio;
  w.gpu.dim = kDim;
  w.gpu.index_dim = kIndexDim;
  w.gpu.hidden = kHidden;
  return w;
}

// The attention inputs of every (slot, position): bf16 numbers, fixed up front so that several schedules see the
// same rows.
using RowInputs = std::map<std::pair<int, int>, std::vector<float>>;

RowInputs make_inputs(Rng& rng, const std::vector<int>& lengths, int width) {
  RowInputs in;
  for (size_t i = 0; i < kUsedSlots.size(); ++i)
    for (int p = 0; p < lengths[i]; ++p) in[{kUsedSlots[i], p}] = bf16_normals(rng, size_t(width), 0.0f, 1.0f);
  return in;
}

std::vector<float> gather(const RowInputs& in, const Call& call) {
  std::vector<float> x;
  for (int r = 0; r < call.rows(); ++r) {
    const std::vector<float>& row = in.at({call.slots[size_t(r)], call.positions[size_t(r)]});
    x.insert(x.end(), row.begin(), row.end());
  }
  return x;
}

// CPU reference: V41Model::update_caches for a Full layer, slot by slot (the CPU state is per sequence).
void cpu_entries(const Csa2Weights& w, const Rope& rope, const RowInputs& in, const std::vector<int>& lengths,
                 EntryMap& kv, EntryMap& keys) {
  for (size_t i = 0; i < kUsedSlots.size(); ++i) {
    const int slot = kUsedSlots[i];
    Csa2PartialGroup partial;
    int entries = 0;
    for (int pos = 0; pos < lengths[i]; ++pos) {
      std::vector<float> latent(static_cast<size_t>(kDim)), key(static_cast<size_t>(kIndexDim));
      if (!csa2_compress_token(w.cpu, in.at({slot, pos}).data(), partial, kEps, true, latent.data())) continue;
      const int64_t group_start = pos - w.cpu.ratio + 1;
      csa2_index_key(w.cpu_keys, latent.data(), rope, group_start, kEps, true, key.data());
      rope.apply(latent.data() + kDim - kRopeDim, group_start);
      fp4_fake_quant(latent.data(), kDim, cuda::kCsa2KvFp4Block, Fp4Scale::E4M3);
      kv[{slot, entries}] = std::move(latent);
      keys[{slot, entries}] = std::move(key);
      ++entries;
    }
  }
}

// The device side of one Full layer's caches: both pools (one page table), the open-group state, the workspace.
// entry_format Fp4: the compressed KV as the packed 288-byte records (kv_records; kv_record.h kvrec41) instead.
struct Csa2Caches {
  cuda::DeviceBuffer kv_pool, kv_records, key_pool, table, inv_freq, open_kv, open_gate, ws;
  cuda::PagedPool kv_out, key_out;
  cuda::Csa2CompressorGpuState state;
  cuda::Csa2EntryFinish finish;

  Csa2Caches(const Csa2Weights& w, const Paging& pg, const Rope& rope, int max_rows,
             cuda::KvFormat entry_format = cuda::KvFormat::Bf16)
      : kv_pool(size_t(pg.pool_rows()) * kDim * 2),
        kv_records(size_t(pg.pool_rows()) * cuda::kvrec41::kEntryRowBytes),
        key_pool(size_t(pg.pool_rows()) * kIndexDim * 2),
        table(cuda::to_device(pg.table)),
        inv_freq(cuda::to_device(rope.inv_freq())),
        open_kv(std::max<size_t>(cuda::csa2_compressor_state_floats(w.gpu, kSlots), 1) * 4),
        open_gate(std::max<size_t>(cuda::csa2_compressor_state_floats(w.gpu, kSlots), 1) * 4),
        ws(cuda::csa2_compressor_workspace_bytes(max_rows, w.gpu)) {
    kv_pool.fill_bytes(0xFF);
    kv_records.fill_bytes(0xFF);
    key_pool.fill_bytes(0xFF);
    open_kv.fill_bytes(0xFF);  // NaN: a state row read before it was saved poisons its entry
    open_gate.fill_bytes(0xFF);
    const bool records = entry_format == cuda::KvFormat::Fp4;
    kv_out = {records ? nullptr : kv_pool.as<cuda::bf16>(), table.as<int32_t>(), pg.max_pages, pg.page_size, kDim,
              records ? kv_records.as<uint8_t>() : nullptr};
    key_out = {key_pool.as<cuda::bf16>(), table.as<int32_t>(), pg.max_pages, pg.page_size, kIndexDim};
    state = {w.gpu.ratio > 1 ? open_kv.as<float>() : nullptr, w.gpu.ratio > 1 ? open_gate.as<float>() : nullptr};
    finish = {inv_freq.as<float>(), kRopeDim, kEps, entry_format};
  }

  void push(const Csa2Weights& w, const cuda::DeviceBuffer& x, const cuda::DeviceBuffer& slots,
            const cuda::DeviceBuffer& positions, int rows, const cuda::BlasHandle& blas) {
    cuda::csa2_compressor_push(x.as<cuda::bf16>(), slots.as<int32_t>(), positions.as<int32_t>(), rows, w.gpu, state,
                               finish, kv_out, key_out, ws.get(), blas.get(), nullptr);
  }
};

struct PoolImages {
  std::vector<uint16_t> kv, keys;
  std::vector<uint8_t> kv_records;  // entry format Fp4 only
};

PoolImages run_compressor(const Csa2Weights& w, const Paging& pg, const Rope& rope, const RowInputs& in,
                          const std::vector<Call>& calls, cuda::KvFormat entry_format = cuda::KvFormat::Bf16) {
  Csa2Caches caches(w, pg, rope, max_rows(calls), entry_format);
  cuda::BlasHandle blas;
  for (const Call& call : calls) {
    cuda::DeviceBuffer dx = upload_bf16(gather(in, call)), dslots = cuda::to_device(call.slots),
                       dpos = cuda::to_device(call.positions);
    caches.push(w, dx, dslots, dpos, call.rows(), blas);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
  }
  return {cuda::to_host<uint16_t>(caches.kv_pool, size_t(pg.pool_rows()) * kDim),
          cuda::to_host<uint16_t>(caches.key_pool, size_t(pg.pool_rows()) * kIndexDim),
          entry_format == cuda::KvFormat::Fp4
              ? cuda::to_host<uint8_t>(caches.kv_records, size_t(pg.pool_rows()) * cuda::kvrec41::kEntryRowBytes)
              : std::vector<uint8_t>{}};
}

std::vector<int> random_lengths(Rng& rng) {
  std::vector<int> lengths;
  for (size_t i = 0; i < kUsedSlots.size(); ++i) lengths.push_back(rng.integer(kMinLength, kMaxLength));
  return lengths;
}

void run_csa2_compressor(int ratio) {
  Rng rng;
  const std::string name = "csa2_compressor ratio=" + std::to_string(ratio);
  const Csa2Weights w = make_csa2_weights(rng, ratio);
  const Rope rope = compressed_rope();
  const std::vector<int> lengths = random_lengths(rng);
  const RowInputs in = make_inputs(rng, lengths, int(kHidden));
  const std::vector<Call> calls = make_schedule(rng, kUsedSlots, lengths, kMaxChunk);
  const Paging pg = make_paging(rng, kSlots, (kMaxLength / ratio + kPageSize - 1) / kPageSize + 1, kPageSize);

  EntryMap kv, keys;
  cpu_entries(w, rope, in, lengths, kv, keys);
  int total_entries = 0;
  for (int len : lengths) total_entries += len / ratio;
  ASSERT_EQ(int(kv.size()), total_entries);

  const PoolImages got = run_compressor(w, pg, rope, in, calls);
  std::printf("%s: %zu calls, up to %d rows, %d entries\n", name.c_str(), calls.size(), max_rows(calls), total_entries);
  // One FP4 flip moves a value by up to half of itself; a few per mille of flips stay far below 3e-2, while a
  // missing RoPE or quantization, or a misplaced row, does not.
  compare_pool(name + " kv FP4/e4m3/16", got.kv, kDim, pg, kv, 3e-2, 0.98, kIdenticalDigits);
  compare_pool(name + " index_keys FP4/ue8m0/32", got.keys, kIndexDim, pg, keys, 3e-2, 0.98, kIdenticalDigits);

  // The same calls with the compressed KV as packed FP4 records (DEEPINFER_KV_FORMAT=fp8's V4.1 entry format,
  // bench/gpu/NOTES.md "V4.1 packed KV records"): every written record decodes to the bf16 pool's row bit for bit,
  // the rows no entry maps to stay untouched, and the index keys are the same bits.
  {
    namespace kvrec41 = cuda::kvrec41;
    const PoolImages rec = run_compressor(w, pg, rope, in, calls, cuda::KvFormat::Fp4);
    std::set<int64_t> written;
    std::vector<float> row(kDim);
    size_t bad = 0, stray = 0, key_diff = 0;
    for (const auto& [key, entry] : kv) {
      const int64_t r = pg.row(key.first, key.second);
      written.insert(r);
      kvrec41::decode_entry(rec.kv_records.data() + size_t(r) * kvrec41::kEntryRowBytes, row.data());
      for (int d = 0; d < kDim; ++d)
        bad += uint32_t(got.kv[size_t(r * kDim + d)]) << 16 != float_to_bits(row[size_t(d)]);
    }
    for (int64_t r = 0; r < pg.pool_rows(); ++r)
      if (!written.count(r))
        for (int i = 0; i < kvrec41::kEntryRowBytes; ++i)
          stray += rec.kv_records[size_t(r) * kvrec41::kEntryRowBytes + size_t(i)] != 0xFFu;
    for (size_t i = 0; i < got.keys.size(); ++i) key_diff += got.keys[i] != rec.keys[i];
    report_exact(name + " fp4 records vs bf16 pool (decoded entries)", bad, kv.size() * size_t(kDim));
    report_exact(name + " fp4 records untouched_rows (bytes)", stray,
                 size_t(pg.pool_rows() - int64_t(written.size())) * kvrec41::kEntryRowBytes);
    report_exact(name + " index_keys with fp4 records vs bf16 run", key_diff, got.keys.size());
  }

  // The partial-group carry: the interleaved calls and one call over the same rows store the same bits. Batch-
  // invariant mode makes the projections independent of the call's row count (cuda/numerics_mode.h).
  cuda::set_batch_invariant(true);
  const PoolImages chunked = run_compressor(w, pg, rope, in, calls);
  const PoolImages whole = run_compressor(w, pg, rope, in, {one_call(kUsedSlots, lengths)});
  cuda::set_batch_invariant(false);
  size_t diff = 0;
  for (size_t i = 0; i < whole.kv.size(); ++i) diff += chunked.kv[i] != whole.kv[i];
  for (size_t i = 0; i < whole.keys.size(); ++i) diff += chunked.keys[i] != whole.keys[i];
  report_exact(name + " chunked_vs_one_call", diff, whole.kv.size() + whole.keys.size());
}

// ---------------------------------------------------------------------------------------------------------
// Indexer helpers.

struct IndexerWeights {
  Fp8Weight wq_b;
  cuda::DeviceBuffer weights_proj;
  Csa2IndexerWeights cpu;  // wq_b / weights_proj (the query half; the keys come from the owner)
  cuda::Csa2IndexerGpu gpu;
};

IndexerWeights make_indexer_weights(Rng& rng, int topk) {
  IndexerWeights w;
  w.wq_b = random_fp8_weight(rng, int64_t(kIndexHeads) * kIndexDim, kQLora);
  const std::vector<float> proj = bf16_normals(rng, size_t(kIndexHeads) * kHidden, 0.0f, float(1.0 / std::sqrt(double(kHidden))));
  w.weights_proj = upload_bf16(proj);
  w.cpu.wq_b = w.wq_b.dequantized;
  w.cpu.weights_proj = tensor_of({kIndexHeads, kHidden}, proj);
  w.cpu.heads = kIndexHeads;
  w.cpu.head_dim = kIndexDim;
  w.gpu.wq_b = w.wq_b.linear;
  w.gpu.weights_proj = w.weights_proj.as<cuda::bf16>();
  w.gpu.heads = kIndexHeads;
  w.gpu.dim = kIndexDim;
  w.gpu.topk = topk;
  w.gpu.hidden = kHidden;
  return w;
}

// Selection checks: the GPU's scores against the CPU's, and the GPU's selection against the CPU selection
// functions run on the GPU's own scores (exact).
struct SelectionCheck {
  std::vector<float> gpu_scores, cpu_scores;
  size_t rows = 0, bad_topk = 0, bad_blocks = 0, selecting = 0, masked_blocks = 0;

  // rows_out of one row vs select_index_topk; entry e of the slot is pool row pg.row(slot, e).
  void topk(const int32_t* got, int topk, const std::vector<float>& scores, const std::vector<uint8_t>* allowed,
            const Paging& pg, int slot) {
    ++rows;
    const std::vector<int64_t> ref = select_index_topk(scores, allowed, topk);
    size_t eligible = 0;
    for (size_t s = 0; s < scores.size(); ++s) eligible += !allowed || (*allowed)[s];
    selecting += eligible > size_t(topk);
    bool ok = true;
    for (int i = 0; i < topk; ++i) {
      const int64_t want = i < int(ref.size()) ? pg.row(slot, int(ref[size_t(i)])) : -1;
      ok &= got[i] == want;
    }
    bad_topk += !ok;
  }

  // The candidate flags of one row vs select_candidate_blocks; returns the CPU's per-entry mask.
  std::vector<uint8_t> blocks(const uint8_t* flags, int stride, int block_size, int topk_blocks,
                              const std::vector<float>& scores) {
    const std::vector<uint8_t> mask = select_candidate_blocks(scores, block_size, topk_blocks);
    const int n = int(scores.size()), nb = (n + block_size - 1) / block_size;
    bool ok = true;
    for (int e = 0; e < n; ++e) ok &= flags[e / block_size] == mask[size_t(e)];
    for (int b = nb; b < stride; ++b) ok &= flags[b] == 0;
    bad_blocks += !ok;
    masked_blocks += nb > topk_blocks;
    return mask;
  }

  // `min_identical`: the fraction of scores bit-identical to the CPU's (see the callers).
  void report(const std::string& name, bool with_blocks, double min_identical) {
    compare_values(name + " scores", gpu_scores, cpu_scores, 1e-2, min_identical, kIdenticalDigits);
    std::printf("%s: %zu rows, %zu choosing among more than topk, %zu with more blocks than kept\n", name.c_str(), rows,
                selecting, masked_blocks);
    EXPECT_GT(selecting, 0u) << name << ": no row exercised the top-k selection";
    report_exact(name + " topk_rows", bad_topk, rows);
    if (!with_blocks) return;
    EXPECT_GT(masked_blocks, 0u) << name << ": no row exercised the candidate block selection";
    report_exact(name + " candidate_block_rows", bad_blocks, rows);
  }
};

// ---------------------------------------------------------------------------------------------------------
// Indexer end to end: the owner's compressor writes keys, then its indexer (and a Reindex layer's) selects.

void run_csa2_indexer(int ratio) {
  Rng rng;
  const int topk = 16, block_size = 4, topk_blocks = 8;
  const std::string name = "csa2_indexer ratio=" + std::to_string(ratio);
  const Csa2Weights owner = make_csa2_weights(rng, ratio);
  const IndexerWeights idx = make_indexer_weights(rng, topk);
  // Ratio 1 is the candidate source's group: layer 20 publishes candidate blocks, a Reindex layer reads them.
  const bool candidates = ratio == 1;
  const IndexerWeights reidx = make_indexer_weights(rng, topk);
  const Rope rope = compressed_rope();
  const std::vector<int> lengths = random_lengths(rng);
  const RowInputs x_in = make_inputs(rng, lengths, int(kHidden));
  const RowInputs qr_in = make_inputs(rng, lengths, kQLora);
  const RowInputs x2_in = make_inputs(rng, lengths, int(kHidden));
  const RowInputs qr2_in = make_inputs(rng, lengths, kQLora);
  const std::vector<Call> calls = make_schedule(rng, kUsedSlots, lengths, kMaxChunk);
  const int R = max_rows(calls);
  ASSERT_LE(R, 128) << "the test reads every row's scores from one select workspace tile";
  const Paging pg = make_paging(rng, kSlots, (kMaxLength / ratio + kPageSize - 1) / kPageSize + 1, kPageSize);
  const int max_entries = (kMaxLength + ratio - 1) / ratio;

  EntryMap kv_cpu, keys_cpu;
  cpu_entries(owner, rope, x_in, lengths, kv_cpu, keys_cpu);

  Csa2Caches caches(owner, pg, rope, R);
  cuda::BlasHandle blas;
  const int stride = (max_entries + block_size - 1) / block_size;
  cuda::DeviceBuffer q_out(size_t(R) * kIndexHeads * kIndexDim * 4), q_fp4(size_t(R) * kIndexHeads * kIndexDim * 2),
      head_w(size_t(R) * kIndexHeads * 4), rows_out(size_t(R) * topk * 4), flags(size_t(R) * stride),
      sel_ws(cuda::csa2_indexer_workspace_bytes(R, max_entries));
  const cuda::CandidateBlocks cand{flags.as<uint8_t>(), stride, block_size, topk_blocks};

  SelectionCheck own, re;
  for (const Call& call : calls) {
    const int rows = call.rows();
    cuda::DeviceBuffer dx = upload_bf16(gather(x_in, call)), dslots = cuda::to_device(call.slots),
                       dpos = cuda::to_device(call.positions);
    caches.push(owner, dx, dslots, dpos, rows, blas);

    // One index source: query (FP8 q latent, as the attention's wq_b takes it), select, read back.
    auto index = [&](const IndexerWeights& w, const RowInputs& x_rows, const RowInputs& qr_rows, const cuda::DeviceBuffer& xd,
                     cuda::Csa2Selection selection, SelectionCheck& check, const std::vector<std::vector<uint8_t>>* allowed,
                     std::vector<std::vector<uint8_t>>* published) {
      const std::vector<float> x = gather(x_rows, call);
      const Fp8Rows qr8 = quantize_rows(gather(qr_rows, call), rows, kQLora, 32);
      cuda::DeviceBuffer dqr = cuda::to_device(qr8.codes), dqs = cuda::to_device(qr8.scales);
      rows_out.fill_bytes(0x7F);
      sel_ws.fill_bytes(0xFF);
      if (selection == cuda::Csa2Selection::CandidateSource) flags.fill_bytes(0x7F);
      cuda::csa2_indexer_query(dqr.as<uint8_t>(), dqs.as<float>(), kQLora, xd.as<cuda::bf16>(), dpos.as<int32_t>(), rows,
                               w.gpu, caches.inv_freq.as<float>(), kRopeDim, q_out.as<float>(), q_fp4.as<cuda::bf16>(),
                               head_w.as<float>(), blas.get(), nullptr);
      cuda::csa2_indexer_select(q_fp4.as<cuda::bf16>(), head_w.as<float>(), dslots.as<int32_t>(), dpos.as<int32_t>(), rows,
                                w.gpu, ratio, caches.key_out, max_entries, selection, cand, rows_out.as<int32_t>(),
                                sel_ws.get(), nullptr);
      DI_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<int32_t> sel = cuda::to_host<int32_t>(rows_out, size_t(rows) * topk);
      const std::vector<float> ws = cuda::to_host<float>(sel_ws, size_t(rows) * max_entries);
      const std::vector<uint8_t> fl = cuda::to_host<uint8_t>(flags, size_t(rows) * stride);
      for (int r = 0; r < rows; ++r) {
        const int slot = call.slots[size_t(r)], pos = call.positions[size_t(r)];
        const int n = (pos + 1) / ratio;
        std::vector<float> keys(size_t(n) * kIndexDim);
        for (int e = 0; e < n; ++e) std::copy(keys_cpu.at({slot, e}).begin(), keys_cpu.at({slot, e}).end(), keys.begin() + size_t(e) * kIndexDim);
        const std::vector<float> ref = csa2_index_scores(w.cpu, qr8.dequantized.data() + size_t(r) * kQLora,
                                                         x.data() + size_t(r) * kHidden, pos, rope, true, keys.data(), n);
        const std::vector<float> got(ws.begin() + size_t(r) * max_entries, ws.begin() + size_t(r) * max_entries + n);
        check.cpu_scores.insert(check.cpu_scores.end(), ref.begin(), ref.end());
        check.gpu_scores.insert(check.gpu_scores.end(), got.begin(), got.end());
        const std::vector<uint8_t>* mask = allowed ? &(*allowed)[size_t(r)] : nullptr;
        if (published)
          published->push_back(check.blocks(fl.data() + size_t(r) * stride, stride, block_size, topk_blocks, got));
        check.topk(sel.data() + size_t(r) * topk, topk, got, mask, pg, slot);
      }
    };

    if (!candidates) {
      index(idx, x_in, qr_in, dx, cuda::Csa2Selection::TopK, own, nullptr, nullptr);
    } else {
      std::vector<std::vector<uint8_t>> masks;
      index(idx, x_in, qr_in, dx, cuda::Csa2Selection::CandidateSource, own, nullptr, &masks);
      cuda::DeviceBuffer dx2 = upload_bf16(gather(x2_in, call));
      index(reidx, x2_in, qr2_in, dx2, cuda::Csa2Selection::Reindex, re, &masks, nullptr);
    }
  }
  // The head weights come from cuBLAS' fp32 sums against the CPU's double ones, which differ by an ulp for many
  // rows, so the end-to-end scores are compared by rel L2 only (their bit-identity is reported); the selections are
  // exact regardless, being checked on the GPU's own scores.
  own.report(name + (candidates ? " candidate_source" : " full"), candidates, 0.0);
  if (candidates) re.report(name + " reindex", false, 0.0);
}

}  // namespace

TEST(GpuV41Modules, Csa2CompressorRatio2) {
  DI_SKIP_WITHOUT_GPU();
  run_csa2_compressor(2);
}

TEST(GpuV41Modules, Csa2CompressorRatio1) {
  DI_SKIP_WITHOUT_GPU();
  run_csa2_compressor(1);
}

TEST(GpuV41Modules, Csa2IndexerFullRatio2) {
  DI_SKIP_WITHOUT_GPU();
  run_csa2_indexer(2);
}

TEST(GpuV41Modules, Csa2IndexerCandidateSourceAndReindex) {
  DI_SKIP_WITHOUT_GPU();
  run_csa2_indexer(1);
}

// The selection alone at production shapes (ratio 1, the candidate source's group): 32 heads x 128, top-512, blocks
// of 8, 2048 candidate blocks (so rows past 16384 visible entries are masked), exact ties (a run of duplicated keys,
// zero keys). Queries and keys are FP4 values (the stored formats), so the scores are exact and match bitwise.
TEST(GpuV41Modules, Csa2SelectProductionShapes) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  const int heads = kIndexHeads, dim = kIndexDim, topk = 512, block_size = 8, topk_blocks = 2048, slots = 2;
  const int page_size = 64, capacity = 20480;
  const Paging pg = make_paging(rng, slots, capacity / page_size, page_size);

  auto fp4_values = [&](size_t n) {
    std::vector<float> v = rng.normals(n);
    fp4_fake_quant(v.data(), int64_t(n), 32, Fp4Scale::UE8M0);
    return v;
  };
  std::vector<float> keys(size_t(pg.pool_rows()) * dim);
  const std::vector<float> dup = fp4_values(size_t(dim));
  for (int s = 0; s < slots; ++s) {
    for (int e = 0; e < capacity; ++e) {
      float* k = keys.data() + size_t(pg.row(s, e)) * dim;
      if (s == 0 && e >= 3000 && e < 3064) {
        std::fill(k, k + dim, 0.0f);
      } else if (s == 0 && e >= 100 && e < 900) {
        std::copy(dup.begin(), dup.end(), k);
      } else {
        const std::vector<float> v = fp4_values(size_t(dim));
        std::copy(v.begin(), v.end(), k);
      }
    }
  }

  // Rows: (slot, visible entries) around topk, around the 2048 x 8 candidate limit, up to the capacity.
  std::vector<std::pair<int, int>> wanted = {{0, 1},     {0, 2},     {0, 511},   {0, 512},   {0, 513},
                                              {0, 1000},  {0, 16383}, {0, 16384}, {0, 16385}, {0, 16392},
                                              {0, 16393}, {0, 20480}, {1, 17000}, {1, 20480}, {1, 9},
                                              {1, 4097}};
  while (wanted.size() < 40) wanted.push_back({rng.integer(0, slots - 1), rng.integer(1, 2000)});
  const int rows = int(wanted.size());
  std::vector<int32_t> row_slots, positions;
  for (const auto& [s, n] : wanted) {
    row_slots.push_back(s);
    positions.push_back(n - 1);  // ratio 1: n visible entries at position n - 1
  }
  const std::vector<float> q1 = fp4_values(size_t(rows) * heads * dim), q2 = fp4_values(size_t(rows) * heads * dim);
  const std::vector<float> w1 = rng.normals(size_t(rows) * heads), w2 = rng.normals(size_t(rows) * heads);

  cuda::Csa2IndexerGpu g;
  g.heads = heads;
  g.dim = dim;
  g.topk = topk;
  const int stride = capacity / block_size;
  cuda::DeviceBuffer dkeys = upload_bf16(keys), table = cuda::to_device(pg.table), dslots = cuda::to_device(row_slots),
                     dpos = cuda::to_device(positions), out(size_t(rows) * topk * 4), flags(size_t(rows) * stride),
                     ws(cuda::csa2_indexer_workspace_bytes(rows, capacity));
  const cuda::PagedPool kp{dkeys.as<cuda::bf16>(), table.as<int32_t>(), pg.max_pages, pg.page_size, dim};
  const cuda::CandidateBlocks cand{flags.as<uint8_t>(), stride, block_size, topk_blocks};

  // The scores by the formula of csa2_index_scores (fp32 dot products of exact products, relu times the weight
  // in fp32, summed over the heads in double).
  auto cpu_scores = [&](const std::vector<float>& q, const std::vector<float>& w, int r, int n) {
    std::vector<float> s(static_cast<size_t>(n));
    const int slot = row_slots[size_t(r)];
    for (int e = 0; e < n; ++e) {
      double total = 0;
      for (int h = 0; h < heads; ++h) {
        const float qk = float(dot(q.data() + (size_t(r) * heads + h) * dim, keys.data() + size_t(pg.row(slot, e)) * dim, dim));
        total += double(std::max(qk, 0.0f) * w[size_t(r) * heads + h]);
      }
      s[size_t(e)] = float(total);
    }
    return s;
  };

  SelectionCheck source, reindex;
  std::vector<std::vector<uint8_t>> masks;
  for (int pass = 0; pass < 2; ++pass) {
    const bool is_source = pass == 0;
    const std::vector<float>& q = is_source ? q1 : q2;
    const std::vector<float>& w = is_source ? w1 : w2;
    cuda::DeviceBuffer dq = cuda::to_device(to_bf16(q)), dw = cuda::to_device(w);  // FP4 values: exact in bf16
    out.fill_bytes(0x7F);
    ws.fill_bytes(0xFF);
    if (is_source) flags.fill_bytes(0x7F);
    cuda::csa2_indexer_select(dq.as<cuda::bf16>(), dw.as<float>(), dslots.as<int32_t>(), dpos.as<int32_t>(), rows, g, 1, kp,
                              capacity, is_source ? cuda::Csa2Selection::CandidateSource : cuda::Csa2Selection::Reindex,
                              cand, out.as<int32_t>(), ws.get(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<int32_t> sel = cuda::to_host<int32_t>(out, size_t(rows) * topk);
    const std::vector<float> sc = cuda::to_host<float>(ws, size_t(rows) * capacity);
    const std::vector<uint8_t> fl = cuda::to_host<uint8_t>(flags, size_t(rows) * stride);
    SelectionCheck& check = is_source ? source : reindex;
    for (int r = 0; r < rows; ++r) {
      const int n = positions[size_t(r)] + 1;
      const std::vector<float> got(sc.begin() + size_t(r) * capacity, sc.begin() + size_t(r) * capacity + n);
      const std::vector<float> ref = cpu_scores(q, w, r, n);
      check.cpu_scores.insert(check.cpu_scores.end(), ref.begin(), ref.end());
      check.gpu_scores.insert(check.gpu_scores.end(), got.begin(), got.end());
      if (is_source) masks.push_back(check.blocks(fl.data() + size_t(r) * stride, stride, block_size, topk_blocks, got));
      check.topk(sel.data() + size_t(r) * topk, topk, got, is_source ? nullptr : &masks[size_t(r)], pg,
                 row_slots[size_t(r)]);
    }
  }
  source.report("csa2_select candidate_source topk=512 blocks=8x2048", true, 0.999);
  reindex.report("csa2_select reindex topk=512", false, 0.999);
}

// ---------------------------------------------------------------------------------------------------------
// Engram.

namespace {

constexpr int kHc = 4, kEngramDim = 256, kHashHeads = 24;  // V4.1-Flash: 4 streams, 256-wide rows, 3 x 8 heads
constexpr int64_t kTableRows = 1999;

// A one-file safetensors checkpoint with the table (F8_E4M3 [rows, dim] + F8_E8M0 [rows, dim / 32]), so that the
// CPU reference reads it through its own EngramTable.
void write_table_checkpoint(const std::string& path, const std::vector<uint8_t>& codes, const std::vector<uint8_t>& scales) {
  const std::string header = "{\"engram.embed.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[" + std::to_string(kTableRows) +
                             "," + std::to_string(kEngramDim) + "],\"data_offsets\":[0," + std::to_string(codes.size()) +
                             "]},\"engram.embed.scale\":{\"dtype\":\"F8_E8M0\",\"shape\":[" + std::to_string(kTableRows) +
                             "," + std::to_string(kEngramDim / 32) + "],\"data_offsets\":[" +
                             std::to_string(codes.size()) + "," + std::to_string(codes.size() + scales.size()) + "]}}";
  std::ofstream f(path, std::ios::binary);
  const uint64_t len = header.size();
  f.write(reinterpret_cast<const char*>(&len), 8);  // little-endian on every host we build for
  f.write(header.data(), std::streamsize(header.size()));
  f.write(reinterpret_cast<const char*>(codes.data()), std::streamsize(codes.size()));
  f.write(reinterpret_cast<const char*>(scales.data()), std::streamsize(scales.size()));
}

}  // namespace

TEST(GpuV41Modules, EngramDeviceAndPinnedTable) {
  DI_SKIP_WITHOUT_GPU();
  Rng rng;
  const int rows = 37;

  // The table: N(0, 1) rows quantized per 32 with power-of-two scales (the checkpoint's format).
  const Fp8Rows table = quantize_rows(rng.normals(size_t(kTableRows) * kEngramDim), int(kTableRows), kEngramDim, 32);
  std::vector<uint8_t> scale_codes;
  for (float s : table.scales) scale_codes.push_back(float_to_e8m0(s));
  const std::string path =
      (std::filesystem::temp_directory_path() / ("deepinfer_engram_table_" + std::to_string(::getpid()) + ".safetensors")).string();
  write_table_checkpoint(path, table.codes, scale_codes);
  const Checkpoint ck = Checkpoint::open_file(path);

  EngramWeights cpu;
  cpu.table = EngramTable(ck, "engram.embed", kTableRows, kEngramDim);
  Fp8Weight wkv = random_fp8_weight(rng, kHidden * (kHc + 1), int64_t(kHashHeads) * kEngramDim);
  cpu.wkv = wkv.dequantized;
  const std::vector<float> qw = bf16_normals(rng, size_t(kHc) * kHidden, 1.0f, 0.3f);
  const std::vector<float> kw = bf16_normals(rng, size_t(kHc) * kHidden, 1.0f, 0.3f);
  cpu.q_weight = tensor_of({kHc, kHidden}, qw);
  cpu.k_weight = tensor_of({kHc, kHidden}, kw);

  std::vector<int64_t> ids(size_t(rows) * kHashHeads);
  for (int64_t& id : ids) id = rng.integer(0, int(kTableRows) - 1);
  ids[0] = 0;
  ids[1] = kTableRows - 1;  // the first and last table rows
  const std::vector<float> X = bf16_normals(rng, size_t(rows) * kHc * kHidden, 0.0f, 1.0f);

  // CPU: engram_apply per token, then the bf16 streams (model-spec §4; V41Model::run_layer with bf16 activations).
  std::vector<float> ref = X;
  for (int r = 0; r < rows; ++r) {
    float* Xr = ref.data() + size_t(r) * kHc * kHidden;
    engram_apply(cpu, ids.data() + size_t(r) * kHashHeads, kHashHeads, kHc, kHidden, kEps, Xr);
    for (int64_t i = 0; i < kHc * kHidden; ++i) Xr[i] = round_bf16(Xr[i]);
  }

  // Device copies: the table in device memory, and in mapped pinned host memory.
  cuda::DeviceBuffer dcodes = cuda::to_device(table.codes), dscales = cuda::to_device(scale_codes),
                     dqw = cuda::to_device(qw), dkw = cuda::to_device(kw), dids = cuda::to_device(ids);
  uint8_t* host_table = nullptr;
  DI_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_table), table.codes.size() + scale_codes.size(),
                              cudaHostAllocMapped));
  std::memcpy(host_table, table.codes.data(), table.codes.size());
  std::memcpy(host_table + table.codes.size(), scale_codes.data(), scale_codes.size());
  uint8_t* mapped = nullptr;
  DI_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mapped), host_table, 0));

  cuda::EngramGpu g;
  g.table_rows = kTableRows;
  g.dim = kEngramDim;
  g.hash_heads = kHashHeads;
  g.wkv = wkv.linear;
  g.q_weight = dqw.as<float>();
  g.k_weight = dkw.as<float>();
  g.hc = kHc;
  g.hidden = kHidden;
  cuda::DeviceBuffer ws(cuda::engram_workspace_bytes(rows, g));

  auto run = [&](const uint8_t* codes, const uint8_t* scales, const std::vector<std::pair<int, int>>& chunks) {
    g.table = codes;
    g.table_scale = scales;
    cuda::DeviceBuffer dX = upload_bf16(X);
    for (const auto& [r0, n] : chunks)
      cuda::engram_apply(dX.as<cuda::bf16>() + size_t(r0) * kHc * kHidden, dids.as<int64_t>() + size_t(r0) * kHashHeads, n,
                         g, kEps, ws.get(), nullptr);
    DI_CUDA_CHECK(cudaDeviceSynchronize());
    return from_bf16(cuda::to_host<uint16_t>(dX, X.size()));
  };
  const std::vector<float> dev = run(dcodes.as<uint8_t>(), dscales.as<uint8_t>(), {{0, rows}});
  const std::vector<float> pinned = run(mapped, mapped + table.codes.size(), {{0, rows}});
  // The update moves the streams by O(1); a wrong gate or value row moves them by O(1) too, while fp32-vs-double
  // sums flip at most a few bf16 roundings (one step is 2^-8 of a value).
  compare_values("engram device_table streams", dev, ref, 2e-3, 0.97, kIdenticalDigits);
  size_t diff = 0;
  for (size_t i = 0; i < dev.size(); ++i) diff += dev[i] != pinned[i];
  report_exact("engram pinned_vs_device_table", diff, dev.size());
  // A token's update does not depend on the other rows of its call (batch-invariant GEMM dispatch).
  cuda::set_batch_invariant(true);
  const std::vector<float> whole = run(dcodes.as<uint8_t>(), dscales.as<uint8_t>(), {{0, rows}});
  const std::vector<float> split = run(dcodes.as<uint8_t>(), dscales.as<uint8_t>(), {{0, 1}, {1, 16}, {17, rows - 17}});
  cuda::set_batch_invariant(false);
  diff = 0;
  for (size_t i = 0; i < whole.size(); ++i) diff += whole[i] != split[i];
  report_exact("engram split_vs_one_call", diff, whole.size());

  DI_CUDA_CHECK(cudaFreeHost(host_table));
  std::filesystem::remove(path);
}

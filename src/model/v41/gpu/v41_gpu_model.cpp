#include "model/v41/gpu/v41_gpu_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "core/env_switch.h"
#include "core/error.h"
#include "cuda/check.h"
#include "cuda/host_file_mapping.h"
#include "cuda/step_kernels.h"
#include "layers/norm_rope/rope.h"
#include "layers/quant/fp8_gemm.h"
#include "layers/quant/w8a16_gemv.h"
#include "model/v4/gpu/v4_gpu_forward.h"
#include "model/v4/gpu/v4_gpu_moe.h"
#include "model/v41/gpu/v41_step_kernels.h"
#include "model/v41/v41_model.h"

namespace deepinfer::gpu {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// model-spec §2 / §5: V4.1's FP8 weights have 32 x 32 blocks and the W8A8 activations 32-wide blocks.
constexpr int kV41Block = 32;

void check_v41_gpu_config(const ModelConfig& c) {
  DI_CHECK(c.family == ModelFamily::V41,
           "v4.1 gpu model: config model_type '" + c.model_type + "' is not deepseek_v41");
  check_kernel_shapes(c, "v4.1 gpu model", "V4.1-Flash", kV41Block);
  int index_source = -1;  // the group whose top-k was published last, in layer order
  for (const LayerPlan& plan : c.layers) {
    DI_CHECK(!plan.hash_moe, "v4.1 gpu model: layer " + std::to_string(plan.index) + " is a hash-routed MoE (V4 only)");
    DI_CHECK(plan.attention == AttentionKind::Window || plan.attention == AttentionKind::CSA2,
             "v4.1 gpu model: layer " + std::to_string(plan.index) + " has a V4 attention kind");
    if (plan.attention != AttentionKind::CSA2) continue;
    DI_CHECK(plan.compress_ratio == 1 || plan.compress_ratio == 2,
             "v4.1 gpu model: layer " + std::to_string(plan.index) + " compresses by " +
                 std::to_string(plan.compress_ratio) + " (1 or 2 expected)");
    DI_CHECK(plan.kv_source >= 0 && plan.kv_source <= plan.index &&
                 c.layers[size_t(plan.kv_source)].role == Csa2Role::Full &&
                 c.layers[size_t(plan.kv_source)].compress_ratio == plan.compress_ratio,
             "v4.1 gpu model: layer " + std::to_string(plan.index) + " reads KV source " +
                 std::to_string(plan.kv_source) + ", which is not an earlier Full layer of its ratio");
    // One top-k buffer serves the model: each Reuse layer must read the group whose index source ran last.
    if (plan.role != Csa2Role::Reuse) index_source = plan.kv_source;
    DI_CHECK(index_source == plan.kv_source,
             "v4.1 gpu model: Reuse layer " + std::to_string(plan.index) + " has no top-k published for the group of "
                                                                          "layer " +
                 std::to_string(plan.kv_source));
  }
}

// The sizes and routing constants of a V4.1 MoE layer (model-spec §4 "MoE"): no hash layers, the 1e-20
// normalisation epsilon, normalised only when top_k > 1, the gate temperature; bias_vl (image tokens) unused.
cuda::MoeGpu v41_moe_shape(const ModelConfig& c) {
  cuda::MoeGpu m;
  m.experts = c.n_routed_experts;
  m.top_k = c.n_experts_per_tok;
  m.act_block = kV41Block;
  m.hidden = c.hidden_size;
  m.inter = c.moe_intermediate_size;
  m.shared_inter = int64_t(c.n_shared_experts) * c.moe_intermediate_size;
  m.swiglu_limit = c.swiglu_limit;
  m.route_scale = c.routed_scaling_factor;
  m.route_eps = 1e-20f;
  m.gate_temp = c.gate_temp;
  m.normalize = c.norm_topk_prob && c.n_experts_per_tok > 1;
  // The routed w1|w3 with PDL behind the routing from 8 rows on (cuda::moe_routed_pdl_rows; bench/gpu/NOTES.md
  // "Session 45", "Session 46"): batch 8 -1.9 % (run 227) and -1.4 % (run 228) on an H200, -3 % on an H100; from 2
  // rows on it loses at batches 2 and 4 (+2.7 %, +0.8 %, run 228) and batch 1 +1.7-3.1 %; 5-7 rows unmeasured.
  m.routed_pdl_rows = 8;
  return m;
}

cuda::Csa2IndexerGpu index_shape(const ModelConfig& c) {
  cuda::Csa2IndexerGpu ix;
  ix.heads = c.index_n_heads;
  ix.dim = c.index_head_dim;
  ix.topk = c.index_topk;
  ix.hidden = c.hidden_size;
  return ix;
}

cuda::Csa2CompressorGpu compressor_shape(const ModelConfig& c, const LayerPlan& plan) {
  cuda::Csa2CompressorGpu w;
  w.ratio = plan.compress_ratio;
  w.dim = c.head_dim;
  w.index_dim = c.index_head_dim;
  w.hidden = c.hidden_size;
  return w;
}

cuda::EngramGpu engram_shape(const ModelConfig& c, const EngramLayerHash& hash) {
  cuda::EngramGpu e;
  e.table_rows = hash.table_rows;
  e.dim = c.engram_head_dim;
  e.hash_heads = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
  e.hc = c.hc_mult;
  e.hidden = c.hidden_size;
  return e;
}

// Where the Engram tables live (DEEPINFER_ENGRAM_TABLES): V4.1-Flash's two tables are 203 GB, more than a GPU holds,
// and a token reads only 24 rows of 256 B per layer (docs/parallel.md's memory plan), so by default ("host") they
// are one pinned, device-mapped copy per process. "mapped": the checkpoint shards themselves, mapped shared and
// registered with CUDA (cuda/host_file_mapping.h): no copy, and the page cache is shared by every rank process of
// the machine (one copy per machine under `deepinfer launch`); synthetic tables (no file) fall back to "host".
// "device": device memory.
enum class EngramTables { Host, Mapped, Device };
EngramTables engram_tables() {
  const char* v = std::getenv("DEEPINFER_ENGRAM_TABLES");
  const std::string s = v ? v : "host";
  if (s == "host") return EngramTables::Host;
  if (s == "mapped") return EngramTables::Mapped;
  DI_CHECK(s == "device", "DEEPINFER_ENGRAM_TABLES: 'host', 'mapped' or 'device', got '" + s + "'");
  return EngramTables::Device;
}
bool engram_tables_on_host() { return engram_tables() != EngramTables::Device; }

// An Engram table in pinned, device-mapped host memory, one copy per `key` in the process, shared by every model that
// holds it: the ranks of a group run as threads (benchmark, tests, the data-parallel engine) would otherwise pin one
// ~100 GB copy of each of V4.1-Flash's tables apiece. `fill(dst, begin, end)` writes bytes [begin, end) of the table;
// several threads fill disjoint ranges. Pinned memory from cudaHostAlloc is portable across the devices under unified
// addressing, so one mapping serves every rank's GPU.
std::shared_ptr<const cuda::MappedHostBuffer> shared_host_table(
    const std::string& key, size_t bytes, const std::function<void(uint8_t*, size_t, size_t)>& fill) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<const cuda::MappedHostBuffer>> tables;
  std::lock_guard<std::mutex> lock(mu);  // held while filling: the other ranks wait for the same table
  std::weak_ptr<const cuda::MappedHostBuffer>& cached = tables[key];
  if (auto t = cached.lock()) {
    DI_CHECK(t->bytes() == bytes, "v4.1 gpu model: Engram table '" + key + "' has " + std::to_string(t->bytes()) +
                                      " bytes in this process, " + std::to_string(bytes) + " requested");
    return t;
  }
  auto t = std::make_shared<cuda::MappedHostBuffer>(bytes);
  auto* dst = static_cast<uint8_t*>(t->host_ptr());
  const size_t parts = 8, part = (bytes + parts - 1) / parts;
  std::vector<std::thread> fillers;
  for (size_t i = 0; i < parts && i * part < bytes; ++i)
    fillers.emplace_back([&, i] { fill(dst, i * part, std::min(bytes, (i + 1) * part)); });
  for (auto& f : fillers) f.join();
  cached = t;
  return t;
}

// A table's device view through shared_host_table, kept alive by the weights.
const uint8_t* hold_host_table(V41GpuWeights& w, std::shared_ptr<const cuda::MappedHostBuffer> table) {
  const auto* view = static_cast<const uint8_t*>(table->device_ptr());
  w.shared_engram_tables.push_back(std::move(table));
  return view;
}

// model-spec §5: the table is F8_E4M3 [rows, dim] with F8_E8M0 scales [rows, dim / 32]; both are kept as they are
// (the kernel reads the codes and scales directly).
void upload_engram_table(V41GpuWeights& w, const Checkpoint& ck, const std::string& prefix, cuda::EngramGpu& e) {
  const TensorEntry& codes = ck.expect(prefix + "weight", DType::F8_E4M3, {e.table_rows, e.dim});
  const TensorEntry& scales = ck.expect(prefix + "scale", DType::F8_E8M0, {e.table_rows, e.dim / 32});
  if (engram_tables() == EngramTables::Mapped) {
    // The shard's bytes in place: the tensor is at its file offset in the process's one registered mapping.
    auto in_place = [&w](const TensorEntry& t) {
      std::shared_ptr<const cuda::HostFileMapping> m = cuda::shared_host_file_mapping(t.path);
      const uint8_t* view = m->device_ptr() + t.file_offset;
      w.shared_engram_tables.push_back(std::move(m));
      return view;
    };
    e.table = in_place(codes);
    e.table_scale = in_place(scales);
  } else if (engram_tables_on_host()) {
    // One pinned copy per checkpoint tensor in the process (shared_host_table).
    auto copy = [](const TensorEntry& t) {
      return [&t](uint8_t* dst, size_t begin, size_t end) {
        std::memcpy(dst + begin, static_cast<const uint8_t*>(t.data) + begin, end - begin);
      };
    };
    e.table = hold_host_table(w, shared_host_table(ck.dir() + "/" + prefix + "weight", codes.nbytes, copy(codes)));
    e.table_scale =
        hold_host_table(w, shared_host_table(ck.dir() + "/" + prefix + "scale", scales.nbytes, copy(scales)));
  } else {
    e.table = w.arena.upload(static_cast<const uint8_t*>(codes.data), codes.nbytes);
    e.table_scale = w.arena.upload(static_cast<const uint8_t*>(scales.data), scales.nbytes);
  }
}

const EngramLayerHash& engram_hash_of(const V41GpuWeights& w, int layer) {
  for (const EngramLayerHash& h : w.engram_hashes)
    if (h.layer_id == layer) return h;
  throw Error("v4.1 gpu model: layer " + std::to_string(layer) + " is an Engram layer without hash constants");
}

// The decode layouts of the FP8 linears and experts the decode kernels stream (model/gpu/device_weights.h).
void pack_layer_for_decode(DeviceArena& a, V41GpuLayer& L) {
  for (cuda::Fp8Linear* w : {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_b, &L.moe.shared_w13, &L.moe.shared_w2})
    pack_fp8_for_decode(a, *w);
  if (L.indexer) pack_fp8_for_decode(a, L.indexer->wq_b);
  if (L.engram) pack_fp8_for_decode(a, L.engram->wkv);
  pack_experts_for_decode(a, L.moe.w13);
  pack_experts_for_decode(a, L.moe.w2);
  // The routed products' leftover items on the first blocks (cuda::Fp4Experts::front_items): w1|w3's 432 items at
  // batch 1 leave 36 of 132 blocks a fourth (bench/gpu/NOTES.md "Session 29", run 159: batch 1 -0.6 %, batch 8
  // -0.3 %; V4 keeps them spread: +1.2 % with them first).
  L.moe.w13.front_items = L.moe.w2.front_items = true;
}

}  // namespace

std::unique_ptr<V41GpuWeights> upload_v41_gpu_weights(const ModelConfig& c, const Checkpoint& ck, bool show_progress,
                                                      const parallel::ExpertPlacement* placement, int rank) {
  check_v41_gpu_config(c);
  auto w = std::make_unique<V41GpuWeights>();
  DeviceArena& a = w->arena;
  const int64_t H = c.hidden_size, D = c.head_dim, hc = c.hc_mult;
  const int block = kV41Block;
  upload_outer_weights(*w, ck, c);
  w->engram_hashes = derive_engram_hashes(c);
  if (!w->engram_hashes.empty()) w->engram_token_map = load_engram_token_map(c, ck.dir());
  for (const LayerPlan& plan : c.layers) {
    const std::string p = "layers." + std::to_string(plan.index) + ".";
    const std::string at = p + "attn.";
    if (show_progress)
      std::fprintf(stderr, "[load] gpu v4.1 layer %d/%d (%s, ratio %d), %.2f GB on the device so far\n",
                   plan.index + 1, c.num_layers, csa2_role_name(plan.role), plan.compress_ratio,
                   double(a.bytes()) / 1e9);
    V41GpuLayer L;
    static_cast<GpuBlockWeights&>(L) = upload_block_weights(a, ck, c, plan);
    if (plan.role == Csa2Role::Full) {
      cuda::Csa2CompressorGpu cw = compressor_shape(c, plan);
      cw.wkv = upload_linear_as_bf16(a, ck, at + "compressor.wkv", D, H, block);
      if (cw.ratio > 1) cw.wgate = upload_linear_as_bf16(a, ck, at + "compressor.wgate", D, H, block);
      cw.norm = upload_f32(a, ck, at + "compressor.norm.weight", {D});
      cw.wk = upload_linear_as_bf16(a, ck, at + "indexer.wk", cw.index_dim, D, block);
      cw.k_norm = upload_f32(a, ck, at + "indexer.k_norm.weight", {cw.index_dim});
      L.compressor = cw;
    }
    if (plan.role == Csa2Role::Full || plan.role == Csa2Role::Reindex) {
      cuda::Csa2IndexerGpu ix = index_shape(c);
      ix.wq_b = upload_fp8_linear(a, ck, at + "indexer.wq_b", int64_t(ix.heads) * ix.dim, c.q_lora_rank, block);
      ix.weights_proj = upload_linear_as_bf16(a, ck, at + "indexer.weights_proj", ix.heads, H, block);
      L.indexer = ix;
    }
    if (plan.engram) {
      cuda::EngramGpu e = engram_shape(c, engram_hash_of(*w, plan.index));
      const std::string ep = p + "engram.";
      upload_engram_table(*w, ck, ep + "embed.", e);
      e.wkv = upload_fp8_linear(a, ck, ep + "wkv", H * (hc + 1), int64_t(e.hash_heads) * e.dim, block);
      e.q_weight = upload_f32(a, ck, ep + "q_weight", {hc, H});
      e.k_weight = upload_f32(a, ck, ep + "k_weight", {hc, H});
      L.engram = e;
    }
    cuda::MoeGpu m = v41_moe_shape(c);
    const std::string fp = p + "ffn.";
    m.gate = upload_linear_as_bf16(a, ck, fp + "gate", m.experts, H, block);
    m.gate_bias = upload_f32(a, ck, fp + "gate.bias", {m.experts});
    const auto shard = layer_expert_shard(c, placement, plan.index, rank, "v4.1 gpu model");
    upload_moe_experts(a, ck, c, fp, m, shard ? &*shard : nullptr);
    cuda::moe_validate(m);
    L.moe = m;
    pack_layer_for_decode(a, L);
    w->layers.push_back(L);
  }
  if (placement) w->expert_placement = *placement;
  return w;
}

std::unique_ptr<V41GpuWeights> random_v41_gpu_weights(const ModelConfig& c, uint64_t seed,
                                                      const parallel::ExpertPlacement* placement, int rank) {
  check_v41_gpu_config(c);
  const int64_t H = c.hidden_size, D = c.head_dim, hc = c.hc_mult;
  const int block = kV41Block;
  auto weights = random_gpu_weights<V41GpuWeights>(
      c, seed,
      [&](V41GpuWeights& w, uint64_t&) {
        w.engram_hashes = derive_engram_hashes(c);
        if (w.engram_hashes.empty()) return;
        // Token t -> class t mod compressed_vocab_size: every class is used, the hash sees real n-gram structure.
        for (int64_t t = 0; t < c.vocab_size; ++t)
          w.engram_token_map.ids.push_back(int32_t(t % std::max<int64_t>(1, c.engram_compressed_vocab_size)));
        w.engram_token_map.pad_id =
            w.engram_token_map.ids[size_t(std::clamp<int64_t>(c.engram_pad_token_id, 0, c.vocab_size - 1))];
      },
      [&](V41GpuWeights& w, const LayerPlan& plan, V41GpuLayer& L, uint64_t& s) {
        DeviceArena& a = w.arena;
        if (plan.role == Csa2Role::Full) {
          cuda::Csa2CompressorGpu cw = compressor_shape(c, plan);
          const float std_h = float(1.0 / std::sqrt(double(H))), std_d = float(1.0 / std::sqrt(double(D)));
          cw.wkv = random_bf16(a, size_t(D * H), 0.0f, std_h, ++s);
          if (cw.ratio > 1) cw.wgate = random_bf16(a, size_t(D * H), 0.0f, std_h, ++s);
          cw.norm = random_f32(a, size_t(D), 1.0f, 0.1f, ++s);
          cw.wk = random_bf16(a, size_t(cw.index_dim) * size_t(D), 0.0f, std_d, ++s);
          cw.k_norm = random_f32(a, size_t(cw.index_dim), 1.0f, 0.1f, ++s);
          L.compressor = cw;
        }
        if (plan.role == Csa2Role::Full || plan.role == Csa2Role::Reindex) {
          cuda::Csa2IndexerGpu ix = index_shape(c);
          ix.wq_b = random_fp8_linear(a, int64_t(ix.heads) * ix.dim, c.q_lora_rank, block, ++s);
          ix.weights_proj =
              random_bf16(a, size_t(ix.heads) * size_t(H), 0.0f, float(1.0 / std::sqrt(double(H))), ++s);
          L.indexer = ix;
        }
        if (plan.engram) {
          cuda::EngramGpu e = engram_shape(c, engram_hash_of(w, plan.index));
          // A constant table (code 1.0, unit scales): random e4m3 bytes would include NaN codes, and the benchmark
          // reads the rows for their traffic, not their values. Where the checkpoint's tables would go.
          const size_t code_bytes = size_t(e.table_rows) * size_t(e.dim), scale_bytes = code_bytes / 32;
          const uint8_t one = 0x38, unit = 127;  // e4m3 1.0, e8m0 2^0
          if (engram_tables_on_host()) {
            auto constant = [&](size_t bytes, uint8_t byte) {
              return hold_host_table(w, shared_host_table("constant " + std::to_string(bytes) + " x " +
                                                              std::to_string(int(byte)),
                                                          bytes, [byte](uint8_t* dst, size_t begin, size_t end) {
                                                            std::memset(dst + begin, byte, end - begin);
                                                          }));
            };
            e.table = constant(code_bytes, one);
            e.table_scale = constant(scale_bytes, unit);
          } else {
            uint8_t* codes = a.alloc<uint8_t>(code_bytes);
            uint8_t* scales = a.alloc<uint8_t>(scale_bytes);
            DI_CUDA_CHECK(cudaMemset(codes, one, code_bytes));
            DI_CUDA_CHECK(cudaMemset(scales, unit, scale_bytes));
            e.table = codes;
            e.table_scale = scales;
          }
          e.wkv = random_fp8_linear(a, H * (hc + 1), int64_t(e.hash_heads) * e.dim, block, ++s);
          e.q_weight = random_f32(a, size_t(hc * H), 1.0f, 0.1f, ++s);
          e.k_weight = random_f32(a, size_t(hc * H), 1.0f, 0.1f, ++s);
          L.engram = e;
        }
        cuda::MoeGpu m = v41_moe_shape(c);
        m.gate = random_bf16(a, size_t(m.experts * H), 0.0f, float(1.0 / std::sqrt(double(H))), ++s);
        m.gate_bias = random_f32(a, size_t(m.experts), 0.0f, 0.1f, ++s);
        const auto shard = layer_expert_shard(c, placement, plan.index, rank, "v4.1 gpu model");
        random_moe_experts(a, c, m, s, shard ? &*shard : nullptr);
        cuda::moe_validate(m);
        L.moe = m;
        pack_layer_for_decode(a, L);
      });
  if (placement) weights->expert_placement = *placement;
  return weights;
}

// ------------------------------------------------------------------------------------------------ state pools

struct V41GpuModel::Pools {
  struct Layer : LayerCaches {  // kv and index_keys on Full layers; ratio_class: the page class of the layer's group
    cuda::Csa2CompressorGpuState compressor{};
  };
  std::vector<Layer> layers;
};

// Per-step buffers, sized for max_rows: f32 is [rows, q_lora] (wq_a's output before its norm), module_ws the
// compressor / indexer / Engram / MoE workspace.
struct V41GpuModel::Scratch : StepScratch {
  float* mix[2] = {nullptr, nullptr};  // [rows, (2 + hc) * hc] of the even / odd mHC sites
  float* one_hot = nullptr;      // [max_rows, (2 + hc) * hc]: pre = one-hot stream 0 (the first site's lag)
  int32_t* topk = nullptr;       // [rows, index_topk]: the published top-k (pool rows of the group's owner)
  uint8_t* candidate_flags = nullptr;  // [rows, candidate stride]
  int candidate_stride = 0;
  int64_t* engram_rows = nullptr;  // [engram layers, rows, hash heads]
  // Bounded replay only: the kept rows' arrays [5, max_rows] then the window base per slot; a staging buffer for
  // the row moves; the kept rows' logits before they go back to their rows.
  int32_t* kept = nullptr;
  const int32_t* window_base = nullptr;
  uint8_t* gather = nullptr;
  float* kept_logits = nullptr;
};

V41GpuModel::V41GpuModel(ModelConfig config, std::unique_ptr<V41GpuWeights> weights, const StepCapacity& capacity,
                         const PrefillReplayOptions& replay, parallel::Collectives* expert_group)
    : GpuStepModelBase(std::move(config), std::move(weights), capacity, "v4.1 gpu model", expert_group) {
  check_v41_gpu_config(config_);
  // Two blocks per SM for the branch GEMVs: V4.1's shared expert (288 / 320 16-row tiles) beside the routing and the
  // routed w1|w3 (bench/gpu/NOTES.md "Session 28", run 157: batch 1 -1.5 %, batch 8 -0.5 %; V4 keeps 1).
  branch_blocks_per_sm_ = 2;
  decoder_begin_ = bounded_replay_first_layer(config_, replay);
  if (decoder_begin_ >= 0) keep_tokens_ = replay.keep_tokens;
  const ModelConfig& c = config_;
  check_layer_count();
  check_expert_shards("random_v41_gpu_weights / upload_v41_gpu_weights");
  const cudaStream_t st = stream();
  const int S = capacity_.slots, R = capacity_.max_rows, W = c.sliding_window, hc = c.hc_mult;
  const int64_t H = c.hidden_size;
  DeviceArena& a = state_arena_;

  pools_ = std::make_unique<Pools>();
  // The KV row formats of every layer's window ring and compressed KV, fixed for the model's life (the step's
  // writers and the attention follow them): DEEPINFER_KV_FORMAT=fp8 (cuda::kv_format()) gives model-spec §6's
  // packed records, MXFP8 window rows and FP4 entries (layers/attention/kv_record.h kvrec41); bf16 (default) their
  // exact bf16 values.
  if (cuda::kv_format() != cuda::KvFormat::Bf16) {
    window_format_ = cuda::KvFormat::Mxfp8;
    entry_format_ = cuda::KvFormat::Fp4;
    DI_CHECK(c.head_dim == cuda::kvrec41::kDim, "v4.1 gpu model: the packed KV records hold rows of " +
                                                    std::to_string(cuda::kvrec41::kDim) + " channels; head_dim " +
                                                    std::to_string(c.head_dim));
  }
  bool any_csa2 = false;
  int candidate_entries = 0;  // entries visible at most to a row of the candidate source's group
  size_t module_ws = moe_workspace_bytes(), compressor_ws = 0;
  for (const LayerPlan& plan : c.layers) {
    const V41GpuLayer& L = weights_->layers[size_t(plan.index)];
    Pools::Layer pl;
    allocate_window(pl, window_format_, entry_format_);
    if (plan.attention == AttentionKind::CSA2) {
      any_csa2 = true;
      const int max_entries = int(ceil_div(capacity_.max_context, plan.compress_ratio));
      if (plan.role == Csa2Role::Full) {
        allocate_paged(pl, plan.compress_ratio, true);
        const size_t open = cuda::csa2_compressor_state_floats(*L.compressor, S);
        if (open > 0) {
          pl.compressor.open_kv = a.alloc<float>(open);
          pl.compressor.open_gate = a.alloc<float>(open);
        }
        compressor_ws = std::max(compressor_ws, cuda::csa2_compressor_workspace_bytes(R, *L.compressor));
      } else {
        pl.ratio_class = pools_->layers[size_t(plan.kv_source)].ratio_class;
      }
      if (L.indexer) module_ws = std::max(module_ws, cuda::csa2_indexer_workspace_bytes(R, max_entries));
      if (plan.candidate_source) candidate_entries = std::max(candidate_entries, max_entries);
    }
    if (L.engram) module_ws = std::max(module_ws, cuda::engram_workspace_bytes(R, *L.engram));
    pools_->layers.push_back(pl);
  }

  scratch_ = std::make_unique<Scratch>();
  Scratch& s = *scratch_;
  rows_.allocate_rows(a);
  s.point_rows(rows_.tokens(), R);
  allocate_scratch(s, c.q_lora_rank);  // the weight blocks are kV41Block (check_v41_gpu_config)
  const int64_t mix_width = int64_t(2 + hc) * hc;
  for (float*& m : s.mix) m = a.alloc<float>(size_t(R * mix_width));
  std::vector<float> one_hot(size_t(R * mix_width), 0.0f);
  for (int r = 0; r < R; ++r) one_hot[size_t(r * mix_width)] = 1.0f;
  s.one_hot = a.upload(one_hot.data(), one_hot.size());
  const int topk = any_csa2 ? c.index_topk : 0;
  if (any_csa2) {
    s.topk = a.alloc<int32_t>(size_t(R) * topk);
    allocate_index_scratch(s);
  }
  if (candidate_entries > 0) {
    DI_CHECK(c.candidate_block_size > 0 && c.candidate_topk_blocks > 0,
             "v4.1 gpu model: the candidate source needs candidate_block_size and candidate_topk_blocks > 0");
    s.candidate_stride = int(ceil_div(candidate_entries, c.candidate_block_size));
    s.candidate_flags = a.alloc<uint8_t>(size_t(R) * s.candidate_stride);
  }
  s.attn_ws = a.alloc<uint8_t>(cuda::sink_attention_workspace_bytes(R, W, topk));
  s.module_ws = a.alloc<uint8_t>(std::max(module_ws, compressor_ws));
  s.compressor_ws = a.alloc<uint8_t>(std::max<size_t>(compressor_ws, 1));
  allocate_group_rows();
  if (!weights_->engram_hashes.empty()) {
    const size_t ids = weights_->engram_hashes.size() * size_t(R) *
                       size_t((c.engram_max_ngram_size - 1) * c.engram_n_heads);
    s.engram_rows = a.alloc<int64_t>(ids);
    engram_staging_.allocate(sizeof(int64_t) * ids, s.engram_rows);
    engram_history_.assign(size_t(S), {});
  }
  if (keep_tokens_ > 0) {
    const size_t kept = size_t(StepPlanner::kRowArrays) * R + size_t(S);
    s.kept = a.alloc<int32_t>(kept);
    s.window_base = s.kept + size_t(StepPlanner::kRowArrays) * R;
    kept_staging_.allocate(sizeof(int32_t) * kept, s.kept);
    window_base_.assign(size_t(S), 0);
    // The largest row to move: the streams, the lagged mix, the top-k, the candidate flags.
    const size_t row_bytes = std::max({sizeof(bf16) * size_t(hc) * size_t(H), sizeof(float) * size_t(mix_width),
                                       sizeof(int32_t) * size_t(topk), size_t(s.candidate_stride)});
    s.gather = a.alloc<uint8_t>(row_bytes * size_t(R));
    s.kept_logits = a.alloc<float>(size_t(R) * c.vocab_size);
  }

  for (const Pools::Layer& pl : pools_->layers) zero_caches(pl, st);
  if (s.kept) DI_CUDA_CHECK(cudaMemsetAsync(s.kept, 0, sizeof(int32_t) * (size_t(StepPlanner::kRowArrays) * R + S), st));
  DI_CUDA_CHECK(cudaStreamSynchronize(st));
}

V41GpuModel::~V41GpuModel() { cudaStreamSynchronize(stream()); }

const int32_t* V41GpuModel::sample_greedy(int rows) { return greedy_tokens(*scratch_, rows); }

void V41GpuModel::fill_index_keys_random(uint64_t seed) {
  for (const Pools::Layer& pl : pools_->layers) randomize_index_keys(pl, seed++, stream());
}

void V41GpuModel::assume_length(int slot, int32_t length) {
  rows_.assume_length(slot, length);
  if (!engram_history_.empty()) engram_history_[size_t(slot)].clear();
  if (!window_base_.empty()) window_base_[size_t(slot)] = 0;
}

void V41GpuModel::prepare(std::span<const StepRow> rows, int rows_per_rank) {
  begin_group_step(rows.size(), rows_per_rank);
  if (rows.empty()) {
    kept_rows_ = 0;
    return;
  }
  if (!weights_->engram_hashes.empty())
    for (size_t i = 0; i < rows.size(); ++i)
      DI_CHECK(rows[i].token >= 0, "v4.1 gpu model: row " + std::to_string(i) +
                                       " names a device-sampled token; the Engram hash needs every token on the host");
  rows_.plan(rows, stream());
  if (!weights_->engram_hashes.empty()) stage_engram_rows(rows);
  if (keep_tokens_ > 0) stage_kept_rows(rows);
}

// model-spec §9 per run of a slot's rows (the planner validated them): more than keep_tokens rows keep the last
// keep_tokens for the decoder layers, whose rings restart at the first kept position; position 0 resets the base.
// The kept rows' arrays follow the planner's layout, chunk_first / chunk_rows describing the kept run.
void V41GpuModel::stage_kept_rows(std::span<const StepRow> rows) {
  const int n = int(rows.size());
  const size_t R = size_t(capacity_.max_rows);
  auto* h = static_cast<int32_t*>(kept_staging_.acquire(&kept_wait_s_));
  kept_runs_.clear();
  kept_rows_ = 0;
  for (int r = 0; r < n;) {
    const int slot = rows[size_t(r)].slot;
    int end = r;
    while (end < n && rows[size_t(end)].slot == slot) ++end;
    const int cut = std::max(0, end - r - keep_tokens_);
    if (rows[size_t(r)].position == 0) window_base_[size_t(slot)] = 0;
    if (cut > 0) window_base_[size_t(slot)] = rows[size_t(r + cut)].position;
    const KeptRun run{r + cut, kept_rows_, end - r - cut};
    for (int i = 0; i < run.count; ++i) {
      const StepRow& row = rows[size_t(run.from + i)];
      const size_t j = size_t(run.to + i);
      h[StepPlanner::kTokens * R + j] = row.token;
      h[StepPlanner::kSlots * R + j] = row.slot;
      h[StepPlanner::kPositions * R + j] = row.position;
      h[StepPlanner::kChunkFirst * R + j] = run.to;
      h[StepPlanner::kChunkRows * R + j] = run.count;
    }
    kept_runs_.push_back(run);
    kept_rows_ += run.count;
    r = end;
  }
  std::copy(window_base_.begin(), window_base_.end(), h + StepPlanner::kRowArrays * R);
  kept_staging_.upload(sizeof(int32_t) * (StepPlanner::kRowArrays * R + window_base_.size()), stream());
}

// model-spec §4 "Engram", §6: per row, the slot's n-gram history advances by the token's compressed id, and each
// Engram layer's row ids come from the history (newest first); layer li's ids of the step are rows
// [li * n, (li + 1) * n) of the staged array, so a graph of n rows always reads the same offsets.
void V41GpuModel::stage_engram_rows(std::span<const StepRow> rows) {
  const ModelConfig& c = config_;
  const int n = int(rows.size()), order = c.engram_max_ngram_size, heads = c.engram_n_heads;
  const size_t per_row = size_t(order - 1) * size_t(heads);
  auto* ids = static_cast<int64_t*>(engram_staging_.acquire(&engram_wait_s_));
  std::vector<int64_t> newest_first(static_cast<size_t>(order));
  for (int r = 0; r < n; ++r) {
    std::vector<int64_t>& history = engram_history_[size_t(rows[size_t(r)].slot)];
    if (rows[size_t(r)].position == 0) history.clear();
    history.push_back(weights_->engram_token_map.ids[size_t(rows[size_t(r)].token)]);
    int len = 0;
    for (auto it = history.rbegin(); it != history.rend() && len < order; ++it) newest_first[size_t(len++)] = *it;
    for (size_t li = 0; li < weights_->engram_hashes.size(); ++li)
      engram_row_ids(weights_->engram_hashes[li], newest_first.data(), len, order, heads,
                     weights_->engram_token_map.pad_id, ids + (li * size_t(n) + size_t(r)) * per_row);
    if (int(history.size()) > order - 1) history.erase(history.begin());
  }
  engram_staging_.upload(sizeof(int64_t) * weights_->engram_hashes.size() * size_t(n) * per_row, stream());
}

float* V41GpuModel::step(std::span<const StepRow> rows) { return step(rows, capacity_.max_rows); }

float* V41GpuModel::step_graph(std::span<const StepRow> rows) { return step_graph(rows, capacity_.max_rows); }

float* V41GpuModel::step(std::span<const StepRow> rows, int rows_per_rank) {
  prepare(rows, rows_per_rank);
  phase("");  // opens the step's marks (timing mode only)
  enqueue(int(rows.size()));
  return rows.empty() ? nullptr : scratch_->logits;
}

float* V41GpuModel::step_graph(std::span<const StepRow> rows, int rows_per_rank) {
  prepare(rows, rows_per_rank);
  DI_CHECK(keep_tokens_ == 0 || kept_rows_ == int(rows.size()),
           "v4.1 gpu model: a step that cuts a prefill run (bounded replay) runs eagerly, not from a graph");
  step_graphs().launch(int(rows.size()), stream(), timing_, [this](int n) { enqueue(n); });
  return rows.empty() ? nullptr : scratch_->logits;
}

const float* V41GpuModel::previous_mix(int site) const {
  return site == 0 ? scratch_->one_hot : scratch_->mix[(site + 1) % 2];
}

namespace {
EnvSwitch<bool> g_site_mix_branch{"DEEPINFER_V41_MIX_BRANCH", [](const char* v) { return !env_equals(v, "0"); }};
}  // namespace

bool v41_site_mix_branch() { return g_site_mix_branch.get(); }
void set_v41_site_mix_branch(bool on) { g_site_mix_branch.set(on); }

cudaStream_t V41GpuModel::begin_site_mix() {
  if (!v41_site_mix_branch()) return stream();
  streams_.fork(StepStreams::Branch::Mix);
  return streams_.stream(StepStreams::Branch::Mix);
}

void V41GpuModel::end_site_mix() {
  if (v41_site_mix_branch()) streams_.join(StepStreams::Branch::Mix);
}

void V41GpuModel::enter_site(int site, int q0, int rows, const cuda::HcSite& params, const bf16* norm_weight, bf16* u,
                             uint8_t* uq, float* us) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const int hc = c.hc_mult;
  const int64_t H = c.hidden_size, MIX = int64_t(2 + hc) * hc;
  bf16* X = s.X + int64_t(q0) * hc * H;
  float* mix = s.mix[site % 2] + int64_t(q0) * MIX;
  const float* pre = previous_mix(site) + int64_t(q0) * MIX;
  const PendingExpand p = take_expand(X, pre, rows);
  cuda::hc_lagged_site_pre(X, p.y, pre, rows, hc, H, norm_weight, c.rms_norm_eps, u, uq, us, kV41Block, stream(),
                           &p.y_parts);
  // The mix reads the expanded streams: its fork comes after the entry (the entry does not read this site's mix).
  cuda::hc_site_mix(X, rows, hc, H, params, c.rms_norm_eps, c.hc_eps, c.hc_sinkhorn_iters, mix, s.mix_ws,
                    begin_site_mix());
}

void V41GpuModel::leave_site(bf16* X, const bf16* y, const float* mix, int rows, const cuda::MoeCombineParts& y_parts) {
  flush_expand();
  pending_expand_ = {X, y, mix, rows, y_parts};
}

V41GpuModel::PendingExpand V41GpuModel::take_expand(const bf16* X, const float* mix, int rows) {
  const PendingExpand p = pending_expand_;
  if (p.rows > 0 && p.X == X && p.mix == mix && p.rows == rows) {
    pending_expand_ = {};
    return p;
  }
  flush_expand();
  return {};
}

void V41GpuModel::flush_expand() {
  if (pending_expand_.rows == 0) return;
  const PendingExpand p = std::exchange(pending_expand_, PendingExpand{});
  const int64_t H = config_.hidden_size;
  if (p.y_parts.set())  // the MoE's output is still its parts: y written first
    cuda::moe_combine(p.y_parts, p.rows, H, const_cast<bf16*>(p.y), stream(), false);
  cuda::hc_expand(p.X, p.y, p.mix, p.rows, config_.hc_mult, H, p.X, stream());
}

void V41GpuModel::enqueue(int n) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  // The rows whose query side and FFN this rank computes: a context-parallel step's share, else all of them.
  const int q0 = cp_group_ ? q_first_ : 0;
  if (n > 0) cuda::resolve_tokens(s.tokens, s.sampled, n, stream());
  // Expert parallelism: every rank's row count (the MoE's collectives pad to M). After a bounded-replay cut the
  // decoder layers' MoE takes only the kept rows while the shared count still names all n: the rows past the kept
  // ones are zero padding whose pairs the group computes for nothing (the combine reads only the kept rows), and no
  // rank needs another collective for its own cut. Context parallelism: the share's rows (no cut there).
  share_group_rows(s.tokens + q0, cp_group_ ? q_rows_ : n);
  if (n == 0) {
    join_group_moe_layers(s);
    return;
  }
  pending_expand_ = {};  // none outside a step (the head takes the last); a step that threw may have left one
  cuda::embed_streams(weights_->embed, s.tokens, n, c.hc_mult, c.hidden_size, s.X, stream());
  phase("embed");
  const bool cut = keep_tokens_ > 0 && kept_rows_ < n;
  const int all = n;
  for (int l = 0; l < c.num_layers; ++l) {
    if (cut && l == decoder_begin_) {
      compact_kept_rows();
      n = kept_rows_;
    }
    const int qn = cp_group_ ? q_rows_ : n;
    attention(l, n, q0, qn);
    ffn(l, q0, qn);
    if (cp_group_) cp_gather_layer();
  }
  head(n, cut ? s.kept_logits : s.logits);
  if (cut) {
    expand_kept_logits(all);
    s.point_rows(rows_.tokens(), capacity_.max_rows);
  }
  phase("head");
}

void V41GpuModel::compact_kept_rows() {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const cudaStream_t st = stream();
  flush_expand();  // the moves read the expanded streams
  auto compact = [&](void* buffer, size_t row_bytes) {
    auto* b = static_cast<uint8_t*>(buffer);
    for (const KeptRun& run : kept_runs_)
      DI_CUDA_CHECK(cudaMemcpyAsync(s.gather + size_t(run.to) * row_bytes, b + size_t(run.from) * row_bytes,
                                    size_t(run.count) * row_bytes, cudaMemcpyDeviceToDevice, st));
    DI_CUDA_CHECK(cudaMemcpyAsync(b, s.gather, size_t(kept_rows_) * row_bytes, cudaMemcpyDeviceToDevice, st));
  };
  compact(s.X, sizeof(bf16) * size_t(c.hc_mult) * size_t(c.hidden_size));
  // The first decoder site (2 * decoder_begin_) collapses with the candidate source's FFN mix (previous_mix).
  compact(s.mix[1], sizeof(float) * size_t((2 + c.hc_mult) * c.hc_mult));
  if (s.topk) compact(s.topk, sizeof(int32_t) * size_t(c.index_topk));
  if (s.candidate_flags) compact(s.candidate_flags, size_t(s.candidate_stride));
  s.point_rows(s.kept, capacity_.max_rows);
}

void V41GpuModel::expand_kept_logits(int rows) {
  Scratch& s = *scratch_;
  const size_t V = size_t(config_.vocab_size);
  const cudaStream_t st = stream();
  // All-ones bytes are a NaN in every float: the cut rows' logits, as the CPU's quiet NaN rows.
  DI_CUDA_CHECK(cudaMemsetAsync(s.logits, 0xFF, sizeof(float) * size_t(rows) * V, st));
  for (const KeptRun& run : kept_runs_)
    DI_CUDA_CHECK(cudaMemcpyAsync(s.logits + size_t(run.from) * V, s.kept_logits + size_t(run.to) * V,
                                  sizeof(float) * size_t(run.count) * V, cudaMemcpyDeviceToDevice, st));
}

// model-spec §4: Engram (on its layers), the attention mHC site with the lagged collapse, then the attention over
// the window and, on CSA2 layers, the group's shared compressed KV with the group's top-k.
void V41GpuModel::attention(int l, int n, int q0, int qn) {
  const ModelConfig& c = config_;
  const V41GpuLayer& L = weights_->layers[size_t(l)];
  const LayerPlan& plan = c.layers[size_t(l)];
  Pools::Layer& P = pools_->layers[size_t(l)];
  Scratch& s = *scratch_;
  const int hc = c.hc_mult, heads = c.num_heads, D = c.head_dim, W = c.sliding_window, S = capacity_.slots;
  const int64_t H = c.hidden_size, HD = int64_t(heads) * D;
  const float eps = c.rms_norm_eps;
  const cudaStream_t st = stream();
  // Row q0 of a per-row buffer of `width` elements a row (the query side's rows; q0 = 0 outside context parallelism).
  auto at = [q0](auto* p, int64_t width) { return p + int64_t(q0) * width; };
  const int64_t QL = c.q_lora_rank, MIX = int64_t(2 + hc) * hc;

  if (L.engram) {
    size_t li = 0;
    while (weights_->engram_hashes[li].layer_id != l) ++li;
    const int64_t* ids = s.engram_rows + li * size_t(n) * size_t(L.engram->hash_heads);
    flush_expand();  // Engram adds into the expanded streams
    cuda::engram_apply(s.X, ids, n, *L.engram, eps, s.module_ws, st);
    phase("engram");
  }

  // Single-pass mHC (model-spec §4), enter_site: the previous FFN's deferred expand, the collapse with the previous
  // site's pre, the attention norm and the FP8 codes of the normed row that wkv and wq_a read (one launch), then this
  // site's mix (on the mix branch: begin_site_mix).
  const int site = 2 * l;
  float* mix = s.mix[site % 2];
  enter_site(site, 0, n, L.hc_attn, L.attn_norm, s.u, s.uq, s.us);
  phase("attn.mhc_norm");

  // The window KV row and the compressor read only u: the side stream, as V4 (V4GpuModel::attention).
  const cudaStream_t sd = streams_.stream(StepStreams::Branch::Side);
  streams_.fork(StepStreams::Branch::Side);
  // kv = kv_norm(wkv . u), RoPE, MXFP8 over all dims (model-spec §4), into the step's scratch rows of the window
  // (bf16 values or MXFP8 records: window_format_).
  cuda::fp8_gemm(s.uq, s.us, n, L.wkv, s.kv32, cuda::OutType::F32, sd);
  void* const scratch_rows =
      static_cast<uint8_t*>(P.window_rows()) + int64_t(S) * W * cuda::kv_row_bytes(window_format_, D);
  if (cuda::fused_attention_steps()) {  // the same three steps in one launch (issue 4)
    const cuda::KvCacheRows cache{scratch_rows, cuda::kV41WindowKvBlock, D, window_format_};  // MXFP8, every channel
    cuda::rms_norm_f32_rope(s.kv32, L.kv_norm, s.kv, n, D, eps, 1, s.positions, L.inv_freq, c.rope_dim, cache, sd);
  } else {
    cuda::rms_norm_f32(s.kv32, L.kv_norm, s.kv, n, D, eps, sd);
    cuda::rope(s.kv, D, s.positions, L.inv_freq, n, 1, D, c.rope_dim, false, sd);
    cuda::mxfp8_window_fake_quant(s.kv, n, D, scratch_rows, sd, window_format_);
  }
  cuda::window_rows(s.slots, s.positions, s.chunk_first, n, W, S, s.window_list, sd);
  if (keep_tokens_ > 0 && l >= decoder_begin_)
    cuda::cut_window_rows(s.window_list, s.slots, s.positions, s.window_base, n, W, sd);
  const bool csa2 = plan.attention == AttentionKind::CSA2;
  const Pools::Layer* owner = csa2 ? &pools_->layers[size_t(plan.kv_source)] : nullptr;
  const int32_t* table = csa2 ? rows_.table(P.ratio_class) : nullptr;
  const int max_pages = csa2 ? rows_.max_pages(P.ratio_class) : 0;
  if (L.compressor) {  // on the side branch after the KV row, or on its own (compressor_branch())
    const CompressorPlace place = begin_compressor(s);
    const cuda::PagedPool kv_pool{P.kv, table, max_pages, capacity_.page_size, D, P.kv_records};
    const cuda::PagedPool key_pool{P.index_keys, table, max_pages, capacity_.page_size, c.index_head_dim};
    const cuda::Csa2EntryFinish finish{L.inv_freq, c.rope_dim, eps, entry_format_};
    cuda::csa2_compressor_push(s.u, s.slots, s.positions, n, *L.compressor, P.compressor, finish, kv_pool, key_pool,
                               place.workspace, place.blas, place.stream);
  }

  // The indexer's query (CSA2 index sources), on the main stream where index_query_place() says.
  auto index_query = [&] {
    const cuda::Csa2IndexerGpu& ix = *L.indexer;
    const int64_t IQ = int64_t(ix.heads) * ix.dim;
    cuda::csa2_indexer_query(at(s.qrq, QL), at(s.qrs, QL / kV41Block), c.q_lora_rank, at(s.u, H),
                             at(s.positions, 1), qn, ix, L.inv_freq, c.rope_dim, at(s.index_q, IQ),
                             at(s.index_q_fp4, IQ), at(s.index_w, ix.heads), index_query_blas(), st);
  };

  // q = wq_b . q_norm(wq_a . u): W8A8 GEMMs, the norm on the fp32 output; no per-head q norm (model-spec §4).
  const bool wq_b_on_branch = qn > 0 && L.indexer && index_query_place() == IndexQueryPlace::First;
  if (qn > 0) {
    cuda::fp8_gemm(at(s.uq, H), at(s.us, H / kV41Block), qn, L.wq_a, at(s.f32, QL), cuda::OutType::F32, st);
    cuda::rms_norm_f32_quantize(at(s.f32, QL), L.q_norm, nullptr, at(s.qrq, QL), at(s.qrs, QL / kV41Block), qn,
                                c.q_lora_rank, eps, kV41Block, st);
    // The query's RoPE (model-spec §2) in wq_b's own launch where fp8_gemm_rope can (decode v8's stream kernel,
    // DEEPINFER_Q_ROPE_EPILOGUE), else rope() after it; on the main stream, or on the query branch
    // (IndexQueryPlace::First).
    const cudaStream_t qs = wq_b_on_branch ? fork_query_branch() : st;
    const cuda::RopeEpilogue q_rope{at(s.positions, 1), L.inv_freq, D, c.rope_dim};
    // On the branch, its grid may leave SM room for the other branches' kernels (branch_grid()).
    const bool q_rotated = cuda::fp8_gemm_rope(at(s.qrq, QL), at(s.qrs, QL / kV41Block), qn, L.wq_b, at(s.q, HD),
                                               q_rope, qs, wq_b_on_branch ? branch_grid(qn) : cuda::StreamGrid{});
    if (!q_rotated) cuda::rope(at(s.q, HD), HD, at(s.positions, 1), L.inv_freq, qn, heads, D, c.rope_dim, false, qs);
    if (wq_b_on_branch) index_query();
  }
  if (qn > 0 && L.indexer && index_query_place() == IndexQueryPlace::BeforeJoin) index_query();
  streams_.join(StepStreams::Branch::Side);
  if (L.compressor) join_compressor();  // the keys the select reads and the KV the attention reads
  phase("attn.q_kv_compressor");

  cuda::KvRows window{P.window_rows(), at(s.window_list, W), W, window_format_};
  cuda::KvRows compressed{};
  if (qn > 0 && L.indexer) {
    // model-spec §4 "Indexer": the owner's running key cache (the corrected reference behaviour); the candidate
    // source publishes the candidate blocks, index sources after it select inside them.
    const cuda::Csa2IndexerGpu& ix = *L.indexer;
    const cuda::PagedPool keys{owner->index_keys, table, max_pages, capacity_.page_size, ix.dim};
    const int max_entries = int(ceil_div(capacity_.max_context, plan.compress_ratio));
    cuda::Csa2Selection selection = cuda::Csa2Selection::TopK;
    if (plan.candidate_source)
      selection = cuda::Csa2Selection::CandidateSource;
    else if (c.candidate_source_layer_id >= 0 && l > c.candidate_source_layer_id)
      selection = cuda::Csa2Selection::Reindex;
    const cuda::CandidateBlocks candidates{s.candidate_flags ? at(s.candidate_flags, s.candidate_stride) : nullptr,
                                           s.candidate_stride, c.candidate_block_size, c.candidate_topk_blocks};
    const int64_t IQ = int64_t(ix.heads) * ix.dim;
    cuda::csa2_indexer_select(at(s.index_q_fp4, IQ), at(s.index_w, ix.heads), at(s.slots, 1), at(s.positions, 1),
                              qn, ix, plan.compress_ratio, keys, max_entries, selection, candidates,
                              at(s.topk, c.index_topk), s.module_ws, st);
  }
  // Reuse layers read the top-k their group's last index source published (check_v41_gpu_config).
  if (csa2)
    compressed =
        cuda::KvRows{owner->kv_rows(), s.topk ? at(s.topk, c.index_topk) : nullptr, c.index_topk, entry_format_};
  phase("attn.index");

  // Then the window commit, and the output de-rotated by the query position (V = K carries RoPE, model-spec §2).
  const cuda::AttentionEpilogue epilogue{P.window_rows(), s.slots, s.positions, s.chunk_first, s.chunk_rows, n, W, S,
                                         D, at(s.o, HD), at(s.positions, 1), qn, heads, c.rope_dim, L.inv_freq,
                                         window_format_};
  if (wq_b_on_branch) join_query_branch();  // the query the attention reads
  if (qn > 0)
    cuda::sink_attention_decode_committed(at(s.q, HD), qn, window, compressed, L.attn_sink,
                                          float(1.0 / std::sqrt(double(D))), s.attn_ws, epilogue, st);
  else
    cuda::commit_window_and_derotate(epilogue, st);
  if (qn == 0) {  // a context-parallel rank without query rows in this step
    end_site_mix();
    return;
  }
  phase("attn.core");

  const int64_t Z = int64_t(c.o_groups) * c.o_lora_rank;
  cuda::w8a16_grouped_linear(blas_.get(), at(s.o, HD), qn, L.wo_a, L.wo_a_bf16, c.o_groups, at(s.z, Z), st);
  // z quantized with the weight's blocks (model-spec §2), in wo_b's own launch where fp8_gemm_bf16 can.
  cuda::fp8_gemm_bf16(at(s.z, Z), qn, L.wo_b, at(s.y, H), cuda::OutType::BF16, at(s.zq, Z), at(s.zs, Z / kV41Block),
                      st);
  end_site_mix();
  leave_site(at(s.X, hc * H), at(s.y, H), at(mix, MIX), qn);
  phase("attn.wo_expand");
}

// The MoE sublayer inside the FFN mHC site, whose collapse takes the attention site's pre (model-spec §4).
// Rows [q0, q0 + n) (the rank's share under context parallelism; with n = 0 only its part of the MoE's collectives).
void V41GpuModel::ffn(int l, int q0, int n) {
  const ModelConfig& c = config_;
  const V41GpuLayer& L = weights_->layers[size_t(l)];
  Scratch& s = *scratch_;
  const int64_t H = c.hidden_size, XW = int64_t(c.hc_mult) * H, MIX = int64_t(2 + c.hc_mult) * c.hc_mult;
  if (n == 0) {
    moe_sublayer(L.moe, s, q0, 0, l);
    return;
  }
  const int site = 2 * l + 1;
  enter_site(site, q0, n, L.hc_ffn, L.ffn_norm, s.u + int64_t(q0) * H, nullptr, nullptr);
  phase("ffn.mhc_norm");
  // The combine left to the next site's entry, which reads y (cuda::moe_site_combine; unset where the MoE combined).
  cuda::MoeCombineParts y_parts;
  moe_sublayer(L.moe, s, q0, n, l, &y_parts);
  phase("ffn.moe");
  end_site_mix();
  leave_site(s.X + int64_t(q0) * XW, s.y + int64_t(q0) * H, s.mix[site % 2] + int64_t(q0) * MIX, n, y_parts);
  phase("ffn.expand");
}

// Context parallelism, after each layer: the shares' residual streams X and FFN-site mix (the next attention site's
// lagged collapse and the head read every row's) into every rank's (GpuStepModelBase::cp_gather_rows).
void V41GpuModel::cp_gather_layer() {
  const ModelConfig& c = config_;
  flush_expand();  // the gather sends the expanded streams
  cp_gather_rows(scratch_->X, size_t(c.hc_mult) * size_t(c.hidden_size), parallel::CommType::BF16);
  cp_gather_rows(scratch_->mix[1], size_t(2 + c.hc_mult) * size_t(c.hc_mult), parallel::CommType::F32);
  phase("cp.gather");
}

V41GpuModel::CpPrefill V41GpuModel::prefill_context_parallel(int slot, std::span<const int32_t> tokens,
                                                             parallel::Collectives& group, int chunk_rows) {
  return context_parallel_prefill(
      slot, tokens, group, chunk_rows, scratch_->logits,
      [this](std::span<const StepRow> rows) {
        // The one-GPU step's host side (prepare), without the group row counts (the plumbing sets M).
        rows_.plan(rows, stream());
        if (!weights_->engram_hashes.empty()) stage_engram_rows(rows);
        kept_rows_ = int(rows.size());
        if (keep_tokens_ > 0) {
          stage_kept_rows(rows);
          DI_CHECK(kept_rows_ == int(rows.size()),
                   "v4.1 gpu model: a context-parallel step may not cut a prefill run (bounded replay): chunk_rows "
                   "at most " + std::to_string(keep_tokens_));
        }
      },
      [this](int n) { enqueue(n); });
}

// model-spec §4: no hc_head; the final collapse uses the last site's pre, then norm and the fp32 head.
void V41GpuModel::head(int n, float* logits) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t H = c.hidden_size;
  const float* pre = previous_mix(2 * c.num_layers);
  // The last FFN's deferred expand, the collapse and the norm in one launch (enter_site's kernel, no codes).
  const PendingExpand p = take_expand(s.X, pre, n);
  cuda::hc_lagged_site_pre(s.X, p.y, pre, n, c.hc_mult, H, weights_->norm, c.rms_norm_eps, s.h, nullptr, nullptr, 0,
                           stream(), &p.y_parts);
  cuda::gemm_bf16(blas_.get(), s.h, H, weights_->head, H, logits, cuda::OutType::F32, c.vocab_size, n, c.vocab_size,
                  H, stream());
}

std::unique_ptr<Model> load_v41_gpu_model(const std::string& dir, const ModelOptions& options) {
  ModelConfig config = load_model_config((std::filesystem::path(dir) / "config.json").string());
  const StepCapacity cap = gpu_load_capacity(options, "v4.1 gpu model");
  std::unique_ptr<V41GpuWeights> weights = load_gpu_weights(
      dir, config, options, [](const ModelConfig& c, uint64_t seed) { return random_v41_gpu_weights(c, seed); },
      [](const ModelConfig& c, const Checkpoint& ck, bool progress) { return upload_v41_gpu_weights(c, ck, progress); });
  return std::make_unique<V4GpuForward>(
      std::make_unique<V41GpuModel>(config, std::move(weights), cap, options.prefill_replay));
}

}  // namespace deepinfer::gpu

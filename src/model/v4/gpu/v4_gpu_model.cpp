#include "model/v4/gpu/v4_gpu_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/step_kernels.h"
#include "layers/attention/decode_fused.h"
#include "layers/norm_rope/rope.h"
#include "layers/quant/w8a16_gemv.h"
#include "model/v4/gpu/v4_gpu_compressor.h"
#include "model/v4/gpu/v4_gpu_moe.h"
#include "parallel/expert_shard.h"

namespace deepinfer::gpu {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_gpu_config(const ModelConfig& c) {
  DI_CHECK(c.family == ModelFamily::V4, "v4 gpu model: config model_type '" + c.model_type + "' is not deepseek_v4");
  check_kernel_shapes(c, "v4 gpu model", "V4-Flash", 0);
}

// The decode layouts of every weight the decode kernels stream (model/gpu/device_weights.h): the FP8 linears
// of the attention, indexer and shared expert, and the routed experts (whose checkpoint layout goes away).
void pack_layer_for_decode(DeviceArena& a, V4GpuLayer& L) {
  for (cuda::Fp8Linear* w : {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_b, &L.moe.shared_w13, &L.moe.shared_w2})
    pack_fp8_for_decode(a, *w);
  if (L.indexer) pack_fp8_for_decode(a, L.indexer->wq_b);
  pack_experts_for_decode(a, L.moe.w13);
  pack_experts_for_decode(a, L.moe.w2);
}

}  // namespace

std::unique_ptr<V4GpuWeights> upload_v4_gpu_weights(const ModelConfig& c, const Checkpoint& ck, bool show_progress,
                                                    const parallel::ExpertPlacement* placement, int rank) {
  check_gpu_config(c);
  auto w = std::make_unique<V4GpuWeights>();
  DeviceArena& a = w->arena;
  const int64_t H = c.hidden_size, D = c.head_dim, hc = c.hc_mult;
  upload_outer_weights(*w, ck, c);
  w->hc_head_fn = upload_f32(a, ck, "hc_head_fn", {hc, hc * H});
  w->hc_head_base = upload_f32(a, ck, "hc_head_base", {hc});
  w->hc_head_scale = upload_f32(a, ck, "hc_head_scale", {1});
  for (const LayerPlan& plan : c.layers) {
    const std::string p = "layers." + std::to_string(plan.index) + ".";
    const std::string at = p + "attn.";
    if (show_progress)
      std::fprintf(stderr, "[load] gpu v4 layer %d/%d (%s, ratio %d), %.2f GB on the device so far\n", plan.index + 1,
                   c.num_layers, attention_kind_name(plan.attention), plan.compress_ratio, double(a.bytes()) / 1e9);
    V4GpuLayer L;
    static_cast<GpuBlockWeights&>(L) = upload_block_weights(a, ck, c, plan);
    if (plan.attention != AttentionKind::Window)
      L.compressor = upload_v4_compressor(a, ck, at + "compressor.", plan.compress_ratio, int(D),
                                         plan.attention == AttentionKind::CSA, H);
    if (plan.attention == AttentionKind::CSA) L.indexer = upload_v4_indexer(a, ck, at + "indexer.", c);
    const auto shard = layer_expert_shard(c, placement, plan.index, rank, "v4 gpu model");
    L.moe = upload_v4_moe(a, ck, c, plan, p + "ffn.", shard ? &*shard : nullptr);
    pack_layer_for_decode(a, L);
    w->layers.push_back(L);
  }
  if (placement) w->expert_placement = *placement;
  return w;
}

std::unique_ptr<V4GpuWeights> random_v4_gpu_weights(const ModelConfig& c, uint64_t seed,
                                                    const parallel::ExpertPlacement* placement, int rank) {
  check_gpu_config(c);
  const int64_t H = c.hidden_size, D = c.head_dim, hc = c.hc_mult;
  auto weights = random_gpu_weights<V4GpuWeights>(
      c, seed,
      [&](V4GpuWeights& w, uint64_t& s) {
        w.hc_head_fn = random_f32(w.arena, size_t(hc * hc * H), 0.0f, float(1.0 / std::sqrt(double(hc * H))), ++s);
        w.hc_head_base = random_f32(w.arena, size_t(hc), 0.0f, 0.5f, ++s);
        w.hc_head_scale = random_f32(w.arena, 1, 1.0f, 0.2f, ++s);
      },
      [&](V4GpuWeights& w, const LayerPlan& plan, V4GpuLayer& L, uint64_t& s) {
        DeviceArena& a = w.arena;
        if (plan.attention != AttentionKind::Window)
          L.compressor =
              random_v4_compressor(a, plan.compress_ratio, int(D), plan.attention == AttentionKind::CSA, H, ++s);
        if (plan.attention == AttentionKind::CSA) L.indexer = random_v4_indexer(a, c, ++s);
        const auto shard = layer_expert_shard(c, placement, plan.index, rank, "v4 gpu model");
        L.moe = random_v4_moe(a, c, plan.hash_moe, ++s, shard ? &*shard : nullptr);
        pack_layer_for_decode(a, L);
      });
  if (placement) weights->expert_placement = *placement;
  return weights;
}

// ------------------------------------------------------------------------------------------------ state pools

struct V4GpuModel::Pools {
  struct Layer : LayerCaches {
    cuda::CompressorGpuState compressor{}, index_compressor{};
    int compressed_stride = 0;  // key-list width of the compressed segment (index_topk on CSA, all entries on HCA)
  };
  std::vector<Layer> layers;
};

// Per-step buffers, sized for max_rows: f32 is [rows, max(q_lora, heads * head_dim, head_dim)], module_ws the
// compressor / indexer / MoE workspace.
struct V4GpuModel::Scratch : StepScratch {
  float* mix = nullptr;  // [rows, (2 + hc) * hc]: the current site's (hc_site_pre)
  int32_t* compressed_list = nullptr;  // [rows, max compressed stride]
};

V4GpuModel::V4GpuModel(ModelConfig config, std::unique_ptr<V4GpuWeights> weights, const V4GpuCapacity& capacity,
                       parallel::Collectives* expert_group)
    : GpuStepModelBase(std::move(config), std::move(weights), capacity, "v4 gpu model", expert_group) {
  check_gpu_config(config_);
  const ModelConfig& c = config_;
  check_layer_count();
  check_expert_shards("random_v4_gpu_weights / upload_v4_gpu_weights");
  const cudaStream_t st = stream();
  const int S = capacity_.slots, R = capacity_.max_rows, W = c.sliding_window;
  const int64_t D = c.head_dim, HD = int64_t(c.num_heads) * D;
  DeviceArena& a = state_arena_;

  pools_ = std::make_unique<Pools>();
  int max_compressed_stride = 0;
  // The KV row format of every layer's window ring and compressed KV (DEEPINFER_KV_FORMAT, kv_record.h), fixed for
  // the model's life: the step's writers and the attention follow the pools' format.
  kv_format_ = cuda::kv_format();
  DI_CHECK(kv_format_ == cuda::KvFormat::Bf16 || (D == cuda::kvrec::kDim && c.rope_dim == cuda::kvrec::kRopeDim),
           "v4 gpu model: the FP8 KV record holds rows of " + std::to_string(cuda::kvrec::kDim) + " channels with " +
               std::to_string(cuda::kvrec::kRopeDim) + " RoPE channels; head_dim " + std::to_string(D) +
               ", rope_dim " + std::to_string(c.rope_dim));
  for (const LayerPlan& plan : c.layers) {
    Pools::Layer pl;
    allocate_window(pl, kv_format_);
    if (plan.attention != AttentionKind::Window) {
      const int ratio = plan.compress_ratio;
      allocate_paged(pl, ratio, plan.attention == AttentionKind::CSA);
      const cuda::CompressorGpu& cw = *weights_->layers[size_t(plan.index)].compressor;
      pl.compressor.ring_kv = a.alloc<float>(cuda::compressor_state_floats(cw, S));
      pl.compressor.ring_gate = a.alloc<float>(cuda::compressor_state_floats(cw, S));
      if (plan.attention == AttentionKind::CSA) {
        const cuda::IndexerGpu& ix = *weights_->layers[size_t(plan.index)].indexer;
        pl.index_compressor.ring_kv = a.alloc<float>(cuda::compressor_state_floats(ix.compressor, S));
        pl.index_compressor.ring_gate = a.alloc<float>(cuda::compressor_state_floats(ix.compressor, S));
        pl.compressed_stride = ix.topk;
      } else {
        pl.compressed_stride = int(ceil_div(capacity_.max_context, ratio));
      }
      max_compressed_stride = std::max(max_compressed_stride, pl.compressed_stride);
    }
    pools_->layers.push_back(pl);
  }

  scratch_ = std::make_unique<Scratch>();
  Scratch& s = *scratch_;
  rows_.allocate_rows(a);
  s.point_rows(rows_.tokens(), R);
  const int hc = c.hc_mult;
  allocate_scratch(s, std::max<int64_t>({c.q_lora_rank, HD, D}));
  s.mix = a.alloc<float>(size_t(R) * (2 + hc) * hc);
  s.compressed_list = a.alloc<int32_t>(size_t(R) * std::max(1, max_compressed_stride));
  s.attn_ws = a.alloc<uint8_t>(cuda::sink_attention_workspace_bytes(R, W, max_compressed_stride));
  size_t module_ws = moe_workspace_bytes(), compressor_ws = 0, index_compressor_ws = 0;
  for (const V4GpuLayer& L : weights_->layers) {
    if (L.compressor) compressor_ws = std::max(compressor_ws, cuda::compressor_workspace_bytes(R, *L.compressor));
    if (L.indexer) {
      const int max_entries = int(ceil_div(capacity_.max_context, L.indexer->compressor.ratio));
      module_ws = std::max(module_ws, cuda::indexer_workspace_bytes(R, max_entries, *L.indexer));
      index_compressor_ws =
          std::max(index_compressor_ws, cuda::compressor_workspace_bytes(R, L.indexer->compressor));
    }
  }
  compressor_ws = std::max(compressor_ws, index_compressor_ws);
  s.module_ws = a.alloc<uint8_t>(std::max(module_ws, compressor_ws));
  s.compressor_ws = a.alloc<uint8_t>(std::max<size_t>(compressor_ws, 1));
  s.index_compressor_ws = a.alloc<uint8_t>(std::max<size_t>(index_compressor_ws, 1));
  allocate_group_rows();
  if (c.index_n_heads > 0) allocate_index_scratch(s);

  for (const Pools::Layer& pl : pools_->layers) zero_caches(pl, st);
  DI_CUDA_CHECK(cudaStreamSynchronize(st));
}

V4GpuModel::~V4GpuModel() { cudaStreamSynchronize(stream()); }

const int32_t* V4GpuModel::sample_greedy(int rows) { return greedy_tokens(*scratch_, rows); }

void V4GpuModel::assume_length(int slot, int32_t length) { rows_.assume_length(slot, length); }

void V4GpuModel::fill_index_keys_random(uint64_t seed) {
  for (const Pools::Layer& pl : pools_->layers) randomize_index_keys(pl, seed++, stream());
}

float* V4GpuModel::step(std::span<const V4GpuRow> rows) { return step(rows, capacity_.max_rows); }

float* V4GpuModel::step_graph(std::span<const V4GpuRow> rows) { return step_graph(rows, capacity_.max_rows); }

void V4GpuModel::plan_step(std::span<const V4GpuRow> rows, int rows_per_rank) {
  begin_group_step(rows.size(), rows_per_rank);
  if (!rows.empty()) rows_.plan(rows, stream());
}

float* V4GpuModel::step(std::span<const V4GpuRow> rows, int rows_per_rank) {
  plan_step(rows, rows_per_rank);
  phase("");  // opens the step's marks (timing mode only)
  enqueue(int(rows.size()));
  return rows.empty() ? nullptr : scratch_->logits;
}

float* V4GpuModel::step_graph(std::span<const V4GpuRow> rows, int rows_per_rank) {
  plan_step(rows, rows_per_rank);
  step_graphs().launch(int(rows.size()), stream(), timing_, [this](int n) { enqueue(n); });
  return rows.empty() ? nullptr : scratch_->logits;
}

void V4GpuModel::enqueue(int n) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  // The rows whose query side and FFN this rank computes: a context-parallel step's share, else all of them.
  const int q0 = cp_group_ ? q_first_ : 0, qn = cp_group_ ? q_rows_ : n;
  if (n > 0) cuda::resolve_tokens(s.tokens, s.sampled, n, stream());
  share_group_rows(s.tokens + q0, qn);
  if (n == 0) {
    join_group_moe_layers(s);
    return;
  }
  cuda::embed_streams(weights_->embed, s.tokens, n, c.hc_mult, c.hidden_size, s.X, stream());
  phase("embed");
  for (int l = 0; l < c.num_layers; ++l) {
    attention(l, n, q0, qn);
    ffn(l, q0, qn);
    if (cp_group_) cp_gather_streams();
  }
  head(n);
  phase("head");
}

namespace {
// Whether layer l + 1's attention site expands layer l's FFN output into the streams (hc_expand_site_pre) instead
// of a launch of its own at the end of ffn(l): with the fused switch on, not after the last layer (the head reads
// the streams) and not under context parallelism (the streams are gathered between the layers).
bool expands_ffn_output(int l, int layers, bool context_parallel) {
  return l >= 0 && l + 1 < layers && !context_parallel && cuda::fused_mhc_expand();
}
}  // namespace

// model-spec §3 "Attention" for the step's rows, inside the layer's attention mHC site.
void V4GpuModel::attention(int l, int n, int q0, int qn) {
  const ModelConfig& c = config_;
  const V4GpuLayer& L = weights_->layers[size_t(l)];
  const LayerPlan& plan = c.layers[size_t(l)];
  Pools::Layer& P = pools_->layers[size_t(l)];
  Scratch& s = *scratch_;
  const int hc = c.hc_mult, heads = c.num_heads, D = c.head_dim, W = c.sliding_window, block = c.weight_block_size;
  const int64_t H = c.hidden_size, HD = int64_t(heads) * D, QL = c.q_lora_rank;
  const int64_t Z = int64_t(c.o_groups) * c.o_lora_rank, MIX = int64_t(2 + hc) * hc;
  const float eps = c.rms_norm_eps;
  cudaStream_t st = stream();
  // Row q0 of a per-row buffer of `width` elements a row (the query side's rows; q0 = 0 outside context parallelism).
  auto at = [q0](auto* p, int64_t width) { return p + int64_t(q0) * width; };

  // mHC collapse -> attention norm (the site's coefficients are used at the site, model-spec §3 "mHC site"), and
  // the FP8 codes of the normed row that wkv and wq_a read: one launch. Every row: the KV row and the compressors
  // read every row's u.
  if (expands_ffn_output(l - 1, c.num_layers, cp_group_ != nullptr)) {  // the previous FFN output first (issue 4)
    // (Its combine too, where the MoE left its parts: ffn_parts_.)
    cuda::hc_expand_site_pre(s.X, s.y, n, hc, H, L.hc_attn, eps, c.hc_eps, c.hc_sinkhorn_iters, L.attn_norm, s.mix,
                             s.u, s.uq, s.us, block, s.mix_ws, st, &ffn_parts_);
    ffn_parts_ = {};
  } else {
    cuda::hc_site_pre(s.X, n, hc, H, L.hc_attn, eps, c.hc_eps, c.hc_sinkhorn_iters, L.attn_norm, s.mix, s.u, s.uq,
                      s.us, block, s.mix_ws, st);
  }
  phase("attn.mhc_norm");

  // The KV row and the compressors read only u: they run on the side stream while the main stream computes
  // the query (at decode no single one of these GEMVs fills the GPU; the branches share it). Separate scratch:
  // kv32 (side) vs f32 (main); module_ws and cuBLAS are used by the side branch only until the join. The state
  // path runs over all n rows (under context parallelism every rank builds the whole caches).
  const int S = capacity_.slots;
  cudaStream_t sd = streams_.stream(StepStreams::Branch::Side);
  streams_.fork(StepStreams::Branch::Side);
  // The indexer's inputs that read only u off the query's chain (index_inputs_early(), step_model_base.h): its head
  // weights first on the side branch; the index compressor on a branch of its own beside the KV compressor.
  const int64_t IQ = int64_t(c.index_n_heads) * c.index_head_dim;
  const bool index_early = qn > 0 && L.indexer && index_inputs_early();
  const bool keys_early = index_early && L.compressor && compressor_branch();
  cudaEvent_t head_weights_ready = nullptr, keys_ready = nullptr;
  if (index_early) {
    cuda::indexer_head_weights(at(s.u, H), qn, *L.indexer, at(s.index_w, c.index_n_heads), blas_.get(), sd);
    head_weights_ready = streams_.mark(StepStreams::Branch::Side);
  }
  // kv = kv_norm(wkv . u), RoPE, cache format, into the step's scratch rows of the window pool (bf16 values or
  // packed records: kv_format_).
  cuda::fp8_gemm(s.uq, s.us, n, L.wkv, s.kv32, cuda::OutType::F32, sd);
  void* const scratch_rows =
      static_cast<uint8_t*>(P.window_rows()) + int64_t(S) * W * cuda::kv_row_bytes(kv_format_, D);
  if (cuda::fused_attention_steps()) {  // the same three steps in one launch (issue 4)
    // model-spec §3: FP8 blocks of 64 over the nope channels (kv_fake_quant's format).
    const cuda::KvCacheRows cache{scratch_rows, 64, D - c.rope_dim, kv_format_};
    cuda::rms_norm_f32_rope(s.kv32, L.kv_norm, s.kv, n, D, eps, 1, s.positions, L.inv_freq, c.rope_dim, cache, sd);
  } else {
    cuda::rms_norm_f32(s.kv32, L.kv_norm, s.kv, n, D, eps, sd);
    cuda::rope(s.kv, D, s.positions, L.inv_freq, n, 1, D, c.rope_dim, false, sd);
    cuda::kv_fake_quant(s.kv, n, D, c.rope_dim, scratch_rows, sd, kv_format_);
  }
  cuda::window_rows(s.slots, s.positions, s.chunk_first, n, W, S, s.window_list, sd);
  const int32_t* table = L.compressor ? rows_.table(P.ratio_class) : nullptr;
  const int max_pages = L.compressor ? rows_.max_pages(P.ratio_class) : 0;
  // The compressors (KV, then the indexer's): on the side branch after the KV row, or on their own
  // (compressor_branch()), one after the other (one workspace); with keys_early the indexer's on a branch of its own.
  if (L.compressor) {
    const CompressorPlace place = begin_compressor(s);
    const CompressorPlace keys_place = keys_early ? begin_index_keys(s) : place;
    auto push_kv = [&] {
      cuda::PagedPool kv_pool{P.kv, table, max_pages, capacity_.page_size, D, P.kv_records};
      const cuda::EntryFormat kv_entry =
          kv_format_ == cuda::KvFormat::Fp8 ? cuda::EntryFormat::KvFp8Record : cuda::EntryFormat::KvFp8;
      cuda::EntryFinish kv_finish{L.inv_freq, c.rope_dim, kv_entry, eps};
      cuda::compressor_push(s.u, s.slots, s.positions, n, *L.compressor, P.compressor, kv_finish, kv_pool,
                            place.workspace, place.blas, place.stream);
    };
    auto push_keys = [&] {
      const cuda::IndexerGpu& ix = *L.indexer;
      cuda::PagedPool key_pool{P.index_keys, table, max_pages, capacity_.page_size, ix.dim};
      cuda::EntryFinish key_finish{L.inv_freq, c.rope_dim, cuda::EntryFormat::IndexFp4, eps};
      cuda::compressor_push(s.u, s.slots, s.positions, n, ix.compressor, P.index_compressor, key_finish, key_pool,
                            keys_place.workspace, keys_place.blas, keys_place.stream);
    };
    if (keys_early) {
      push_keys();
      keys_ready = streams_.mark(StepStreams::Branch::IndexKeys);
      push_kv();
    } else {
      push_kv();
      if (L.indexer) push_keys();
    }
  }

  // The indexer's query (CSA layers), on the main stream where index_query_place() says: its projection, its head
  // weights (already on the side branch with index_early), its finish.
  auto index_query = [&] {
    const cuda::IndexerGpu& ix = *L.indexer;
    cuda::indexer_query_project(at(s.qrq, QL), at(s.qrs, QL / block), QL, qn, ix, at(s.index_q, IQ), st);
    if (!index_early)
      cuda::indexer_head_weights(at(s.u, H), qn, ix, at(s.index_w, c.index_n_heads), index_query_blas(), st);
    cuda::indexer_query_finish(at(s.index_q, IQ), at(s.index_q_fp4, IQ), at(s.index_w, c.index_n_heads),
                               at(s.positions, 1), qn, ix, L.inv_freq, c.rope_dim, head_weights_ready, st);
  };

  // q = wq_b . q_norm(wq_a . u): W8A8 GEMMs, the norms on the fp32 GEMM outputs, then per-head unweighted norm + RoPE:
  // inside the attention split kernel's prologue (DEEPINFER_Q_NORM_PROLOGUE, default on: layers/attention/
  // decode_fused.h; bench/gpu/NOTES.md "Query norm + RoPE in the split kernel's prologue"), which reads wq_b's fp32
  // output (s.f32 is not written again before the attention core), else its own launch.
  const bool q_prologue = cuda::fused_attention_steps() && cuda::query_norm_prologue();
  const bool wq_b_on_branch = qn > 0 && L.indexer && index_query_place() == IndexQueryPlace::First;
  if (qn > 0) {
    cuda::fp8_gemm(at(s.uq, H), at(s.us, H / block), qn, L.wq_a, at(s.f32, QL), cuda::OutType::F32, st);
    cuda::rms_norm_f32_quantize(at(s.f32, QL), L.q_norm, nullptr, at(s.qrq, QL), at(s.qrs, QL / block), qn, QL, eps,
                                block, st);
    // wq_b and the query's norm / RoPE: on the main stream, or on the query branch (IndexQueryPlace::First).
    const cudaStream_t qs = wq_b_on_branch ? fork_query_branch() : st;
    // On the branch, its grid may leave SM room for the other branches' kernels (branch_grid()).
    cuda::fp8_gemm_grid(at(s.qrq, QL), at(s.qrs, QL / block), qn, L.wq_b, at(s.f32, HD), cuda::OutType::F32, qs,
                        wq_b_on_branch ? branch_grid(qn) : cuda::StreamGrid{});
    if (cuda::fused_attention_steps()) {
      if (!q_prologue)  // else the attention core's split kernel normalises and rotates the query (below)
        cuda::rms_norm_f32_rope(at(s.f32, HD), nullptr, at(s.q, HD), int64_t(qn) * heads, D, eps, heads,
                                at(s.positions, 1), L.inv_freq, c.rope_dim, cuda::KvCacheRows{}, qs);
    } else {
      cuda::rms_norm_f32(at(s.f32, HD), nullptr, at(s.q, HD), int64_t(qn) * heads, D, eps, qs);
      cuda::rope(at(s.q, HD), HD, at(s.positions, 1), L.inv_freq, qn, heads, D, c.rope_dim, false, qs);
    }
    if (wq_b_on_branch) index_query();
  }
  if (qn > 0 && L.indexer && index_query_place() == IndexQueryPlace::BeforeJoin) index_query();
  // The select reads the keys and the query's head weights only: with keys_early it waits for the two marks, and the
  // branches are joined after it.
  auto join_branches = [&] {
    streams_.join(StepStreams::Branch::Side);
    if (L.compressor) join_compressor();  // the keys the select reads, the compressed KV the attention reads
    if (keys_early) streams_.join(StepStreams::Branch::IndexKeys);
  };
  if (keys_early)
    streams_.wait(keys_ready);
  else
    join_branches();
  phase("attn.q_kv_compressors");

  cuda::KvRows window{P.window_rows(), at(s.window_list, W), W, kv_format_};
  cuda::KvRows compressed{};
  if (qn > 0 && L.indexer) {
    const cuda::IndexerGpu& ix = *L.indexer;
    cuda::PagedPool key_pool{P.index_keys, table, max_pages, capacity_.page_size, ix.dim};
    cuda::indexer_select(at(s.index_q_fp4, IQ), at(s.index_w, c.index_n_heads), at(s.slots, 1), at(s.positions, 1),
                         qn, ix, key_pool, at(s.compressed_list, P.compressed_stride), s.module_ws, st);
  } else if (qn > 0 && L.compressor) {
    cuda::visible_entry_rows(at(s.slots, 1), at(s.positions, 1), qn, plan.compress_ratio, table, max_pages,
                             capacity_.page_size, P.compressed_stride, at(s.compressed_list, P.compressed_stride), st);
  }
  if (keys_early) join_branches();  // the window rows and the compressed KV the attention reads
  if (L.compressor)
    compressed = cuda::KvRows{P.kv_rows(), at(s.compressed_list, P.compressed_stride), P.compressed_stride, kv_format_};
  phase("attn.index");

  // Then the window commit, and the output de-rotated by the query position (V = K carries RoPE, model-spec §2).
  const cuda::AttentionEpilogue epilogue{P.window_rows(), s.slots, s.positions, s.chunk_first, s.chunk_rows, n, W, S,
                                         D, at(s.o, HD), at(s.positions, 1), qn, heads, c.rope_dim, L.inv_freq,
                                         kv_format_};
  if (wq_b_on_branch) join_query_branch();  // the query the attention reads
  if (qn > 0 && q_prologue)
    cuda::sink_attention_decode_committed(
        cuda::QueryNormRope{at(s.f32, HD), at(s.positions, 1), L.inv_freq, eps, c.rope_dim}, at(s.q, HD), qn, window,
        compressed, L.attn_sink, float(1.0 / std::sqrt(double(D))), s.attn_ws, epilogue, st);
  else if (qn > 0)
    cuda::sink_attention_decode_committed(at(s.q, HD), qn, window, compressed, L.attn_sink,
                                          float(1.0 / std::sqrt(double(D))), s.attn_ws, epilogue, st);
  else
    cuda::commit_window_and_derotate(epilogue, st);
  if (qn == 0) return;  // a context-parallel rank without query rows in this step
  phase("attn.core");

  // Grouped low-rank output: z_g = wo_a[g] . o_g (bf16 input, not quantized; FP8 weight dequantized in registers),
  // then wo_b under W8A8.
  cuda::w8a16_grouped_linear(blas_.get(), at(s.o, HD), qn, L.wo_a, L.wo_a_bf16, c.o_groups, at(s.z, Z), st);
  phase("attn.wo_a");
  // z quantized with the weight's blocks (model-spec §2), in wo_b's own launch where fp8_gemm_bf16 can.
  cuda::fp8_gemm_bf16(at(s.z, Z), qn, L.wo_b, at(s.y, H), cuda::OutType::BF16, at(s.zq, Z), at(s.zs, Z / block), st);
  // The expansion of y into the streams: here, or as the start of the FFN site's launch (hc_expand_site_pre).
  if (!cuda::fused_mhc_expand())
    cuda::hc_expand(at(s.X, hc * H), at(s.y, H), at(s.mix, MIX), qn, hc, H, at(s.X, hc * H), st);
  phase("attn.wo_b_expand");
}

// The MoE sublayer inside the FFN mHC site (model-spec §3 "MoE"), for rows [q0, q0 + qn).
void V4GpuModel::ffn(int l, int q0, int qn) {
  const ModelConfig& c = config_;
  const V4GpuLayer& L = weights_->layers[size_t(l)];
  Scratch& s = *scratch_;
  const int64_t H = c.hidden_size, XW = int64_t(c.hc_mult) * H, MIX = int64_t(2 + c.hc_mult) * c.hc_mult;
  if (qn == 0) {
    moe_sublayer(L.moe, s, q0, 0, l);  // a context-parallel rank without query rows: its part of the MoE's collectives
    return;
  }
  if (cuda::fused_mhc_expand()) {  // the attention output's expansion (deferred by attention()), then the site
    cuda::hc_expand_site_pre(s.X + int64_t(q0) * XW, s.y + int64_t(q0) * H, qn, c.hc_mult, H, L.hc_ffn,
                             c.rms_norm_eps, c.hc_eps, c.hc_sinkhorn_iters, L.ffn_norm, s.mix + int64_t(q0) * MIX,
                             s.u + int64_t(q0) * H, nullptr, nullptr, 0, s.mix_ws, stream());
  } else {
    cuda::hc_site_pre(s.X + int64_t(q0) * XW, qn, c.hc_mult, H, L.hc_ffn, c.rms_norm_eps, c.hc_eps,
                      c.hc_sinkhorn_iters, L.ffn_norm, s.mix + int64_t(q0) * MIX, s.u + int64_t(q0) * H, nullptr,
                      nullptr, 0, s.mix_ws, stream());
  }
  phase("ffn.mhc_norm");
  // The combine left to the next attention site where it expands this output (cuda::moe_site_combine).
  const bool next_site_expands = expands_ffn_output(l, c.num_layers, cp_group_ != nullptr);
  moe_sublayer(L.moe, s, q0, qn, l, next_site_expands ? &ffn_parts_ : nullptr);
  phase("ffn.moe");
  if (!next_site_expands)  // else the next attention site expands
    cuda::hc_expand(s.X + int64_t(q0) * XW, s.y + int64_t(q0) * H, s.mix + int64_t(q0) * MIX, qn, c.hc_mult, H,
                    s.X + int64_t(q0) * XW, stream());
  phase("ffn.expand");
}

// Context parallelism: rank r's rows cp_ranges_[r] of X (the residual streams after the layer) into every rank's X
// (GpuStepModelBase::cp_gather_rows: one all-gather of [world, M, hc, hidden]).
void V4GpuModel::cp_gather_streams() {
  cp_gather_rows(scratch_->X, size_t(config_.hc_mult) * size_t(config_.hidden_size), parallel::CommType::BF16);
  phase("cp.gather");
}

V4GpuModel::CpPrefill V4GpuModel::prefill_context_parallel(int slot, std::span<const int32_t> tokens,
                                                           parallel::Collectives& group, int chunk_rows) {
  return context_parallel_prefill(
      slot, tokens, group, chunk_rows, scratch_->logits,
      [this](std::span<const V4GpuRow> rows) { rows_.plan(rows, stream()); }, [this](int n) { enqueue(n); });
}

// hc_head collapse -> norm -> fp32 logits (model-spec §3 "Head").
void V4GpuModel::head(int n) {
  const ModelConfig& c = config_;
  Scratch& s = *scratch_;
  const int64_t H = c.hidden_size;
  cuda::hc_head_collapse(s.X, n, c.hc_mult, H, weights_->hc_head_fn, weights_->hc_head_base, weights_->hc_head_scale,
                         c.rms_norm_eps, c.hc_eps, s.h, stream());
  cuda::rms_norm(s.h, weights_->norm, s.h, n, int(H), c.rms_norm_eps, stream());
  cuda::gemm_bf16(blas_.get(), s.h, H, weights_->head, H, s.logits, cuda::OutType::F32, c.vocab_size, n, c.vocab_size,
                  H, stream());
}

}  // namespace deepinfer::gpu

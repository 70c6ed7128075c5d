#include "parallel/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace deepinfer::parallel {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Checkpoint formats (model-spec §5): FP8 e4m3 codes with one e8m0 byte per B x B block; MXFP4 codes, two per
// byte, with one e8m0 byte per 32 along K; bf16 and f32 plain.
int64_t fp8_linear(int64_t n, int64_t k, int64_t block) { return n * k + ceil_div(n, block) * ceil_div(k, block); }
int64_t mxfp4_linear(int64_t n, int64_t k) { return n * k / 2 + n * (k / 32); }
int64_t bf16(int64_t n) { return 2 * n; }
// The decode kernels' copy of an FP8 linear (cuda/weight_pack.cu fp8_packed_bytes: 16-row x 32-column tiles of
// codes).
int64_t fp8_decode_copy(int64_t n, int64_t k) { return ceil_div(n, 16) * (k / 32) * 512; }
int64_t f32(int64_t n) { return 4 * n; }

// The weights of one layer by tensor class (model-spec §5 names; V4.1 CSA2 roles per §1.2).
struct LayerBytes {
  int64_t attention = 0;       // wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b, attn_sink
  int64_t compress_index = 0;  // compressor + indexer (their own compressor on V4)
  int64_t mhc_norms = 0;       // attn_norm, ffn_norm, hc_{attn,ffn}_{fn,base,scale}
  int64_t router = 0;          // gate.weight, gate.bias (+ bias_vl on V4.1) or V4's hash table tid2eid
  int64_t shared_expert = 0;
  int64_t engine_copies = 0;   // what V4GpuModel keeps besides the checkpoint formats (decode copies, bf16 wo_a)
  int experts = 0;             // routed experts of the layer
};

LayerBytes layer_bytes(const ModelConfig& c, const LayerPlan& plan, int experts, bool is_draft) {
  const int64_t H = c.hidden_size, D = c.head_dim, heads = c.num_heads, ql = c.q_lora_rank, B = c.weight_block_size;
  const int64_t oz = int64_t(c.o_groups) * c.o_lora_rank, hc = c.hc_mult, mix = (2 + hc) * hc;
  const int64_t I = c.moe_intermediate_size, ih = c.index_n_heads, idim = c.index_head_dim;
  LayerBytes L;
  L.mhc_norms = 2 * bf16(H) + 2 * (f32(mix * hc * H) + f32(mix) + f32(3));
  L.attention = fp8_linear(ql, H, B) + bf16(ql) + fp8_linear(heads * D, ql, B) + fp8_linear(D, H, B) + bf16(D) +
                fp8_linear(oz, heads * D / c.o_groups, B) + fp8_linear(H, oz, B) + f32(heads);
  const int ratio = plan.compress_ratio;
  if (c.family == ModelFamily::V4 && ratio > 0) {
    // V4 compressor: wkv, wgate [c*D, H] bf16, ape [ratio, c*D] f32, norm [D]; c = 2 on CSA (overlap) (§3).
    const int64_t series = plan.attention == AttentionKind::CSA ? 2 : 1;
    L.compress_index = 2 * bf16(series * D * H) + f32(ratio * series * D) + bf16(D);
    if (plan.attention == AttentionKind::CSA)  // lightning indexer: wq_b FP8, weights_proj, its compressor (c = 2)
      L.compress_index += fp8_linear(ih * idim, ql, B) + bf16(ih * H) + 2 * bf16(2 * idim * H) +
                          f32(ratio * 2 * idim) + bf16(idim);
  }
  if (c.family == ModelFamily::V41) {
    // V4.1: only Full layers own a compressor (wkv, wgate on ratio 2, norm) and the key projection wk + k_norm;
    // Full and Reindex layers own the indexer's query side (wq_b FP8, weights_proj) (§4, §5).
    if (plan.role == Csa2Role::Full)
      L.compress_index += bf16(D * H) + (ratio > 1 ? bf16(D * H) : 0) + bf16(D) + bf16(idim * D) + bf16(idim);
    if (plan.role == Csa2Role::Full || plan.role == Csa2Role::Reindex)
      L.compress_index += fp8_linear(ih * idim, ql, B) + bf16(ih * H);
  }
  L.router = bf16(int64_t(experts) * H);
  if (plan.hash_moe)
    L.router += c.vocab_size * c.n_experts_per_tok * 8;  // tid2eid, int64 in the official checkpoint
  else
    L.router += f32(experts) * (c.family == ModelFamily::V41 && !is_draft ? 2 : 1);  // bias (+ bias_vl)
  L.shared_expert = 2 * fp8_linear(I, H, B) + fp8_linear(H, I, B);
  // V4GpuModel (src/model/v4/gpu/) also holds a decode-order copy of each FP8 linear the decode kernels stream
  // (wq_a, wq_b, wkv, wo_b, shared w1|w3 and w2, the indexer's wq_b) and wo_a dequantized to bf16 for cuBLAS;
  // the routed experts' decode copy replaces their checkpoint layout, so it adds nothing.
  L.engine_copies = fp8_decode_copy(ql, H) + fp8_decode_copy(heads * D, ql) + fp8_decode_copy(D, H) +
                    fp8_decode_copy(H, oz) + fp8_decode_copy(2 * I, H) + fp8_decode_copy(H, I) +
                    bf16(oz * (heads * D / c.o_groups));
  const bool has_indexer = c.family == ModelFamily::V4 ? plan.attention == AttentionKind::CSA
                                                       : plan.role == Csa2Role::Full || plan.role == Csa2Role::Reindex;
  if (has_indexer) L.engine_copies += fp8_decode_copy(ih * idim, ql);
  L.experts = experts;
  return L;
}

// Bytes of one cached row / entry in the chosen storage (model-spec §6).
struct StateFormat {
  int64_t window_row = 0;
  int64_t compressed_entry = 0;
  int64_t index_key = 0;
};

StateFormat state_format(const ModelConfig& c, KvStorage storage) {
  const int64_t D = c.head_dim, rope = c.rope_dim, idim = c.index_head_dim;
  StateFormat f;
  if (storage == KvStorage::Bf16) {
    f.window_row = f.compressed_entry = bf16(D);
    f.index_key = bf16(idim);
    return f;
  }
  // Index keys: MXFP4 with one e8m0 per 32 (both families).
  f.index_key = idim / 2 + idim / 32;
  if (c.family == ModelFamily::V4) {
    // FP8 nope channels with one scale per 64 (padded to 8 bytes) + bf16 rope channels: 448 + 8 + 128 = 584.
    f.window_row = f.compressed_entry = (D - rope) + round_up(ceil_div(D - rope, 64), 8) + bf16(rope);
  } else {
    f.window_row = D + D / 32;              // MXFP8 over all 512 dims: 528
    f.compressed_entry = D / 2 + D / 16;    // FP4 with one e4m3 per 16: 288
  }
  return f;
}

std::string gb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", double(bytes) / 1e9);
  return buf;
}

}  // namespace

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::Replicated: return "replicated";
    case Placement::ExpertSharded: return "EP-sharded";
    case Placement::RowSharded: return "row-sharded";
    case Placement::Host: return "host (pinned)";
  }
  return "?";
}

int64_t routed_expert_bytes(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.moe_intermediate_size;
  return 2 * mxfp4_linear(I, H) + mxfp4_linear(H, I);  // w1, w3 [I, H]; w2 [H, I]
}

MemoryPlan plan_memory(const ModelConfig& c, const ParallelLayout& layout_in) {
  ParallelLayout lay = layout_in;
  DI_CHECK(lay.gpus > 0, "plan: the GPU count must be positive, got " + std::to_string(lay.gpus));
  if (lay.ep_size == 0) lay.ep_size = lay.gpus;
  DI_CHECK(lay.ep_size > 0 && lay.gpus % lay.ep_size == 0,
           "plan: the EP size " + std::to_string(lay.ep_size) + " must divide the GPU count " +
               std::to_string(lay.gpus) + " (each EP group holds every expert once)");
  DI_CHECK(lay.redundant_experts >= 0 && lay.redundant_experts % lay.ep_size == 0,
           "plan: redundant experts (" + std::to_string(lay.redundant_experts) +
               ") must be a non-negative multiple of the EP size " + std::to_string(lay.ep_size) +
               " (every rank holds the same number of expert slots)");
  DI_CHECK(lay.gpu_memory_bytes > 0, "plan: GPU memory must be positive");
  DI_CHECK(lay.sequences_per_rank > 0 && lay.max_rows_per_rank > 0,
           "plan: sequences per rank and rows per step must be positive");
  DI_CHECK(lay.runtime_reserve_bytes >= 0, "plan: the runtime reserve must not be negative");

  const int64_t H = c.hidden_size, D = c.head_dim, heads = c.num_heads, ql = c.q_lora_rank, B = c.weight_block_size;
  const int64_t hc = c.hc_mult, V = c.vocab_size, W = c.sliding_window, K = c.n_experts_per_tok;
  const bool v41 = c.family == ModelFamily::V41;

  MemoryPlan plan;
  plan.model_type = c.model_type;
  plan.layers = c.num_layers;
  plan.draft_layers = lay.include_draft ? c.num_nextn_predict_layers : 0;
  plan.expert_bytes = routed_expert_bytes(c);
  const int physical = c.n_routed_experts + lay.redundant_experts;
  plan.expert_slots_per_rank = physical / lay.ep_size;

  // Main layers.
  LayerBytes sum;
  int64_t expert_model = 0, expert_rank = 0;
  for (const LayerPlan& l : c.layers) {
    LayerBytes L = layer_bytes(c, l, c.n_routed_experts, false);
    sum.attention += L.attention;
    sum.compress_index += L.compress_index;
    sum.mhc_norms += L.mhc_norms;
    sum.router += L.router;
    sum.shared_expert += L.shared_expert;
    sum.engine_copies += L.engine_copies;
    expert_model += int64_t(L.experts) * plan.expert_bytes;
    expert_rank += int64_t(plan.expert_slots_per_rank) * plan.expert_bytes;
  }
  // Globals: embedding and head (bf16 [vocab, H]); final norm and, on V4, the mHC head (§3, §5).
  const int64_t embed_head = 2 * bf16(V * H);
  const int64_t globals = bf16(H) + (v41 ? 0 : f32(hc * hc * H) + f32(hc) + f32(1));

  // Draft layers: V4 MTP (a ratio-0 layer + e_proj, h_proj, enorm, hnorm, norm, its hc_head; §3) and V4.1
  // DSpark stages (ratio-0 layers with their own 128-expert MoE; stage 0 main_proj + main_norm, the last stage
  // norm, Markov head embed / head [vocab, markov_rank] and the confidence head; §4, dtypes bf16 [I]).
  int64_t draft_dense = 0, draft_experts_model = 0, draft_experts_rank = 0;
  for (int d = 0; d < plan.draft_layers; ++d) {
    LayerPlan l;
    l.index = c.num_layers + d;
    const int experts = v41 && c.dspark_n_routed_experts > 0 ? c.dspark_n_routed_experts : c.n_routed_experts;
    LayerBytes L = layer_bytes(c, l, experts, true);
    draft_dense += L.attention + L.mhc_norms + L.router + L.shared_expert;
    sum.engine_copies += L.engine_copies;
    draft_experts_model += int64_t(experts) * plan.expert_bytes;
    draft_experts_rank += ceil_div(experts, lay.ep_size) * plan.expert_bytes;
    if (!v41) {
      draft_dense += 2 * fp8_linear(H, H, B) + 3 * bf16(H) + f32(hc * hc * H) + f32(hc) + f32(1);
    } else {
      if (d == 0) draft_dense += fp8_linear(H, int64_t(c.dspark_target_layer_ids.size()) * H, B) + bf16(H);
      if (d == plan.draft_layers - 1)
        draft_dense += bf16(H) + 2 * bf16(V * c.dspark_markov_rank) + bf16(H + c.dspark_markov_rank);
    }
  }

  // Engram (V4.1 layers 1, 14): FP8 table rows [rows, head_dim] + e8m0 per 32; wkv FP8 [(hc + 1) H, heads *
  // (max_ngram - 1) * head_dim]; q_weight, k_weight [hc, H] (§4, §5).
  int64_t engram_tables = 0, engram_rank_rows = 0, engram_proj = 0;
  const int64_t engram_row = c.engram_head_dim + c.engram_head_dim / 32;
  for (size_t i = 0; i < c.engram_layer_ids.size(); ++i) {
    const int64_t rows = c.engram_num_embeddings[i];
    engram_tables += rows * engram_row;
    engram_rank_rows += ceil_div(rows, lay.gpus);
    const int64_t hash_heads = int64_t(c.engram_max_ngram_size - 1) * c.engram_n_heads;
    engram_proj += fp8_linear((hc + 1) * H, hash_heads * c.engram_head_dim, B) + 2 * bf16(hc * H);
  }

  const std::string fp8_fmt = "FP8 e4m3 + e8m0 " + std::to_string(B) + "x" + std::to_string(B);
  auto add = [&](std::string name, std::string format, Placement p, int64_t model, int64_t rank, int64_t host) {
    if (model == 0 && rank == 0) return;
    plan.classes.push_back({std::move(name), std::move(format), p, model, rank, host});
  };
  auto replicated = [&](std::string name, std::string format, int64_t bytes) {
    add(std::move(name), std::move(format), Placement::Replicated, bytes, bytes, 0);
  };
  replicated("embedding + head", "bf16", embed_head);
  replicated("attention (" + std::to_string(c.num_layers) + " layers)", fp8_fmt + ", bf16 norms", sum.attention);
  replicated(v41 ? "compressors + indexers (Full / Reindex)" : "compressors + indexers (CSA / HCA)",
             "bf16 / f32, wq_b FP8", sum.compress_index);
  replicated("mHC + norms", "f32 / bf16", sum.mhc_norms + globals);
  replicated("router", v41 ? "bf16 + f32 bias" : "bf16 + f32 bias, int64 tid2eid", sum.router);
  replicated("shared experts", fp8_fmt, sum.shared_expert);
  add("routed experts (" + std::to_string(c.n_routed_experts) + " x " + std::to_string(c.num_layers) + ", " +
          std::to_string(plan.expert_slots_per_rank) + " slots/layer/rank)",
      "MXFP4 + e8m0 per 32", Placement::ExpertSharded, expert_model, expert_rank, 0);
  replicated(v41 ? "DSpark draft (dense)" : "MTP draft (dense)", fp8_fmt + ", bf16", draft_dense);
  add(v41 ? "DSpark draft routed experts" : "MTP draft routed experts", "MXFP4 + e8m0 per 32", Placement::ExpertSharded,
      draft_experts_model, draft_experts_rank, 0);
  replicated("Engram projections", fp8_fmt + ", bf16", engram_proj);
  if (lay.engine_copies)
    add("engine copies (decode-order FP8, bf16 wo_a)", "FP8 tiles, bf16", Placement::Replicated, 0,
        sum.engine_copies, 0);
  if (lay.engram_on_host)
    add("Engram tables", "FP8 e4m3 + e8m0 per 32", Placement::Host, engram_tables, 0, engram_tables);
  else
    add("Engram tables", "FP8 e4m3 + e8m0 per 32", Placement::RowSharded, engram_tables, engram_rank_rows * engram_row, 0);

  for (const TensorClassPlan& t : plan.classes) {
    plan.weight_bytes_per_rank += t.rank_bytes;
    plan.host_bytes += t.host_bytes;
  }

  // Cached state (model-spec §6) in the chosen storage. Per sequence: every layer's window ring and the fp32
  // compressor rings (the open groups; V4 CSA keeps the previous window too); per token: compressed entries and
  // index keys, one per `ratio` tokens, of the layers that own them.
  const StateFormat fmt = state_format(c, lay.kv_storage);
  const int64_t idim = c.index_head_dim;
  for (const LayerPlan& l : c.layers) {
    plan.kv.sequence_bytes += W * fmt.window_row;
    const int r = l.compress_ratio;
    if (r == 0) continue;
    if (!v41) {
      const int64_t series = l.attention == AttentionKind::CSA ? 2 : 1;
      const int64_t ring_rows = series * r;  // the overlapping CSA keeps two windows
      plan.kv.sequence_bytes += 2 * f32(ring_rows * series * D);  // kv and gate rings
      plan.kv.token_bytes += double(fmt.compressed_entry) / r;
      if (l.attention == AttentionKind::CSA) {
        plan.kv.sequence_bytes += 2 * f32(2 * r * 2 * idim);
        plan.kv.token_bytes += double(fmt.index_key) / r;
      }
    } else if (l.role == Csa2Role::Full) {
      if (r > 1) plan.kv.sequence_bytes += 2 * f32(r * D);  // the partial group (kv_state, score_state)
      plan.kv.token_bytes += double(fmt.compressed_entry + fmt.index_key) / r;
    }
  }
  plan.kv.sequence_bytes += int64_t(plan.draft_layers) * W * fmt.window_row;  // draft window rings

  // Step workspace of max_rows rows (mirrors V4GpuModel::Scratch and the MoE workspace, src/model/v4/gpu/ and
  // src/layers/moe/moe_gpu.cu): residual streams, projections, attention lists, logits; routed pairs' FP8 rows,
  // fp32 w1|w3 and w2 outputs.
  const int64_t R = lay.max_rows_per_rank, I = c.moe_intermediate_size, oz = int64_t(c.o_groups) * c.o_lora_rank;
  const int64_t row_bytes = bf16(hc * H) + f32((2 + hc) * hc) + bf16(H) + H + f32(H / B) +
                            f32(std::max(ql, heads * D)) + bf16(ql) + ql + f32(ql / B) + 2 * bf16(heads * D) +
                            bf16(D) + f32(D) + f32(W) + f32(c.index_topk) + bf16(oz) + oz + f32(oz / B) +
                            2 * bf16(H) + f32(int64_t(c.index_n_heads) * (idim + 1)) + f32(V) +
                            K * (H + f32(H / B) + f32(std::max(2 * I, H)) + I + f32(I / B)) + f32(2 * I + H) + I;
  plan.step_workspace_bytes = R * row_bytes;
  plan.window_scratch_bytes = int64_t(c.num_layers + plan.draft_layers) * R * fmt.window_row;
  // EP dispatch / combine, sized for the worst case so a step never waits for counts (graph-safe, as DeepEP's
  // low-latency buffers, algorithms.md §2.3): a rank sends each of its rows' top-k pairs (FP8 row, fp32 scales,
  // routing weight) and receives them back as fp32 outputs (the fixed-order combine sums what the single-GPU
  // MoE sums, docs/parallel.md); it may receive every pair of every rank of its group that it holds slots for.
  if (lay.ep_size > 1) {
    const int64_t pair = H + f32(H / B) + f32(1) + f32(H);
    const int64_t pairs_out = R * K, pairs_in = R * lay.ep_size * std::min<int64_t>(K, plan.expert_slots_per_rank);
    plan.dispatch_buffer_bytes = (pairs_out + pairs_in) * pair;
  }

  plan.kv_budget_bytes = lay.gpu_memory_bytes - plan.weight_bytes_per_rank - plan.step_workspace_bytes -
                         plan.window_scratch_bytes - plan.dispatch_buffer_bytes - lay.runtime_reserve_bytes -
                         int64_t(lay.sequences_per_rank) * plan.kv.sequence_bytes;
  plan.kv.tokens_per_rank =
      plan.kv_budget_bytes > 0 && plan.kv.token_bytes > 0 ? int64_t(std::floor(plan.kv_budget_bytes / plan.kv.token_bytes)) : 0;
  plan.layout = lay;
  plan.fits = plan.kv_budget_bytes > 0;
  if (!plan.fits) {
    plan.problem = "the model does not fit: each rank needs " + gb(plan.weight_bytes_per_rank) + " GB of weights + " +
                   gb(plan.step_workspace_bytes + plan.window_scratch_bytes + plan.dispatch_buffer_bytes +
                      lay.runtime_reserve_bytes) +
                   " GB of workspace and reserve + " +
                   gb(int64_t(lay.sequences_per_rank) * plan.kv.sequence_bytes) + " GB of window rings for " +
                   std::to_string(lay.sequences_per_rank) + " sequences, but a GPU has " +
                   gb(lay.gpu_memory_bytes) + " GB (" + gb(-plan.kv_budget_bytes) +
                   " GB short); use more GPUs / a larger EP size" +
                   (engram_tables > 0 && !lay.engram_on_host ? ", Engram tables on the host" : "") +
                   " or fewer sequences per rank";
  }
  return plan;
}

std::string format_memory_plan(const MemoryPlan& p) {
  const ParallelLayout& l = p.layout;
  char line[512];
  std::string out;
  std::snprintf(line, sizeof line,
                "plan: %s, %d layers + %d draft; %d GPUs x %s GB; attention DP %d; EP %d (%d EP groups), %d redundant "
                "experts/layer; Engram %s; caches %s, %d sequences/rank, %d rows/step\n",
                p.model_type.c_str(), p.layers, p.draft_layers, l.gpus, gb(l.gpu_memory_bytes).c_str(), l.gpus,
                l.ep_size, l.gpus / l.ep_size, l.redundant_experts, l.engram_on_host ? "on host" : "on device",
                l.kv_storage == KvStorage::Bf16 ? "bf16 (engine today)" : "packed (model-spec §6)",
                l.sequences_per_rank, l.max_rows_per_rank);
  out += line;
  out += "sizes in GB (1e9 bytes)\n";
  std::snprintf(line, sizeof line, "  %-52s %-14s %-44s %10s %10s %10s\n", "tensor class", "placement", "format",
                "model", "per rank", "host");
  out += line;
  int64_t model_total = 0;
  for (const TensorClassPlan& t : p.classes) {
    std::snprintf(line, sizeof line, "  %-52s %-14s %-44s %10s %10s %10s\n", t.name.c_str(), placement_name(t.placement),
                  t.format.c_str(), gb(t.model_bytes).c_str(), gb(t.rank_bytes).c_str(), gb(t.host_bytes).c_str());
    out += line;
    model_total += t.model_bytes;
  }
  std::snprintf(line, sizeof line, "  %-52s %-14s %-44s %10s %10s %10s\n", "weights", "", "", gb(model_total).c_str(),
                gb(p.weight_bytes_per_rank).c_str(), gb(p.host_bytes).c_str());
  out += line;
  std::snprintf(line, sizeof line, "  one routed expert: %lld bytes\n", (long long)p.expert_bytes);
  out += line;
  out += "per rank workspace\n";
  auto row = [&](const char* name, int64_t bytes) {
    std::snprintf(line, sizeof line, "  %-52s %10s\n", name, gb(bytes).c_str());
    out += line;
  };
  row("step activations (estimate)", p.step_workspace_bytes);
  row("window scratch rows", p.window_scratch_bytes);
  row("EP dispatch / combine buffers (worst case)", p.dispatch_buffer_bytes);
  row("runtime reserve (CUDA, cuBLAS, NCCL, allocator)", l.runtime_reserve_bytes);
  out += "per rank caches\n";
  std::snprintf(line, sizeof line, "  per sequence (window + compressor rings): %.2f MB; per token: %.1f bytes\n",
                double(p.kv.sequence_bytes) / 1e6, p.kv.token_bytes);
  out += line;
  row("left for caches after weights, workspace and the sequences' rings", p.kv_budget_bytes);
  if (p.fits) {
    std::snprintf(line, sizeof line,
                  "  tokens of cached state per rank: %lld (%lld per sequence at %d sequences); all ranks: %lld\n",
                  (long long)p.kv.tokens_per_rank, (long long)(p.kv.tokens_per_rank / l.sequences_per_rank),
                  l.sequences_per_rank, (long long)(p.kv.tokens_per_rank * l.gpus));
    out += line;
  } else {
    out += "  " + p.problem + "\n";
  }
  return out;
}

}  // namespace deepinfer::parallel

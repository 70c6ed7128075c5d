// Decode GEMM v5 (bench/gpu/NOTES.md): the skinny kernel of skinny_gemm.cuh reading weights that were repacked
// at load time into fragment order (fp8_pack / mxfp4_pack, layouts in kernels.h), so that every weight load is
// one 16-byte load per thread and 512 contiguous bytes per warp, plus a deterministic split-K over a thread-block
// cluster for layers with few 16-row tiles (n = 1024 / 1280 has 64 / 80 tiles for 132 SMs).
//
// The arithmetic is the skinny kernel's (same widening, same mma.sync m16n8k16 f16 with fp32 accumulators, same
// scale application per 32-wide K step); only where the bytes come from changes:
//  - FP8: lane (g, c) of a warp loads one uint4 per K step: bytes 0-7 are row g's columns 8c .. 8c + 7 (the
//    old raw0), bytes 8-15 row g + 8's (raw1). The 16 rows of a tile share one e8m0 scale per step (16 divides
//    the block), read as one broadcast byte.
//  - MXFP4: one uint4 per two K steps (row g, row g + 8 of step 2p, then of step 2p + 1), and one uint4 of
//    e8m0 scales per 8 steps (rows g and g + 8), shared by the 4 lanes of a quad (broadcast).
//
// Work split, independent of the number of tokens (batch invariance): the K steps of a tile are cut into
// granules (FP8: 4 steps, MXFP4: 8 steps, the scale granule); the S x 8 warps of a cluster of S blocks take
// contiguous granule ranges; every warp sums its steps in order, the block's warps and then the cluster's blocks
// are added in a fixed order (rank 0 .. S-1, warp 0 .. 7) through distributed shared memory. S depends only on
// (n, k) and the SM count, never on m or the routing.
#pragma once

#include <cooperative_groups.h>

#include <algorithm>

#include "cuda/check.h"
#include "cuda/launch.h"
#include "cuda/skinny_gemm.cuh"

namespace deepinfer::cuda::packed {

namespace cg = cooperative_groups;
using skinny::WeightFormat;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

struct Args {
  skinny::Args base;              // q, xs, act_block_log2, ws (FP8 scales), w_block_log2, n, k, groups, rows, y
  const uint8_t* wp = nullptr;    // packed weights
  const uint8_t* sp = nullptr;    // MXFP4: packed scales
  int split = 1;                  // blocks per cluster along K
  int team = 8;                   // warps per 16-row tile inside a block (1, 2, 4, 8); 8 / team tiles per block
  bool weights_evict_first = false;  // the decode stream kernels' weight copies evict_first in L2 (stream_gemm.cuh)
  bool front_items = false;  // MXFP4 on wgmma: leftover items on the first blocks (stream_fp4_wgmma.cuh block_items)
};

template <WeightFormat F>
constexpr int granule_steps() {
  return F == WeightFormat::FP8 ? 4 : 8;
}

template <WeightFormat F, int TG, class OutT>
__global__ void __launch_bounds__(kThreads, TG <= 2 ? 2 : 1) packed_gemm_kernel(Args pa) {
  using Fmt = skinny::Format<F>;
  constexpr bool kFp4 = F == WeightFormat::MXFP4;
  constexpr int G = granule_steps<F>();
  // K steps whose weight loads are issued together; with few tokens the next round's loads are issued before
  // this round is consumed (two rounds in flight per warp, v6).
  constexpr int U = kFp4 ? 8 : 4;
  constexpr int kLoads = kFp4 ? U / 2 : U;
  constexpr bool kPrefetch = TG <= 2;
  constexpr int kOuts = TG * 128;  // outputs of one tile per token pass (TG x 4 accumulators x 32 lanes)
  const skinny::Args& a = pa.base;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int N = a.n, K = a.k;
  const int S = pa.split, J = pa.team, teams = kWarps / J;
  const int rank = blockIdx.x % S;
  const int team = warp / J, sub = warp % J;
  const int tiles = (N + 15) / 16;
  const int tile0 = (blockIdx.x / S) * teams;  // the block's first tile; team t works on tile0 + t
  const int tile = min(tile0 + team, tiles - 1);
  const bool live = tile0 + team < tiles;
  const int steps = K / 32;

  int row_begin = 0, row_end = a.rows;
  int64_t e = 0;
  pdl_wait();  // PDL (cuda/launch.h): groups, activations and the output are the predecessors'
  if (a.expert_ids) {
    row_begin = a.row_offsets[blockIdx.y];
    row_end = a.row_offsets[blockIdx.y + 1];
    e = a.expert_ids[blockIdx.y];
  }
  if (row_begin >= row_end) return;  // the whole cluster (same blockIdx.y) leaves together

  // This tile's packed stream.
  const int64_t tile_chunks = kFp4 ? int64_t(steps / 2) * 32 : int64_t(steps) * 32;
  const uint4* wt = reinterpret_cast<const uint4*>(pa.wp) + (e * tiles + tile) * tile_chunks;
  const int sgroups = (steps + 7) / 8;
  const uint4* st = kFp4 ? reinterpret_cast<const uint4*>(pa.sp) + (e * tiles + tile) * int64_t(sgroups) * 8 : nullptr;
  const int sb = a.w_block_log2;
  const uint8_t* ws_row = kFp4 ? nullptr : a.ws + int64_t((tile * 16) >> sb) * int64_t((K + (1 << sb) - 1) >> sb);

  // This warp's K steps: a contiguous range of whole granules among the S x J warps of its tile.
  const int granules = (steps + G - 1) / G;
  const int W = S * J, j = rank * J + sub;
  const int s_begin = granules * j / W * G;
  const int s_end = live ? min(granules * (j + 1) / W * G, steps) : s_begin;
  const int xb = a.act_block_log2;
  const int x_blocks = K >> xb;
  // v7: where one weight scale and one activation scale cover 4 K steps (FP8 with 128-blocks, V4), the tensor
  // cores accumulate the 4 steps' products (exact in fp32 like the per-step sums) and the scales are applied
  // once per 4 steps: 4 FFMA and one scale decode instead of 16 and 4. Granules are 4 aligned steps, so every
  // warp's range holds whole blocks. Depends on the formats only (batch invariance).
  const bool fused4 = !kFp4 && sb == 7 && xb == 7;

  __shared__ float partial[kWarps][kOuts];

  auto issue = [&](int s0, uint4(&r)[kLoads], uint4& sc) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int s = s0 + (kFp4 ? 2 * i : i);
      r[i] = s < s_end ? __ldg(wt + int64_t(kFp4 ? s / 2 : s) * 32 + lane) : make_uint4(0, 0, 0, 0);
    }
    if constexpr (kFp4) sc = __ldg(st + (s0 / 8) * 8 + g);  // s0 is a multiple of 8 (granule = U = 8)
  };

  for (int m0 = row_begin; m0 < row_end; m0 += 8 * TG) {
    const uint8_t* xrow[TG];
    const float* xs0[TG];
    const float* xs1[TG];
    float live0[TG], live1[TG];
#pragma unroll
    for (int t = 0; t < TG; ++t) {
      const int mb = m0 + t * 8 + g, mo = m0 + t * 8 + 2 * c;
      xrow[t] = a.q + skinny::act_row(a, min(mb, row_end - 1)) * K + 8 * c;
      xs0[t] = a.xs + skinny::act_row(a, min(mo, row_end - 1)) * x_blocks;
      xs1[t] = a.xs + skinny::act_row(a, min(mo + 1, row_end - 1)) * x_blocks;
      live0[t] = mo < row_end ? 1.0f : 0.0f;
      live1[t] = mo + 1 < row_end ? 1.0f : 0.0f;
    }
    float acc[TG][4];
    float dblk[TG][4];  // the tensor cores' sum over the steps of one scale block
#pragma unroll
    for (int t = 0; t < TG; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;

    uint4 raw[kLoads], nraw[kLoads];
    uint4 sc = make_uint4(0, 0, 0, 0), nsc = make_uint4(0, 0, 0, 0);
    if (kPrefetch && s_begin < s_end) issue(s_begin, raw, sc);
    for (int s0 = s_begin; s0 < s_end; s0 += U) {
      if constexpr (kPrefetch) {
        if (s0 + U < s_end) issue(s0 + U, nraw, nsc);  // in flight while this round is consumed
      } else {
        issue(s0, raw, sc);
      }
#pragma unroll
      for (int i = 0; i < U; ++i) {
        const int s = s0 + i;
        if (s < s_end) {
          const int k0 = s * 32;
          uint32_t h0[4], h1[4];
          float sw0, sw1;
          if constexpr (kFp4) {
            const uint4 r = raw[i / 2];
            Fmt::widen(i % 2 ? r.z : r.x, h0);
            Fmt::widen(i % 2 ? r.w : r.y, h1);
            const uint32_t w0 = i < 4 ? sc.x : sc.y, w1 = i < 4 ? sc.z : sc.w;
            sw0 = dev::e8m0_to_float(uint8_t(w0 >> (8 * (i % 4)))) * Fmt::kUnscale;
            sw1 = dev::e8m0_to_float(uint8_t(w1 >> (8 * (i % 4)))) * Fmt::kUnscale;
          } else {
            const uint4 r = raw[i];
            Fmt::widen(make_uint2(r.x, r.y), h0);
            Fmt::widen(make_uint2(r.z, r.w), h1);
            sw0 = sw1 = (!fused4 || i % 4 == 3) ? dev::e8m0_to_float(__ldg(ws_row + (k0 >> sb))) : 0.0f;
          }
          const bool open = !fused4 || i % 4 == 0, close = !fused4 || i % 4 == 3;
#pragma unroll
          for (int t = 0; t < TG; ++t) {
            uint32_t x[4];
            Fmt::widen_x(__ldg(reinterpret_cast<const uint2*>(xrow[t] + k0)), x);
            if (open)
              skinny::mma_f16<false>(dblk[t], h0[0], h1[0], h0[1], h1[1], x[0], x[1]);
            else
              skinny::mma_f16<true>(dblk[t], h0[0], h1[0], h0[1], h1[1], x[0], x[1]);
            skinny::mma_f16<true>(dblk[t], h0[2], h1[2], h0[3], h1[3], x[2], x[3]);
            if (close) {
              const float sx0 = __ldg(xs0[t] + (k0 >> xb)) * live0[t];
              const float sx1 = __ldg(xs1[t] + (k0 >> xb)) * live1[t];
              acc[t][0] += dblk[t][0] * (sw0 * sx0);
              acc[t][1] += dblk[t][1] * (sw0 * sx1);
              acc[t][2] += dblk[t][2] * (sw1 * sx0);
              acc[t][3] += dblk[t][3] * (sw1 * sx1);
            }
          }
        }
      }
      if constexpr (kPrefetch) {
#pragma unroll
        for (int i = 0; i < kLoads; ++i) raw[i] = nraw[i];
        sc = nsc;
      }
    }
    pdl_launch_dependents();  // this pass's weight stream is done (a hint: dependents still wait for the grid)

#pragma unroll
    for (int t = 0; t < TG; ++t)
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp][(t * 4 + i) * 32 + lane] = acc[t][i];

    auto* y = static_cast<OutT*>(a.y);
    // idx = team * kOuts + (o * 32 + lane): the output that accumulator o of that lane holds for the team's tile.
    auto store = [&](int idx, float sum) {
      const int tm = idx / kOuts, r = idx % kOuts;
      const int o = r / 32, ln = r % 32;
      const int t = o / 4, i = o % 4;
      const int n = (tile0 + tm) * 16 + ln / 4 + (i >= 2 ? 8 : 0);
      const int m = m0 + t * 8 + 2 * (ln % 4) + (i & 1);
      if (tile0 + tm < tiles && n < N && m < row_end) skinny::store_out(y, int64_t(m) * N + n, sum);
    };
    if (S == 1) {
      __syncthreads();
      for (int idx = threadIdx.x; idx < teams * kOuts; idx += kThreads) {
        const int tm = idx / kOuts, r = idx % kOuts;
        float sum = 0.0f;
        for (int w2 = 0; w2 < J; ++w2) sum += partial[tm * J + w2][r];  // fixed order: warp 0 .. J-1
        store(idx, sum);
      }
      __syncthreads();
    } else {
      cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();  // every block's partials are in its shared memory
      // Output idx is summed by rank idx % S, always in the order rank 0 .. S-1, warp 0 .. J-1.
      for (int idx = rank + S * int(threadIdx.x); idx < teams * kOuts; idx += S * kThreads) {
        const int tm = idx / kOuts, r = idx % kOuts;
        float sum = 0.0f;
        for (int q = 0; q < S; ++q) {
          const float* rp = cluster.map_shared_rank(&partial[0][0], q);
          for (int w2 = 0; w2 < J; ++w2) sum += rp[(tm * J + w2) * kOuts + r];
        }
        store(idx, sum);
      }
      cluster.sync();  // nobody overwrites or leaves while another block still reads its partials
    }
  }
}

// Warps per tile J (inside a block) and blocks per cluster S for a layer of `tiles` 16-row tiles and `granules`
// K granules: enough warps for every SM to hold ~16 (2 blocks of 8), every warp with >= min_per_warp granules
// (two rounds of loads to overlap: 4 FP8 / 2 MXFP4 granules); a cluster split only for the narrowest layers. Depends on (n, k) and
// the SM count only (batch invariance).
inline void choose_team_split(int tiles, int granules, int min_per_warp, int& J, int& S) {
  static int sms = [] {
    int dev = 0, v = 132;
    if (cudaGetDevice(&dev) == cudaSuccess) cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev);
    return v;
  }();
  const int64_t target = int64_t(sms) * 16;
  J = 1;
  while (J < kWarps && int64_t(tiles) * J < target && granules >= min_per_warp * 2 * J) J *= 2;
  S = 1;
  while (S < 8 && int64_t(tiles) * J * S < target / 2 && granules >= min_per_warp * 2 * J * S) S *= 2;
}

template <WeightFormat F, int TG, class OutT>
inline void launch_tg(const Args& pa, dim3 grid, cudaStream_t stream, bool pdl) {
  LaunchSpec spec;
  spec.grid = grid;
  spec.block = dim3(kThreads);
  spec.stream = stream;
  spec.cluster_x = unsigned(pa.split);
  spec.pdl = pdl;
  DI_CUDA_CHECK(launch(spec, packed_gemm_kernel<F, TG, OutT>, pa));
}

// Host-side launch; TG from the largest group, S from (n, k) only. pdl: programmatic dependent launch (cuda/launch.h;
// fp8_gemm), off for the MoE's launches.
template <WeightFormat F, class OutT>
inline void launch_packed(Args pa, int groups, int64_t max_rows, cudaStream_t stream, bool pdl = false) {
  const int tiles = (pa.base.n + 15) / 16;
  const int granules = (pa.base.k / 32 + granule_steps<F>() - 1) / granule_steps<F>();
  choose_team_split(tiles, granules, F == WeightFormat::FP8 ? 4 : 2, pa.team, pa.split);
  const int teams = kWarps / pa.team;
  dim3 grid(unsigned((tiles + teams - 1) / teams * pa.split), unsigned(groups));
  if (max_rows <= 8)
    launch_tg<F, 1, OutT>(pa, grid, stream, pdl);
  else if (max_rows <= 16)
    launch_tg<F, 2, OutT>(pa, grid, stream, pdl);
  else if (max_rows <= 32)
    launch_tg<F, 4, OutT>(pa, grid, stream, pdl);
  else
    launch_tg<F, 8, OutT>(pa, grid, stream, pdl);
}

}  // namespace deepinfer::cuda::packed

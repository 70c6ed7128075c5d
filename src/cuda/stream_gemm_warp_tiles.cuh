// Decode v8's dense FP8 product with one warp per 16-row tile (bench/gpu/NOTES.md "Decode stream: a shallow ring",
// the warp-tile form): for products of many tiles (V4 / V4.1 wq_b: 2048 tiles, k 1024 / 1280), included at the end of
// cuda/stream_gemm.cuh.
//
// Why: in stream_gemm_kernel the 8 consumer warps of a block share every 16 KB chunk (warp w takes granule w: 4 K
// steps) and meet at a 256-thread barrier per tile to add their partials; with one chunk per tile (k = 1024) that is a
// barrier and a reduction per 16 KB, and all 8 warps wait for the chunk's last byte. Here each warp owns a contiguous
// range of tiles and streams it alone: lane 0 bulk-copies the warp's 2 KB granules into the warp's own ring of S
// slots (one mbarrier per slot; the refill of a slot is issued by the warp that read it, so there are no empty
// barriers and no producer warp), the warp runs the granules in order and stores the tile's 16 x rows outputs itself.
// Bytes in flight: 16 warps per SM x S x 2 KB (S = 2: 64 KB, the shallow ring's figure).
//
// Bits: the same operations in the same order as consume_tile + reduce_store. There, warp w sums its granule w over
// the chunks in order (acc_w += d(c, w) x (sw x sx), acc_w from 0) and the tile's output is 0 + acc_0 + ... + acc_7.
// Here the warp keeps the 8 granule sums acc[w] (the same FFMAs over the chunks in the same order) and adds them in
// order 0..7 from 0 at the end of the tile; a granule past k (a partial last chunk) leaves its sum at 0 as there.
// The per-granule arithmetic is consume_tile's FP8 step (widen, mma_f16 chain, scale pair) written out for one warp;
// tests/gpu/test_quant_gemm.cpp StreamWarpTilesBitwise compares the two kernels bit for bit.
//
// Applies (launch_warp_tiles returns false otherwise): warp_tiles() > 0 (DEEPINFER_STREAM_WARP_TILES=S), FP8, no expert
// ids, one group (m <= 8 dense rows), tiles >= 12 x SMs (grid min(2 x SMs, tiles / 8) >= 1.5 blocks per SM, every
// warp at least one whole tile), and the shared memory of two blocks per SM.
//
// Measured (session 12 microbenchmark, H200, the roofline's timing; stream_gemm_kernel default / 2-stage ring / this
// form with S = 2, all bitwise equal): V4 wq_b m = 1 14.9 / 12.6 / 11.7 us (73 % of the copy roofline), m = 8 15.2 /
// 13.3 / 13.0; V4.1 wq_b m = 1 20.8 / 19.2 / 14.7 us, m = 8 22.2 / 21.1 / 16.4.
#pragma once

namespace deepinfer::cuda::stream_gemm {

namespace wtile {

constexpr int kGranuleBytes = 4 * 512;  // 4 K steps of a packed 16-row tile: one consumer warp's share of a chunk
constexpr int kWarps = kConsumerWarps;
constexpr int kBlockThreads = kConsumerThreads;

// The block's carve-up: stream_gemm_kernel's Layout with kWarps x S slots of one granule (its partial buffers unused).
__host__ __device__ inline Layout layout(int slots, int rows_cap, int k, int xb_log2) {
  return Layout(kWarps * slots, kGranuleBytes, rows_cap, k, xb_log2);
}

template <class OutT, bool kOne, bool kBlk128>
__device__ __forceinline__ void run_warp(const Params& P, const Layout& L, uint32_t s_base, float* xs_s, int t0,
                                         int t1, int warp, int lane) {
  using Fmt = skinny::Format<WeightFormat::FP8>;
  const skinny::Args& a = P.pa.base;
  const int S = P.stages;
  const int N = a.n, K = a.k, steps = K / 32;
  const int gpt = steps / 4;  // granules per tile (k % 128 == 0)
  const int64_t J = int64_t(t1 - t0) * gpt;
  const uint32_t slots = s_base + uint32_t(L.ring) + uint32_t(warp * S * kGranuleBytes);
  const uint32_t full = s_base + uint32_t(L.bars) + uint32_t(warp * S * 8);
  const uint8_t* src = P.pa.wp + int64_t(t0) * steps * 512;
  const int rows = min(a.rows, P.rows_cap);
  const int g = lane / 4, c4 = lane % 4;
  const int sb = a.w_block_log2, xb = a.act_block_log2;
  const bool fused4 = kBlk128 || (sb == 7 && xb == 7);
  const int w_kblocks = (K + (1 << sb) - 1) >> sb;
  const uint32_t arow = s_base + uint32_t(L.act) + uint32_t(min(g, rows - 1) * L.act_stride + c4 * 16);
  const float* xsl = xs_s + 2 * c4;
  auto* y = static_cast<OutT*>(a.y);

  int64_t j = 0;  // the warp's granule counter
  int slot = 0;    // j % S
  uint32_t phase = 0;  // (j / S) & 1
  for (int tile = t0; tile < t1; ++tile) {
    const uint8_t* ws_row = a.ws + int64_t((tile * 16) >> sb) * w_kblocks;
    float acc[kWarps][4];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) acc[w][0] = acc[w][1] = acc[w][2] = acc[w][3] = 0.0f;
    for (int s0 = 0; s0 < steps; s0 += 32) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const int gs = w * 4;  // the granule's first step inside the chunk (consume_tile's warp w)
        if (s0 + gs >= steps) break;
        const uint32_t st = slots + uint32_t(slot * kGranuleBytes);
        mbar_wait(full + 8 * slot, phase);
        uint4 r[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) r[i] = lds128(st + uint32_t(i * 512 + lane * 16));
        float dblk[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int s = s0 + gs + i;
          const int k0 = s * 32;
          uint32_t h0[4], h1[4];
          Fmt::widen(make_uint2(r[i].x, r[i].y), h0);
          Fmt::widen(make_uint2(r[i].z, r[i].w), h1);
          const float sw = (!fused4 || i == 3)
                               ? dev::e8m0_to_float(__ldg(ws_row + (kBlk128 ? blk4(s0 + gs, i) : k0 >> sb)))
                               : 0.0f;
          const uint4 x = lds128(arow + uint32_t(s * 64));
          const bool open = !fused4 || i == 0, close = !fused4 || i == 3;
          if (open)
            skinny::mma_f16<false>(dblk, h0[0], h1[0], h0[1], h1[1], x.x, x.y);
          else
            skinny::mma_f16<true>(dblk, h0[0], h1[0], h0[1], h1[1], x.x, x.y);
          skinny::mma_f16<true>(dblk, h0[2], h1[2], h0[3], h1[3], x.z, x.w);
          if (close) {
            if constexpr (kOne) {
              const float sx = xsl[(kBlk128 ? blk4(s0 + gs, i) : k0 >> xb) * kMaxRows];
              acc[w][0] += dblk[0] * (sw * sx);
              acc[w][2] += dblk[2] * (sw * sx);
            } else {
              const float2 sx =
                  *reinterpret_cast<const float2*>(xsl + (kBlk128 ? blk4(s0 + gs, i) : k0 >> xb) * kMaxRows);
              acc[w][0] += dblk[0] * (sw * sx.x);
              acc[w][1] += dblk[1] * (sw * sx.y);
              acc[w][2] += dblk[2] * (sw * sx.x);
              acc[w][3] += dblk[3] * (sw * sx.y);
            }
          }
        }
        // Every lane's fragments are consumed (the mmas read them): the slot is free for granule j + S.
        __syncwarp();
        if (lane == 0 && j + S < J) {
          mbar_arrive_expect_tx(full + 8 * slot, kGranuleBytes);
          bulk_g2s(st, src + (j + S) * kGranuleBytes, kGranuleBytes, full + 8 * slot);
        }
        ++j;
        if (++slot == S) {
          slot = 0;
          phase ^= 1u;
        }
      }
    }
    // reduce_store's sum for this lane's four outputs: the granule sums in order 0..7 from 0.
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += acc[w][i];
      const int n = tile * 16 + g + (i >= 2 ? 8 : 0);
      const int m = 2 * c4 + (i & 1);
      if (n < N && m < rows) skinny::store_out(y, int64_t(m) * N + n, sum);
    }
  }
}

template <class OutT, bool kBlk128>
__global__ void __launch_bounds__(kBlockThreads, 2) warp_tiles_kernel(const Params P) {
  const skinny::Args& a = P.pa.base;
  extern __shared__ __align__(128) uint8_t smem[];
  const int S = P.stages;
  const Layout L = layout(S, P.rows_cap, a.k, a.act_block_log2);
  const uint32_t s_base = dev::smem_u32(smem);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tiles = (a.n + 15) / 16, steps = a.k / 32;
  const int64_t W = int64_t(gridDim.x) * kWarps, gw = int64_t(blockIdx.x) * kWarps + warp;
  const int t0 = int(tiles * gw / W), t1 = int(tiles * (gw + 1) / W);
  const int64_t J = int64_t(t1 - t0) * (steps / 4);
  const uint32_t full = s_base + uint32_t(L.bars) + uint32_t(warp * S * 8);
  const uint32_t slots = s_base + uint32_t(L.ring) + uint32_t(warp * S * kGranuleBytes);
  // The warp's ring, filled before the PDL wait (weights only: the item range depends on the shapes alone).
  if (lane == 0) {
    for (int s = 0; s < S; ++s) mbar_init(full + 8 * s, 1);
    mbar_fence_init();
    const uint8_t* src = P.pa.wp + int64_t(t0) * steps * 512;
    for (int s = 0; s < S && s < J; ++s) {
      mbar_arrive_expect_tx(full + 8 * s, kGranuleBytes);
      bulk_g2s(slots + uint32_t(s * kGranuleBytes), src + int64_t(s) * kGranuleBytes, kGranuleBytes, full + 8 * s);
    }
  }
  __syncwarp();
  pdl_wait();  // activations and the output: the predecessors' (cuda/launch.h)
  float* xs_s = reinterpret_cast<float*>(smem + L.xs);
  const int rows = min(a.rows, P.rows_cap);
  stage_rows<WeightFormat::FP8>(a, P.swiglu, L, s_base + uint32_t(L.act), xs_s, 0, rows, warp, lane);
  if (rows == 1)
    run_warp<OutT, true, kBlk128>(P, L, s_base, xs_s, t0, t1, warp, lane);
  else
    run_warp<OutT, false, kBlk128>(P, L, s_base, xs_s, t0, t1, warp, lane);
  pdl_launch_dependents();
}

}  // namespace wtile

template <class OutT>
inline bool launch_warp_tiles(const packed::Args& pa, int groups, int64_t max_rows, cudaStream_t stream,
                              const SwigluInput& swiglu, bool pdl) {
  const int S = warp_tiles();
  const skinny::Args& a = pa.base;
  if (S <= 0 || a.expert_ids || groups != 1 || max_rows < 1 || max_rows > kMaxRows || a.rows > max_rows) return false;
  if (a.k % 128 != 0 || a.n < 1) return false;
  const int3 lim = device_smem_limits();
  const int sms = lim.x, per_sm = lim.y, optin = lim.z;
  // Whole tiles per warp, at most 2 blocks per SM, and at least 1.5 blocks per SM: with one block (8 warps) per SM
  // the consumers fall short (microbenchmark: n = 17000, k = 2304, 132 blocks: x0.85).
  const int tiles = (a.n + 15) / 16;
  const int blocks = int(std::min<int64_t>(int64_t(2) * sms, tiles / wtile::kWarps));
  if (2 * blocks < 3 * sms) return false;
  const int slots = std::clamp(S, 2, kMaxStages);
  const size_t smem = wtile::layout(slots, int(max_rows), a.k, a.act_block_log2).total;
  if (2 * (smem + 1024) > size_t(per_sm) || smem > size_t(optin)) return false;
  Params P;
  P.pa = pa;
  P.groups = 1;
  P.stages = slots;
  P.rows_cap = int(max_rows);
  P.swiglu = swiglu;
  const bool blk128 = use_blk128(a, false);
  auto kernel = blk128 ? wtile::warp_tiles_kernel<OutT, true> : wtile::warp_tiles_kernel<OutT, false>;
  if (raised_smem_limit(reinterpret_cast<const void*>(kernel), smem)) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       int(cudaSharedmemCarveoutMaxShared)));
  }
  LaunchSpec spec;
  spec.grid = dim3(unsigned(blocks));
  spec.block = dim3(wtile::kBlockThreads);
  spec.smem = smem;
  spec.stream = stream;
  spec.pdl = pdl;
  DI_CUDA_CHECK(launch(spec, kernel, P));
  return true;
}

}  // namespace deepinfer::cuda::stream_gemm

// Load-time repack of FP8 and MXFP4 weights into the decode kernel's fragment order (layouts in kernels.h,
// kernel in cuda/packed_gemm.cuh). Runs once per weight on the GPU; the checkpoint layout stays the reference
// the tests dequantize from.
#include <algorithm>

#include "cuda/check.h"
#include "cuda/kernels.h"

namespace deepinfer::cuda {

namespace {

__global__ void fp8_pack_kernel(const uint8_t* __restrict__ w, uint4* __restrict__ out, int n, int k, int64_t chunks) {
  const int steps = k / 32;
  for (int64_t id = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; id < chunks; id += int64_t(gridDim.x) * blockDim.x) {
    const int lane = int(id % 32);
    const int64_t ts = id / 32;
    const int s = int(ts % steps);
    const int t = int(ts / steps);
    const int r0 = t * 16 + lane / 4, r1 = r0 + 8;
    const int col = s * 32 + 8 * (lane % 4);
    uint2 a = make_uint2(0, 0), b = make_uint2(0, 0);
    if (r0 < n) a = *reinterpret_cast<const uint2*>(w + int64_t(r0) * k + col);
    if (r1 < n) b = *reinterpret_cast<const uint2*>(w + int64_t(r1) * k + col);
    out[id] = make_uint4(a.x, a.y, b.x, b.y);
  }
}

__global__ void mxfp4_pack_weight_kernel(const uint8_t* __restrict__ w, uint4* __restrict__ out, int n, int k,
                                         int tiles, int64_t chunks) {
  const int pairs = k / 64;
  for (int64_t id = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; id < chunks; id += int64_t(gridDim.x) * blockDim.x) {
    const int lane = int(id % 32);
    int64_t r = id / 32;
    const int p = int(r % pairs);
    r /= pairs;
    const int t = int(r % tiles);
    const int64_t e = r / tiles;
    const int r0 = t * 16 + lane / 4, r1 = r0 + 8;
    const uint8_t* base = w + e * int64_t(n) * (k / 2);
    auto word = [&](int row, int step) -> uint32_t {
      if (row >= n) return 0u;
      return *reinterpret_cast<const uint32_t*>(base + int64_t(row) * (k / 2) + step * 16 + 4 * (lane % 4));
    };
    out[id] = make_uint4(word(r0, 2 * p), word(r1, 2 * p), word(r0, 2 * p + 1), word(r1, 2 * p + 1));
  }
}

__global__ void mxfp4_pack_scale_kernel(const uint8_t* __restrict__ s, uint8_t* __restrict__ out, int n, int k,
                                        int tiles, int64_t bytes) {
  const int steps = k / 32, groups = (steps + 7) / 8;
  for (int64_t id = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; id < bytes; id += int64_t(gridDim.x) * blockDim.x) {
    const int b = int(id % 16);
    int64_t r = id / 16;
    const int g = int(r % 8);
    r /= 8;
    const int q = int(r % groups);
    r /= groups;
    const int t = int(r % tiles);
    const int64_t e = r / tiles;
    const int row = t * 16 + g + (b >= 8 ? 8 : 0);
    const int step = q * 8 + b % 8;
    out[id] = row < n && step < steps ? s[(e * n + row) * int64_t(steps) + step] : uint8_t(127);
  }
}

unsigned grid_for(int64_t items) { return unsigned(std::min<int64_t>((items + 255) / 256, 65536)); }

}  // namespace

size_t fp8_packed_bytes(int64_t n, int64_t k) { return size_t((n + 15) / 16) * size_t(k / 32) * 512; }

void fp8_pack(const Fp8Linear& w, uint8_t* packed, cudaStream_t stream) {
  DI_CHECK(w.k % 128 == 0, "cuda::fp8_pack: k = " + std::to_string(w.k) + " is not a multiple of 128");
  const int64_t chunks = int64_t(fp8_packed_bytes(w.n, w.k) / 16);
  if (chunks == 0) return;
  fp8_pack_kernel<<<grid_for(chunks), 256, 0, stream>>>(w.weight, reinterpret_cast<uint4*>(packed), int(w.n),
                                                        int(w.k), chunks);
  DI_CUDA_CHECK_LAUNCH("fp8_pack_kernel");
}

size_t mxfp4_packed_weight_bytes(int experts, int64_t n, int64_t k) {
  return size_t(experts) * size_t((n + 15) / 16) * size_t(k / 64) * 512;
}
size_t mxfp4_packed_scale_bytes(int experts, int64_t n, int64_t k) {
  return size_t(experts) * size_t((n + 15) / 16) * size_t((k / 32 + 7) / 8) * 128;
}

void mxfp4_pack(const Fp4Experts& w, uint8_t* packed_weight, uint8_t* packed_scale, cudaStream_t stream) {
  DI_CHECK(w.k % 128 == 0, "cuda::mxfp4_pack: k = " + std::to_string(w.k) + " is not a multiple of 128");
  const int tiles = int((w.n + 15) / 16);
  const int64_t chunks = int64_t(mxfp4_packed_weight_bytes(w.experts, w.n, w.k) / 16);
  const int64_t sbytes = int64_t(mxfp4_packed_scale_bytes(w.experts, w.n, w.k));
  if (chunks == 0) return;
  mxfp4_pack_weight_kernel<<<grid_for(chunks), 256, 0, stream>>>(w.weight, reinterpret_cast<uint4*>(packed_weight),
                                                                 int(w.n), int(w.k), tiles, chunks);
  DI_CUDA_CHECK_LAUNCH("mxfp4_pack_weight_kernel");
  mxfp4_pack_scale_kernel<<<grid_for(sbytes), 256, 0, stream>>>(w.scale, packed_scale, int(w.n), int(w.k), tiles,
                                                                sbytes);
  DI_CUDA_CHECK_LAUNCH("mxfp4_pack_scale_kernel");
}

}  // namespace deepinfer::cuda

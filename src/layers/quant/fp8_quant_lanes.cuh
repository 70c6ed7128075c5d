// fp8_quantize8 (fp8_quant.cuh) for a quantization block whose lanes are known at compile time: V4's activation block
// of 128 values is 16 lanes, V4.1's of 32 is 4 (model-spec §2 "Activation quant for FP8/FP4 GEMMs"). The same amax,
// the same shuffle rounds in the same order (fmaxf with lane ^ o, o = kLanes / 2 .. 1), the same scale and codes, so
// the same bits; the rounds unrolled with immediate lane offsets, where fp8_quantize8's run-time loop pays a counter,
// a compare and a taken branch a round (helper-152; the mHC spread site: V4 batch 1 -0.3 / -0.4 %, runs 250-251).
#pragma once

#include <type_traits>

#include "layers/quant/fp8_quant.cuh"

namespace deepinfer::cuda::dev {

// kLanes > 0: a power of two <= 32, the block's lanes (lanes is then ignored); 0: fp8_quantize8 with lanes.
template <int kLanes>
__device__ __forceinline__ float fp8_quantize8_lanes(const float (&f)[8], int lanes, uint2& codes) {
  if constexpr (kLanes == 0) {
    return fp8_quantize8(f, lanes, codes);
  } else {
    static_assert(kLanes > 0 && (kLanes & (kLanes - 1)) == 0 && kLanes <= 32, "a power-of-two block of lanes");
    float amax = fp8_amax8(f);
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    const float scale = fp8_block_scale(amax);
    codes = fp8_codes8(f, scale);
    return scale;
  }
}

// A launcher's kernel for a block of `lanes` lanes: pick(std::integral_constant<int, L>{}) with L the kLanes that is
// compiled for it (V4's 16, V4.1's 4; 0, the run-time form, for the others). pick returns the kernel instantiation.
template <class Pick>
auto for_compiled_lanes(int lanes, Pick&& pick) {
  switch (lanes) {
    case 16: return pick(std::integral_constant<int, 16>{});
    case 4: return pick(std::integral_constant<int, 4>{});
    default: return pick(std::integral_constant<int, 0>{});
  }
}

}  // namespace deepinfer::cuda::dev

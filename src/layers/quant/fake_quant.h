// Quantize-dequantize steps that are part of the V4 / V4.1 forward (model-spec.md §2 "Fake-quant").
// Each works in place on contiguous blocks of `block` values; n must be a multiple of `block`.
#pragma once

#include <cstdint>

namespace deepinfer {

// FP8 e4m3 with a power-of-two scale 2^ceil(log2(max(amax, 1e-4) / 448)) per block: the W8A8 activation
// quantization and the window-KV / compressed-KV FP8 formats.
void fp8_fake_quant(float* x, int64_t n, int block);

// fp8_fake_quant over x[0, n) where the last block may be shorter and gets its own scale: tiny test configs
// have widths that are not multiples of the production block sizes (128 / 64 / 32).
void fp8_fake_quant_ragged(float* x, int64_t n, int block);

enum class Fp4Scale {
  UE8M0,  // MXFP4: power-of-two scale 2^ceil(log2(max(amax, 6*2^-126) / 6)) (index keys, V4.1 block 32)
  E4M3,   // NVFP4-style: scale = e4m3(max(amax, 6*2^-9) / 6) (V4.1 compressed KV, block 16)
};

// e2m1 (FP4) with one scale per block.
void fp4_fake_quant(float* x, int64_t n, int block, Fp4Scale scale_kind);

// Orthonormal Walsh-Hadamard transform (Sylvester order, scale 1/sqrt(n)), n a power of two: the V4
// lightning indexer rotates queries and keys with it before FP4 quantization (model-spec §3).
void hadamard_transform(float* x, int64_t n);

}  // namespace deepinfer

// Decoding of the checkpoint's weight formats into fp32 for the CPU reference (model-spec.md §5):
// dense BF16/F32, FP8 e4m3 with ue8m0 block scales (128x128 on V4, 32x32 on V4.1), and MXFP4 experts
// (two e2m1 per byte, even column in the low nibble, one ue8m0 scale per 32 along K).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/checkpoint.h"

namespace deepinfer {

// A BF16 / F16 / F32 tensor of exactly `shape`, as fp32.
Tensor read_dense(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape);

// `<prefix>.weight` F8_E4M3 [out, in] times `<prefix>.scale` [ceil(out/B), ceil(in/B)] (F8_E8M0, or F32 as
// some exports write it), as fp32 [out, in].
Tensor read_fp8_weight(const Checkpoint& ck, const std::string& prefix, int64_t out, int64_t in, int block);

// `<prefix>.weight` I8 [out, in/2] (e2m1 pairs) times `<prefix>.scale` F8_E8M0 [out, in/32], as fp32 [out, in].
Tensor read_fp4_weight(const Checkpoint& ck, const std::string& prefix, int64_t out, int64_t in);

// A linear layer's weight [out, in] in whatever format the checkpoint stores it: FP8 with block scales when
// `<prefix>.weight` is F8_E4M3, MXFP4 when it is I8 with a per-32 scale, dense otherwise.
Tensor read_linear_weight(const Checkpoint& ck, const std::string& prefix, int64_t out, int64_t in, int fp8_block);

// An integer table (I32 or I64) of exactly `shape`, e.g. V4 hash routing `ffn.gate.tid2eid`.
std::vector<int64_t> read_int_table(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape);

}  // namespace deepinfer

#include "model/weight_formats.h"

#include <cstring>

#include "core/error.h"

namespace deepinfer {

namespace {

void check_shape(const TensorEntry& e, const std::vector<int64_t>& shape) {
  DI_CHECK(e.shape == shape, "checkpoint: tensor '" + e.name + "' has shape " + shape_string(e.shape) +
                                 ", expected " + shape_string(shape));
}

// Scale tensors are F8_E8M0 in the official layout; accept F32 too (model-spec §10 item 2).
float scale_at(const TensorEntry& s, size_t i) {
  if (s.dtype == DType::F8_E8M0) return e8m0_to_float(s.data[i]);
  float f;
  std::memcpy(&f, s.data + 4 * i, 4);
  return f;
}

const TensorEntry& expect_scale(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape) {
  const TensorEntry& s = ck.get(name);
  DI_CHECK(s.dtype == DType::F8_E8M0 || s.dtype == DType::F32,
           "checkpoint: tensor '" + name + "' has dtype " + dtype_name(s.dtype) + ", expected F8_E8M0");
  check_shape(s, shape);
  return s;
}

}  // namespace

Tensor read_dense(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape) {
  const TensorEntry& e = ck.get(name);
  check_shape(e, shape);
  Tensor t(shape);
  size_t n = size_t(t.numel());
  switch (e.dtype) {
    case DType::F32:
      std::memcpy(t.ptr(), e.data, n * 4);
      break;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, e.data + 2 * i, 2);
        t.data[i] = bf16_to_float(h);
      }
      break;
    default:
      throw Error("checkpoint: tensor '" + name + "' has dtype " + dtype_name(e.dtype) + ", expected BF16 or F32");
  }
  return t;
}

Tensor read_fp8_weight(const Checkpoint& ck, const std::string& prefix, int64_t out, int64_t in, int block) {
  const TensorEntry& w = ck.expect(prefix + ".weight", DType::F8_E4M3, {out, in});
  int64_t sb_out = (out + block - 1) / block, sb_in = (in + block - 1) / block;
  const TensorEntry& s = expect_scale(ck, prefix + ".scale", {sb_out, sb_in});
  Tensor t({out, in});
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t c = 0; c < in; ++c) {
      float scale = scale_at(s, size_t((r / block) * sb_in + c / block));
      t.data[size_t(r * in + c)] = e4m3_to_float(w.data[r * in + c]) * scale;
    }
  }
  return t;
}

Tensor read_fp4_weight(const Checkpoint& ck, const std::string& prefix, int64_t out, int64_t in) {
  DI_CHECK(in % 32 == 0, "checkpoint: FP4 weight '" + prefix + "' needs an input width that is a multiple of 32");
  const TensorEntry& w = ck.get(prefix + ".weight");
  DI_CHECK(w.dtype == DType::I8 || w.dtype == DType::U8,
           "checkpoint: tensor '" + w.name + "' has dtype " + dtype_name(w.dtype) + ", expected I8 (packed e2m1)");
  check_shape(w, {out, in / 2});
  const TensorEntry& s = expect_scale(ck, prefix + ".scale", {out, in / 32});
  Tensor t({out, in});
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t c = 0; c < in; c += 2) {
      uint8_t byte = w.data[r * (in / 2) + c / 2];
      float scale = scale_at(s, size_t(r * (in / 32) + c / 32));
      // model-spec §5: the even column sits in the low nibble.
      t.data[size_t(r * in + c)] = e2m1_to_float(byte & 0xF) * scale;
      t.data[size_t(r * in + c + 1)] = e2m1_to_float(byte >> 4) * scale;
    }
  }
  return t;
}

Tensor read_linear_weight(const Checkpoint& ck, const std::string& prefix, int64_t out, int64_t in, int fp8_block) {
  const TensorEntry& w = ck.get(prefix + ".weight");
  if (w.dtype == DType::F8_E4M3) return read_fp8_weight(ck, prefix, out, in, fp8_block);
  if (w.dtype == DType::I8 || w.dtype == DType::U8) return read_fp4_weight(ck, prefix, out, in);
  return read_dense(ck, prefix + ".weight", {out, in});
}

std::vector<int64_t> read_int_table(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape) {
  const TensorEntry& e = ck.get(name);
  check_shape(e, shape);
  size_t n = size_t(Tensor::numel_of(shape));
  std::vector<int64_t> out(n);
  if (e.dtype == DType::I64) {
    std::memcpy(out.data(), e.data, n * 8);
  } else if (e.dtype == DType::I32) {
    for (size_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, e.data + 4 * i, 4);
      out[i] = v;
    }
  } else {
    throw Error("checkpoint: tensor '" + name + "' has dtype " + dtype_name(e.dtype) + ", expected I32 or I64");
  }
  return out;
}

}  // namespace deepinfer

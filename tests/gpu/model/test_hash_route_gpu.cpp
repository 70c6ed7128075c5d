// The hash layers' routing row function (layers/moe/moe_gpu.cu hash_route_row: every tid2eid entry of a row loaded at
// once, then every logit, three dependent round trips) against the row function as it was before (each slot's entry,
// then its logit, in turn: hash_route_row_reference): expert ids and weights bitwise equal, on random logits, tables
// and tokens, top-k 1 / 6 / 8 / 16, 256 / 384 experts, normalised or not (eps 0 and 1e-20), 1 to 300 rows. The fused
// decode routing (decode_route_kernel's last block) runs the same row function.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/device.h"
#include "gpu_test_util.h"
#include "layers/moe/moe_gpu.h"

namespace deepinfer::gputest {
namespace {

template <class T>
T* to_device(const std::vector<T>& host) {
  T* d = nullptr;
  DI_CUDA_CHECK(cudaMalloc(&d, sizeof(T) * host.size()));
  DI_CUDA_CHECK(cudaMemcpy(d, host.data(), sizeof(T) * host.size(), cudaMemcpyHostToDevice));
  return d;
}

template <class T>
std::vector<T> to_host(const T* d, size_t n) {
  std::vector<T> host(n);
  DI_CUDA_CHECK(cudaMemcpy(host.data(), d, sizeof(T) * n, cudaMemcpyDeviceToHost));
  return host;
}

TEST(GpuMoe, HashRouteMatchesReferenceBitwise) {
  DI_SKIP_WITHOUT_GPU();
  struct Case {
    int rows, experts, top_k;
    bool normalize;
    float eps, route_scale;
  };
  const std::vector<Case> cases = {{1, 256, 6, true, 0.0f, 1.5f},     {3, 256, 6, true, 0.0f, 2.5f},
                                   {70, 384, 6, true, 1e-20f, 2.5f},  {300, 256, 8, true, 0.0f, 1.0f},
                                   {5, 256, 1, false, 1e-20f, 1.5f},  {64, 384, 16, true, 1e-20f, 1.0f},
                                   {129, 256, 6, false, 0.0f, 2.5f}};
  const int64_t vocab = 1000;
  std::mt19937_64 gen(20261130);
  cudaStream_t stream = nullptr;
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const Case& c : cases) {
    std::normal_distribution<float> logit(0.0f, 3.0f);
    std::vector<float> logits(size_t(c.rows) * c.experts);
    for (float& v : logits) v = logit(gen);
    std::vector<int32_t> table(size_t(vocab) * c.top_k), tokens(size_t(c.rows));
    for (int32_t& e : table) e = int32_t(gen() % uint64_t(c.experts));
    for (int32_t& t : tokens) t = int32_t(gen() % uint64_t(vocab));
    float* d_logits = to_device(logits);
    int32_t* d_table = to_device(table);
    int32_t* d_tokens = to_device(tokens);
    const size_t pairs = size_t(c.rows) * c.top_k;
    int32_t* d_ids[2];
    float* d_w[2];
    for (int ref = 0; ref < 2; ++ref) {
      DI_CUDA_CHECK(cudaMalloc(&d_ids[ref], sizeof(int32_t) * pairs));
      DI_CUDA_CHECK(cudaMalloc(&d_w[ref], sizeof(float) * pairs));
      DI_CUDA_CHECK(cudaMemsetAsync(d_ids[ref], 0xFF, sizeof(int32_t) * pairs, stream));
      DI_CUDA_CHECK(cudaMemsetAsync(d_w[ref], 0xFF, sizeof(float) * pairs, stream));
      cuda::hash_route_rows(d_logits, d_tokens, d_table, vocab, c.rows, c.experts, c.top_k, 1.0f, c.normalize, c.eps,
                            c.route_scale, d_ids[ref], d_w[ref], stream, ref == 1);
    }
    DI_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<int32_t> ids = to_host(d_ids[0], pairs), ids_ref = to_host(d_ids[1], pairs);
    const std::vector<float> w = to_host(d_w[0], pairs), w_ref = to_host(d_w[1], pairs);
    size_t bad = 0;
    for (size_t p = 0; p < pairs; ++p)
      bad += ids[p] != ids_ref[p] || std::memcmp(&w[p], &w_ref[p], sizeof(float)) != 0;
    // The reference's ids are the table's entries (the test of the test).
    size_t wrong_ids = 0;
    for (int r = 0; r < c.rows; ++r)
      for (int k = 0; k < c.top_k; ++k)
        wrong_ids += ids_ref[size_t(r) * c.top_k + k] != table[size_t(tokens[size_t(r)]) * c.top_k + k];
    const std::string name = "hash_route rows=" + std::to_string(c.rows) + " experts=" + std::to_string(c.experts) +
                             " top_k=" + std::to_string(c.top_k) + (c.normalize ? " normalized" : "");
    report_exact(name + " vs reference (ids, weights)", bad, pairs);
    EXPECT_EQ(wrong_ids, 0u) << name;
    for (int ref = 0; ref < 2; ++ref) {
      DI_CUDA_CHECK(cudaFree(d_ids[ref]));
      DI_CUDA_CHECK(cudaFree(d_w[ref]));
    }
    DI_CUDA_CHECK(cudaFree(d_logits));
    DI_CUDA_CHECK(cudaFree(d_table));
    DI_CUDA_CHECK(cudaFree(d_tokens));
  }
  DI_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace deepinfer::gputest

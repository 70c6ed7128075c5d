// The tickets of the V4 index query's finish in its product's launch (indexer_gpu.cu indexer_query_project_finish,
// cuda/stream_gemm.cuh finish_heads): one count of stored tiles per head, back at zero after every launch. One set
// per device, as the select kernels' arrival counts; one such product runs at a time (the model's main stream). In a
// translation unit of their own, so that indexer_gpu.cu's kernels keep their global symbols' addresses (and their
// SASS, tools/gpu/sass_same.sh).
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"
#include "cuda/check.h"

namespace deepinfer::cuda {

namespace {
constexpr int kMaxTicketHeads = 256;
__device__ unsigned int g_query_finish_tickets[kMaxTicketHeads];
}  // namespace

unsigned int* query_finish_tickets(int heads) {
  DI_CHECK(heads > 0 && heads <= kMaxTicketHeads,
           "cuda::query_finish_tickets: " + std::to_string(heads) + " heads, at most " +
               std::to_string(kMaxTicketHeads));
  void* tickets = nullptr;
  DI_CUDA_CHECK(cudaGetSymbolAddress(&tickets, g_query_finish_tickets));
  return static_cast<unsigned int*>(tickets);
}

}  // namespace deepinfer::cuda

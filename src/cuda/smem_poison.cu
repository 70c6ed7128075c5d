// cuda/smem_poison.h.
#include "cuda/smem_poison.h"

#include "cuda/check.h"

namespace deepinfer::cuda {

namespace {

// Volatile stores: nothing reads them in this kernel, and they must not be optimised away.
__global__ void poison_shared_kernel(int bytes) {
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t base = uint32_t(__cvta_generic_to_shared(smem));
  for (int i = int(threadIdx.x) * 16; i + 16 <= bytes; i += int(blockDim.x) * 16)
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(base + uint32_t(i)), "r"(0xFFFFFFFFu) : "memory");
}

}  // namespace

void poison_shared_memory(cudaStream_t stream) {
  int dev = 0, sms = 0, optin = 0;
  DI_CUDA_CHECK(cudaGetDevice(&dev));
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  DI_CUDA_CHECK(cudaFuncSetAttribute(poison_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  poison_shared_kernel<<<sms, 1024, size_t(optin), stream>>>(optin);
  DI_CUDA_CHECK_LAUNCH("poison_shared_kernel");
}

}  // namespace deepinfer::cuda

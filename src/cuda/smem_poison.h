// A test diagnostic: shared memory filled with 0xFF bytes on every SM, so that a later kernel reading shared memory
// its block did not write gets NaN (in every float format used here, as the tests' poisoned buffers) instead of
// whatever an earlier block left there, which is invisible whenever that block computed the same thing
// (bench/gpu/NOTES.md "Session 29": the side-stream race of runs 160-164).
#pragma once

#include <cuda_runtime.h>

namespace deepinfer::cuda {

// One block per SM at the largest dynamic shared memory a block may take, each filling all of it, on `stream`. Where
// the blocks land is the scheduler's choice: on an idle device it spreads one block per SM.
void poison_shared_memory(cudaStream_t stream);

}  // namespace deepinfer::cuda

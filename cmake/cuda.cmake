# CUDA backend (issue 4): every src/**/*.cu becomes the static library deepinfer_cuda, built for Hopper
# (sm_90a: wgmma and the other Hopper-only instructions need the "a" target, HOPPER.md). It is built
# whenever nvcc is present, so CI (nvcc, no GPU) compiles and links every kernel; the GPU tests carry the
# CTest label `gpu` and only tools/gpu/check.sh runs them on an H200.
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  option(DEEPINFER_CUDA "Build the CUDA backend" ON)
else()
  option(DEEPINFER_CUDA "Build the CUDA backend" OFF)
endif()
if(NOT DEEPINFER_CUDA)
  return()
endif()

# Architecture flags are given explicitly below; OFF keeps CMake from adding its own (and from probing a GPU).
set(CMAKE_CUDA_ARCHITECTURES OFF)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

# The top-level add_compile_options (-Wall -Wextra ...) are g++ flags that nvcc rejects: on a target with
# CUDA sources, keep them for C++ and hand them to the host compiler behind -Xcompiler for CUDA.
function(deepinfer_cuda_target target)
  get_target_property(inherited ${target} COMPILE_OPTIONS)
  set(options "")
  if(inherited)
    foreach(opt ${inherited})
      list(APPEND options "$<$<COMPILE_LANGUAGE:CXX>:${opt}>" "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${opt}>")
    endforeach()
  endif()
  # The .cu sources are C++17: CMake 3.25 (CI) knows no C++20 flag for nvcc and would otherwise take the
  # engine's CXX_STANDARD 20 for them too.
  set_target_properties(${target} PROPERTIES COMPILE_OPTIONS "${options}" CUDA_ARCHITECTURES OFF
    CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr --extended-lambda -lineinfo>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${DEEPINFER_CUDA_PTXAS_VERBOSE}>>:-Xptxas=-v>)
endfunction()
option(DEEPINFER_CUDA_PTXAS_VERBOSE "Print registers / shared memory / spills of every kernel" OFF)

# cuBLAS / cuBLASLt: the anchors of the benchmarks, and the bf16 GEMMs of cuda/blas.h that have no kernel of ours
# yet. Static when the toolkit ships the static archives (the binaries then need only the driver), shared otherwise.
if(TARGET CUDA::cublas_static AND TARGET CUDA::cublasLt_static)
  set(DEEPINFER_CUBLAS CUDA::cublas_static CUDA::cublasLt_static)
else()
  set(DEEPINFER_CUBLAS CUDA::cublas CUDA::cublasLt)
endif()
file(GLOB_RECURSE DEEPINFER_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*.cu)
add_library(deepinfer_cuda STATIC ${DEEPINFER_CUDA_SOURCES})
target_include_directories(deepinfer_cuda PUBLIC ${PROJECT_SOURCE_DIR}/src)
# Static cudart: the binaries only need the driver on the GPU machine.
target_link_libraries(deepinfer_cuda PUBLIC CUDA::cudart_static ${DEEPINFER_CUBLAS})
# Position-independent like deepinfer_lib: the Python extension links the CUDA backend too.
set_target_properties(deepinfer_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON)
deepinfer_cuda_target(deepinfer_cuda)

message(STATUS "deepinfer CUDA backend: nvcc ${CMAKE_CUDA_COMPILER_VERSION}, sm_90a, cuBLAS anchors via ${DEEPINFER_CUBLAS}")

# Host side of the CUDA backend: the GPU models (weights in device memory, state pools, the step that chains
# the kernels) in src/**/gpu/*.cpp. C++20 like the engine (they implement its Model contract), compiled by
# the host compiler against the CUDA runtime and cuBLAS (cuBLAS runs the few bf16 GEMMs with no kernel of ours
# yet: model-spec shapes that are neither hot nor FP8/FP4 on disk).
file(GLOB_RECURSE DEEPINFER_GPU_HOST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*.cpp)
list(FILTER DEEPINFER_GPU_HOST_SOURCES INCLUDE REGEX "/gpu/")
if(DEEPINFER_GPU_HOST_SOURCES)
  add_library(deepinfer_gpu STATIC ${DEEPINFER_GPU_HOST_SOURCES})
  target_link_libraries(deepinfer_gpu PUBLIC deepinfer_lib deepinfer_cuda ${DEEPINFER_CUBLAS})
  set_target_properties(deepinfer_gpu PROPERTIES POSITION_INDEPENDENT_CODE ON)
endif()

# GPU tests and benchmarks. Testing is enabled here too because this file is included before the top-level
# enable_testing().
enable_testing()
if(EXISTS ${PROJECT_SOURCE_DIR}/tests/gpu/CMakeLists.txt)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/gpu ${PROJECT_BINARY_DIR}/gpu/tests)
endif()
if(EXISTS ${PROJECT_SOURCE_DIR}/bench/gpu/CMakeLists.txt)
  add_subdirectory(${PROJECT_SOURCE_DIR}/bench/gpu ${PROJECT_BINARY_DIR}/gpu/bench)
endif()

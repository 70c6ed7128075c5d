# NCCL for the multi-GPU parts (issue 7): the communicator src/parallel/comm.cpp becomes the library
# deepinfer_nccl and tests/gpu/multi/ its 2-GPU test. NCCL comes from PyPI (the nvidia-nccl-cu13 wheel ships
# include/nccl.h and lib/libnccl.so.2 under site-packages/nvidia/nccl; PyTorch brings the same wheel on the GPU
# machine), else from the CUDA toolkit or the system. Binaries link libnccl.so.2 dynamically and find it at run
# time through LD_LIBRARY_PATH (docs/parallel.md). DEEPINFER_NCCL: AUTO builds it when CUDA and NCCL are found,
# ON requires them, OFF skips it. Included after cmake/cuda.cmake.
set(DEEPINFER_NCCL AUTO CACHE STRING "Build the NCCL communicator and its multi-GPU tests: AUTO, ON or OFF")
set_property(CACHE DEEPINFER_NCCL PROPERTY STRINGS AUTO ON OFF)
if(DEEPINFER_NCCL STREQUAL "OFF")
  return()
endif()
if(NOT TARGET deepinfer_cuda)
  if(DEEPINFER_NCCL STREQUAL "ON")
    message(FATAL_ERROR "DEEPINFER_NCCL=ON needs the CUDA backend (DEEPINFER_CUDA=ON and nvcc)")
  endif()
  return()
endif()

find_program(DEEPINFER_NCCL_PYTHON NAMES python3)
set(nccl_hints "")
if(DEEPINFER_NCCL_PYTHON)
  execute_process(
    COMMAND ${DEEPINFER_NCCL_PYTHON} -c
            "import site; print(';'.join(p + '/nvidia/nccl' for p in site.getsitepackages() + [site.getusersitepackages()]))"
    OUTPUT_VARIABLE nccl_hints OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
find_path(DEEPINFER_NCCL_INCLUDE_DIR nccl.h HINTS ${nccl_hints} PATH_SUFFIXES include
          PATHS ${CUDAToolkit_INCLUDE_DIRS})
find_library(DEEPINFER_NCCL_LIBRARY NAMES libnccl.so.2 nccl HINTS ${nccl_hints} PATH_SUFFIXES lib
             PATHS ${CUDAToolkit_LIBRARY_DIR})
if(NOT DEEPINFER_NCCL_INCLUDE_DIR OR NOT DEEPINFER_NCCL_LIBRARY)
  if(DEEPINFER_NCCL STREQUAL "ON")
    message(FATAL_ERROR "DEEPINFER_NCCL=ON but nccl.h / libnccl.so.2 were not found (pip install nvidia-nccl-cu13)")
  endif()
  message(STATUS "deepinfer NCCL: not found, the multi-GPU communicator is not built")
  return()
endif()
message(STATUS "deepinfer NCCL: ${DEEPINFER_NCCL_LIBRARY} (${DEEPINFER_NCCL_INCLUDE_DIR})")

add_library(deepinfer_nccl STATIC ${PROJECT_SOURCE_DIR}/src/parallel/comm.cpp)
target_include_directories(deepinfer_nccl PUBLIC ${DEEPINFER_NCCL_INCLUDE_DIR})
target_link_libraries(deepinfer_nccl PUBLIC deepinfer_lib CUDA::cudart_static ${DEEPINFER_NCCL_LIBRARY})
set_target_properties(deepinfer_nccl PROPERTIES POSITION_INDEPENDENT_CODE ON)
# The CUDA backend's data-parallel loader (one GPU per rank, an NCCL group for the experts): its own library, so
# that only the binaries linking it (and calling gpu::register_cuda_data_parallel) need libnccl.so.2 (the CLI
# `deepinfer`, test_gpu_dp_engine); the others get the backend's loader that says NCCL is missing.
if(TARGET deepinfer_gpu)
  add_library(deepinfer_gpu_dp STATIC ${PROJECT_SOURCE_DIR}/src/model/gpu/data_parallel_nccl.cc)
  target_link_libraries(deepinfer_gpu_dp PUBLIC deepinfer_gpu deepinfer_nccl)
  set_target_properties(deepinfer_gpu_dp PROPERTIES POSITION_INDEPENDENT_CODE ON)
endif()

if(EXISTS ${PROJECT_SOURCE_DIR}/tests/gpu/multi/CMakeLists.txt)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/gpu/multi ${PROJECT_BINARY_DIR}/gpu/tests/multi)
endif()
if(EXISTS ${PROJECT_SOURCE_DIR}/bench/gpu/multi/CMakeLists.txt)
  add_subdirectory(${PROJECT_SOURCE_DIR}/bench/gpu/multi ${PROJECT_BINARY_DIR}/gpu/bench/multi)
endif()

# CUDA backend. Owned by the CUDA work (issue 4); a placeholder until kernels land.
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  option(DEEPINFER_CUDA "Build the CUDA backend" ON)
else()
  option(DEEPINFER_CUDA "Build the CUDA backend" OFF)
endif()

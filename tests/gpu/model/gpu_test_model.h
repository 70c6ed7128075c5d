// The GPU tests' checkpoints: random V4 / V4.1 checkpoints with the production attention shape
// (tools/fixtures/make_gpu_model.py --family v4 | v41), generated once per machine into the temp directory
// (byte-identical everywhere) or named by DEEPINFER_GPU_TEST_MODEL / DEEPINFER_GPU_TEST_MODEL_V41.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace deepinfer::gputest {

inline std::string generated_test_model_dir(const char* env, const char* temp_name, const char* family) {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv(env)) return d;
  const fs::path dir = fs::temp_directory_path() / temp_name;
  if (!fs::exists(dir / "config.json")) {
    // Prebuilt binaries run from another checkout (tools/gpu/run_prebuilt.sh): it names its source tree.
    const char* src = std::getenv("DEEPINFER_SOURCE_OVERRIDE");
    const std::string root = src ? src : DEEPINFER_SOURCE_DIR;
    const std::string cmd = "python3 " + root + "/tools/fixtures/make_gpu_model.py --family " + family + " --out " +
                            dir.string();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  return dir.string();
}

inline std::string gpu_test_model_dir() {
  return generated_test_model_dir("DEEPINFER_GPU_TEST_MODEL", "deepinfer_v4_gpu_model", "v4");
}

inline std::string gpu_test_model_v41_dir() {
  return generated_test_model_dir("DEEPINFER_GPU_TEST_MODEL_V41", "deepinfer_v41_gpu_model", "v41");
}

}  // namespace deepinfer::gputest

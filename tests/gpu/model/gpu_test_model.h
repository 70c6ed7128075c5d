// The GPU tests' checkpoint: a random V4 checkpoint with the production attention shape
// (tools/fixtures/make_gpu_model.py), generated once per machine into the temp directory (byte-identical everywhere)
// or named by DEEPINFER_GPU_TEST_MODEL.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace deepinfer::gputest {

inline std::string gpu_test_model_dir() {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv("DEEPINFER_GPU_TEST_MODEL")) return d;
  const fs::path dir = fs::temp_directory_path() / "deepinfer_v4_gpu_model";
  if (!fs::exists(dir / "config.json")) {
    // Prebuilt binaries run from another checkout (tools/gpu/run_prebuilt.sh): it names its source tree.
    const char* src = std::getenv("DEEPINFER_SOURCE_OVERRIDE");
    const std::string root = src ? src : DEEPINFER_SOURCE_DIR;
    const std::string cmd = "python3 " + root + "/tools/fixtures/make_gpu_model.py --out " + dir.string();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  return dir.string();
}

}  // namespace deepinfer::gputest

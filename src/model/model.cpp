#include "model/model.h"

#include <cstdio>
#include <filesystem>

#include "model/families.h"

namespace deepinfer {

std::unique_ptr<Model> load_model(const std::string& dir, const ModelOptions& options) {
  namespace fs = std::filesystem;
  DI_CHECK(fs::is_directory(dir), "model: '" + dir + "' is not a directory");
  ModelConfig config = load_model_config((fs::path(dir) / "config.json").string());
  LoadProgress progress;
  if (options.show_progress) {
    progress = [](int done, int total, const std::string& file) {
      if (done < total) std::fprintf(stderr, "[load] shard %d/%d %s\n", done + 1, total, file.c_str());
    };
  }
  Checkpoint checkpoint = Checkpoint::open(dir, progress);
  if (config.family == ModelFamily::V4) return load_v4_model(std::move(config), std::move(checkpoint), options);
  return load_v41_model(std::move(config), std::move(checkpoint), options);
}

}  // namespace deepinfer

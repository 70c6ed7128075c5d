#include "model/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/tensor.h"

namespace deepinfer {

namespace fs = std::filesystem;
using nlohmann::json;

// A read-only mapping of one shard; unmapped when the checkpoint goes away.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY);
    DI_CHECK(fd >= 0, "checkpoint: cannot open shard '" + path + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      throw Error("checkpoint: cannot stat shard '" + path + "'");
    }
    size_ = size_t(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      ::close(fd);
      DI_CHECK(p != MAP_FAILED, "checkpoint: cannot map shard '" + path + "'");
      data_ = static_cast<const uint8_t*>(p);
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

namespace {

json read_json_file(const std::string& path, const char* what) {
  std::ifstream in(path);
  DI_CHECK(in.good(), std::string("checkpoint: cannot open ") + what + " '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::parse_error& e) {
    throw Error(std::string("checkpoint: ") + what + " '" + path + "' is not valid JSON: " + e.what());
  }
}

// safetensors: u64 little-endian header length, JSON header {name: {dtype, shape, data_offsets}}, data.
void parse_shard(const MappedFile& file, const std::string& file_name, std::map<std::string, TensorEntry>& out) {
  const std::string& path = file.path();
  DI_CHECK(file.size() >= 8, "checkpoint: shard '" + path + "' is truncated (" + std::to_string(file.size()) +
                                 " bytes, shorter than the 8-byte header length)");
  uint64_t header_len;
  std::memcpy(&header_len, file.data(), 8);
  DI_CHECK(header_len <= file.size() - 8, "checkpoint: shard '" + path + "' is truncated: header of " +
                                              std::to_string(header_len) + " bytes does not fit in the file");
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(file.data()) + 8,
                         reinterpret_cast<const char*>(file.data()) + 8 + header_len);
  } catch (const json::parse_error& e) {
    throw Error("checkpoint: shard '" + path + "' has a corrupt header: " + e.what());
  }
  DI_CHECK(header.is_object(), "checkpoint: shard '" + path + "' header is not a JSON object");
  const uint8_t* base = file.data() + 8 + header_len;
  size_t data_size = file.size() - 8 - header_len;
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    auto where = "checkpoint: tensor '" + name + "' in '" + path + "'";
    DI_CHECK(info.is_object() && info.contains("dtype") && info.contains("shape") && info.contains("data_offsets"),
             where + " lacks dtype/shape/data_offsets");
    TensorEntry e;
    e.name = name;
    e.file = file_name;
    std::string dt = info["dtype"].is_string() ? info["dtype"].get<std::string>() : "";
    DI_CHECK(parse_dtype(dt, &e.dtype), where + " has unsupported dtype '" + dt + "'");
    DI_CHECK(info["shape"].is_array(), where + " has a malformed shape");
    for (auto& d : info["shape"]) {
      DI_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, where + " has a malformed shape");
      e.shape.push_back(d.get<int64_t>());
    }
    auto& off = info["data_offsets"];
    DI_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
             where + " has malformed data_offsets");
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    DI_CHECK(begin <= end, where + " has data_offsets with begin > end");
    DI_CHECK(end <= data_size, where + " extends past the end of the file (offset " + std::to_string(end) + " > " +
                                   std::to_string(data_size) + " data bytes): the shard is truncated");
    uint64_t expected = uint64_t(Tensor::numel_of(e.shape)) * dtype_size(e.dtype);
    DI_CHECK(end - begin == expected, where + " holds " + std::to_string(end - begin) + " bytes but " +
                                          dtype_name(e.dtype) + shape_string(e.shape) + " needs " +
                                          std::to_string(expected));
    e.data = base + begin;
    e.nbytes = size_t(end - begin);
    e.path = file.path();
    e.file_offset = size_t(e.data - file.data());
    DI_CHECK(out.emplace(name, std::move(e)).second, "checkpoint: tensor '" + name + "' appears in two shards");
  }
}

}  // namespace

Checkpoint::Checkpoint() = default;
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

Checkpoint Checkpoint::open(const std::string& dir, const LoadProgress& progress) {
  Checkpoint ck;
  ck.dir_ = dir;
  DI_CHECK(fs::is_directory(dir), "checkpoint: '" + dir + "' is not a directory");
  std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  std::string single_path = (fs::path(dir) / "model.safetensors").string();

  // Shard file -> tensors the index says it holds (empty for a single-file checkpoint).
  std::map<std::string, std::set<std::string>> shard_tensors;
  if (fs::exists(index_path)) {
    json index = read_json_file(index_path, "index");
    DI_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
             "checkpoint: index '" + index_path + "' has no 'weight_map' object");
    for (auto& [name, file] : index["weight_map"].items()) {
      DI_CHECK(file.is_string(), "checkpoint: index entry for '" + name + "' is not a file name");
      shard_tensors[file.get<std::string>()].insert(name);
    }
    DI_CHECK(!shard_tensors.empty(), "checkpoint: index '" + index_path + "' lists no tensors");
  } else {
    DI_CHECK(fs::exists(single_path), "checkpoint: '" + dir +
                                          "' has neither model.safetensors.index.json nor model.safetensors");
    shard_tensors["model.safetensors"] = {};
  }

  int done = 0, total = int(shard_tensors.size());
  for (auto& [file_name, names] : shard_tensors) {
    std::string path = (fs::path(dir) / file_name).string();
    DI_CHECK(fs::exists(path), "checkpoint: index points to missing shard '" + file_name + "' (in " + dir + ")");
    if (progress) progress(done, total, file_name);
    ck.files_.push_back(std::make_unique<MappedFile>(path));
    std::map<std::string, TensorEntry> found;
    parse_shard(*ck.files_.back(), file_name, found);
    for (auto& name : names)
      DI_CHECK(found.count(name), "checkpoint: index says tensor '" + name + "' is in '" + file_name +
                                      "' but that shard does not contain it");
    for (auto& [name, e] : found) {
      DI_CHECK(ck.tensors_.emplace(name, e).second, "checkpoint: tensor '" + name + "' appears in two shards");
    }
    ++done;
  }
  if (progress) progress(done, total, "");
  return ck;
}

Checkpoint Checkpoint::open_file(const std::string& path) {
  Checkpoint ck;
  ck.dir_ = fs::path(path).parent_path().string();
  DI_CHECK(fs::is_regular_file(path), "checkpoint: '" + path + "' is not a file");
  ck.files_.push_back(std::make_unique<MappedFile>(path));
  parse_shard(*ck.files_.back(), fs::path(path).filename().string(), ck.tensors_);
  return ck;
}

const TensorEntry& Checkpoint::get(const std::string& name) const {
  auto it = tensors_.find(name);
  DI_CHECK(it != tensors_.end(), "checkpoint: missing tensor '" + name + "' (in " + dir_ + ")");
  return it->second;
}

const TensorEntry& Checkpoint::expect(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const {
  const TensorEntry& e = get(name);
  DI_CHECK(e.dtype == dtype, "checkpoint: tensor '" + name + "' has dtype " + dtype_name(e.dtype) + ", expected " +
                                 dtype_name(dtype));
  DI_CHECK(e.shape == shape, "checkpoint: tensor '" + name + "' has shape " + shape_string(e.shape) + ", expected " +
                                 shape_string(shape));
  return e;
}

std::vector<std::string> Checkpoint::names_with_prefix(const std::string& prefix) const {
  std::vector<std::string> out;
  for (auto it = tensors_.lower_bound(prefix); it != tensors_.end() && it->first.rfind(prefix, 0) == 0; ++it)
    out.push_back(it->first);
  return out;
}

size_t Checkpoint::total_bytes() const {
  size_t n = 0;
  for (auto& [_, e] : tensors_) n += e.nbytes;
  return n;
}

}  // namespace deepinfer

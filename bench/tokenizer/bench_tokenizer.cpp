// Encode throughput of deepinfer::Tokenizer on a corpus file written by run_bench.py.
// Usage: bench_tokenizer TOKENIZER_JSON CORPUS_BIN THREADS REPEATS
// Corpus format: repeated (uint32 little-endian length, bytes). Prints one JSON object.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "text/tokenizer.h"

namespace {

std::vector<std::string> read_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DI_CHECK(in.good(), "cannot open corpus " + path);
  std::vector<std::string> docs;
  uint8_t len_bytes[4];
  while (in.read(reinterpret_cast<char*>(len_bytes), 4)) {
    const uint32_t n = len_bytes[0] | (len_bytes[1] << 8) | (len_bytes[2] << 16) | (uint32_t{len_bytes[3]} << 24);
    std::string doc(n, '\0');
    in.read(doc.data(), n);
    docs.push_back(std::move(doc));
  }
  return docs;
}

// FNV-1a over all ids in document order, to compare the output with the Python reference run.
uint64_t fnv(const std::vector<std::vector<int32_t>>& all) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& ids : all)
    for (int32_t id : ids) {
      h ^= static_cast<uint32_t>(id);
      h *= 1099511628211ull;
    }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON CORPUS_BIN THREADS REPEATS\n", argv[0]);
    return 2;
  }
  try {
    const auto load_start = std::chrono::steady_clock::now();
    const deepinfer::Tokenizer tok = deepinfer::Tokenizer::from_file(argv[1]);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
    const auto docs = read_corpus(argv[2]);
    const int threads = std::stoi(argv[3]), repeats = std::stoi(argv[4]);
    size_t bytes = 0;
    for (const auto& d : docs) bytes += d.size();

    std::vector<std::vector<int32_t>> ids(docs.size());
    std::vector<double> seconds;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          for (size_t i = t; i < docs.size(); i += threads) ids[i] = tok.encode(docs[i], /*allow_special=*/true);
        });
      for (auto& th : pool) th.join();
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    size_t tokens = 0;
    for (const auto& v : ids) tokens += v.size();
    double best = seconds[0];
    for (double s : seconds) best = std::min(best, s);
    std::printf("{\"threads\": %d, \"docs\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"load_s\": %.3f, \"first_s\": %.4f, "
                "\"best_s\": %.4f, \"first_mb_s\": %.2f, \"best_mb_s\": %.2f, \"ids_fnv\": \"%016llx\"}\n",
                threads, docs.size(), bytes, tokens, load_s, seconds[0], best, bytes / seconds[0] / 1e6,
                bytes / best / 1e6, static_cast<unsigned long long>(fnv(ids)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 1;
  }
}

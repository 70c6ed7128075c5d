// CI smoke version of fuzz/tokenizer: replays the seed corpus and a few thousand deterministic mutations
// of it through the same property check the libFuzzer target uses.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tokenizer_roundtrip.h"

namespace deepinfer {
namespace {

std::vector<std::string> seed_corpus() {
  std::vector<std::string> seeds;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(DEEPINFER_SOURCE_DIR) + "/fuzz/tokenizer/corpus")) {
    std::ifstream in(entry.path(), std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return seeds;
}

void expect_holds(const std::string& input) {
  const std::string failure =
      check_tokenizer_roundtrip(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  EXPECT_TRUE(failure.empty()) << failure << " for input of " << input.size() << " bytes";
}

TEST(TokenizerFuzzSmoke, SeedCorpus) {
  const auto seeds = seed_corpus();
  ASSERT_GE(seeds.size(), 5u);
  for (const auto& s : seeds) expect_holds(s);
}

// libFuzzer-style mutations: byte flips, insertions of random bytes, splices of two seeds.
TEST(TokenizerFuzzSmoke, DeterministicMutations) {
  const auto seeds = seed_corpus();
  std::mt19937 rng(12345);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s = seeds[pick(seeds.size())];
    const int edits = 1 + static_cast<int>(pick(8));
    for (int e = 0; e < edits; ++e) {
      switch (pick(4)) {
        case 0: if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng()); break;
        case 1: s.insert(pick(s.size() + 1), 1, static_cast<char>(rng())); break;
        case 2: { const auto& o = seeds[pick(seeds.size())]; const size_t a = pick(o.size()); s.insert(pick(s.size() + 1), o.substr(a, pick(o.size() - a + 1))); break; }
        default: if (!s.empty()) s.erase(pick(s.size()), pick(8)); break;
      }
    }
    expect_holds(s);
    if (HasFailure()) break;
  }
}

}  // namespace
}  // namespace deepinfer

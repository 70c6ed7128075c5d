// libFuzzer target: random bytes through encode/decode (see tokenizer_roundtrip.h for the properties).
#include <cstdio>
#include <cstdlib>

#include "tokenizer_roundtrip.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string failure = deepinfer::check_tokenizer_roundtrip(data, size);
  if (!failure.empty()) {
    std::fprintf(stderr, "tokenizer property violated: %s\n", failure.c_str());
    std::abort();
  }
  return 0;
}

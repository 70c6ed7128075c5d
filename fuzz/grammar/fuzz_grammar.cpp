// libFuzzer target for the grammar front ends (regex, EBNF, JSON Schema) and the matcher; see
// grammar_fuzz_entry.h for the property checked.
//   cmake -S . -B build-gram-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DDEEPINFER_FUZZ=ON -DDEEPINFER_CUDA=OFF
//   cmake --build build-gram-fuzz --target fuzz_grammar
//   build-gram-fuzz/fuzz/grammar/fuzz_grammar -max_total_time=600 -max_len=2048 fuzz/grammar/corpus
#include "grammar_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return deepinfer::grammar::fuzz::run_one(data, size);
}

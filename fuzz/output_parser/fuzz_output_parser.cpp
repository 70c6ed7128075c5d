// libFuzzer target (clang, -DDEEPINFER_FUZZ=ON). CI runs the same entry through test_output_parser_fuzz_smoke.
#include "fuzz/output_parser/output_parser_fuzz_entry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  deepinfer::fuzz_output_parser_one(data, size);
  return 0;
}

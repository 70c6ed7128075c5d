// Property check shared by the libFuzzer target and the CI smoke test that replays a corpus through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace deepinfer {

class Tokenizer;

// The DeepSeek V3 tokenizer from the shared data folder (or $DEEPINFER_FUZZ_TOKENIZER), loaded once.
const Tokenizer& fuzz_tokenizer();

// Encodes the bytes with and without added-token matching and checks: ids are in the vocabulary,
// decode_bytes(encode(x)) == x, streaming decode == whole decode, pre-tokenizer pieces tile the input.
// Returns an empty string when every property holds, otherwise a description of the first violation.
std::string check_tokenizer_roundtrip(const uint8_t* data, size_t size);

}  // namespace deepinfer

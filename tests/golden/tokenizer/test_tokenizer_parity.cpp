// Parity of deepinfer::Tokenizer with HF `tokenizers` on the expected file written by gen_expected.py.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace deepinfer {
namespace {

using nlohmann::json;

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size() && i < 40; ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + (ids.size() > 40 ? ",...]" : "]");
}

struct Counts {
  int texts = 0, plain_ok = 0, special_cases = 0, special_ok = 0, decode_cases = 0, decode_ok = 0,
      roundtrip_ok = 0, stream_ok = 0;
};

class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, MatchesHfTokenizers) {
  const std::string path = std::string(TOKENIZER_EXPECTED_DIR) + "/expected_" + GetParam() + ".jsonl";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing " << path << " (written by the tokenizer_expected_" << GetParam()
                         << " fixture test)";
  std::string line;
  std::getline(in, line);
  const json header = json::parse(line);
  const Tokenizer tok = Tokenizer::from_file(header["tokenizer"].get<std::string>());

  // Vocabulary lookups agree with HF token_to_id (null = absent = -1).
  EXPECT_EQ(tok.vocab_size(), header["vocab_size"].get<size_t>());
  for (const auto& [name, id] : header["ids"].items()) {
    EXPECT_EQ(tok.token_id(name), id.is_null() ? -1 : id.get<int32_t>()) << name;
    if (!id.is_null()) std::printf("[%s] %s = %d\n", GetParam().c_str(), name.c_str(), id.get<int32_t>());
  }

  Counts c;
  int reported = 0;
  auto report = [&](const std::string& what) {
    if (++reported <= 10) ADD_FAILURE() << what;
  };
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    if (j.contains("decode_ids")) {
      ++c.decode_cases;
      const auto ids = j["decode_ids"].get<std::vector<int32_t>>();
      const std::string want = from_hex(j["decoded"].get<std::string>());
      if (tok.decode(ids) == want) ++c.decode_ok;
      else report("decode " + ids_str(ids));
      continue;
    }
    ++c.texts;
    const std::string text = from_hex(j["text"].get<std::string>());
    const auto plain = tok.encode(text, /*allow_special=*/false);
    if (plain == j["plain"].get<std::vector<int32_t>>()) ++c.plain_ok;
    else report("plain text=" + j["text"].get<std::string>() + " got " + ids_str(plain) + " want " +
                ids_str(j["plain"].get<std::vector<int32_t>>()));
    // Round trip on raw bytes holds for every input, valid UTF-8 or not.
    if (tok.decode_bytes(plain) == text) ++c.roundtrip_ok;
    else report("round trip text=" + j["text"].get<std::string>());
    // Streaming decode must equal whole decode.
    StreamingDecoder stream(tok);
    std::string streamed;
    for (int32_t id : plain) streamed += stream.push(id);
    streamed += stream.flush();
    if (streamed == tok.decode(plain)) ++c.stream_ok;
    else report("streaming text=" + j["text"].get<std::string>());
    if (j.contains("special")) {
      ++c.special_cases;
      const auto special = tok.encode(text, /*allow_special=*/true);
      if (special == j["special"].get<std::vector<int32_t>>()) ++c.special_ok;
      else report("special text=" + j["text"].get<std::string>() + " got " + ids_str(special) + " want " +
                  ids_str(j["special"].get<std::vector<int32_t>>()));
      ++c.decode_cases;
      if (tok.decode(special) == from_hex(j["decoded"].get<std::string>())) ++c.decode_ok;
      else report("decode of special ids, text=" + j["text"].get<std::string>());
    }
  }
  std::printf("[%s] texts %d: plain %d/%d, special %d/%d, decode %d/%d, round trip %d, streaming %d\n",
              GetParam().c_str(), c.texts, c.plain_ok, c.texts, c.special_ok, c.special_cases, c.decode_ok,
              c.decode_cases, c.roundtrip_ok, c.stream_ok);
  EXPECT_GE(c.texts, 10000);
  EXPECT_EQ(c.plain_ok, c.texts);
  EXPECT_EQ(c.special_ok, c.special_cases);
  EXPECT_EQ(c.decode_ok, c.decode_cases);
  EXPECT_EQ(c.roundtrip_ok, c.texts);
  EXPECT_EQ(c.stream_ok, c.texts);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, Parity, ::testing::Values("v3", "v4"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace deepinfer

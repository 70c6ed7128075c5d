// Tokenizer unit tests: a tiny hand-built tokenizer.json whose merges can be applied by hand, plus a few
// facts about the DeepSeek V3 file (ids read from the file itself, model-spec.md §7).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"
#include "text/tokenizer_bpe.h"

namespace deepinfer {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

TEST(ByteLevel, Gpt2Alphabet) {
  EXPECT_EQ(uint32_t{byte_level_char('a')}, 0x61u);
  EXPECT_EQ(uint32_t{byte_level_char(' ')}, 0x0120u);   // Ġ
  EXPECT_EQ(uint32_t{byte_level_char('\n')}, 0x010Au);  // Ċ
  EXPECT_EQ(uint32_t{byte_level_char(0x00)}, 0x0100u);
  EXPECT_EQ(uint32_t{byte_level_char(0x7F)}, 0x0121u);  // first byte after the 33 low non-printables
  EXPECT_EQ(uint32_t{byte_level_char(0xAD)}, 0x0143u);  // soft hyphen is the last remapped byte
  EXPECT_EQ(uint32_t{byte_level_char(0xE9)}, 0x00E9u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(byte_of_byte_level_char(byte_level_char(b)), b);
  EXPECT_EQ(byte_of_byte_level_char(U' '), -1);
}

// Tiny tokenizer: ids 0..255 are the bytes, then merged tokens; added tokens <A> (special) and <B>.
json tiny_spec() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  vocab["ab"] = 256;
  vocab["bc"] = 257;
  vocab["abc"] = 258;
  vocab["aa"] = 259;
  vocab["aaaa"] = 260;
  vocab["\xC4\xA0" "a"] = 261;  // "Ġa" = " a"
  auto split = [](const char* pattern) {
    return json{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
  };
  json spec;
  spec["normalizer"] = nullptr;
  json steps = json::array();
  for (const auto& pattern : kDeepseekSplitPatterns) steps.push_back(split(std::string(pattern).c_str()));
  steps.push_back(json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}});
  spec["pre_tokenizer"] = json{{"type", "Sequence"}, {"pretokenizers", steps}};
  spec["decoder"] = {{"type", "ByteLevel"}};
  spec["model"] = {{"type", "BPE"}, {"vocab", vocab},
                   {"merges", {"b c", "a b", "a a", "aa aa", "ab c", "\xC4\xA0 a"}}};
  spec["added_tokens"] = {
      {{"id", 300}, {"content", "<A>"}, {"special", true}, {"normalized", false}},
      {{"id", 301}, {"content", "<AB>"}, {"special", false}, {"normalized", true}},
  };
  return spec;
}

Tokenizer tiny() { return Tokenizer::from_json(tiny_spec().dump()); }

TEST(Bpe, LowestRankMergesFirst) {
  const Tokenizer t = tiny();
  // "abc": (b,c) has rank 0 < (a,b) rank 1, so a|bc; there is no "a bc" merge.
  EXPECT_EQ(t.encode("abc", false), (Ids{'a', 257}));
  // "abbc" -> a b bc -> (a,b) -> ab bc.
  EXPECT_EQ(t.encode("abbc", false), (Ids{256, 257}));
  EXPECT_EQ(t.encode(" a", false), (Ids{261}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.encode("aaa", false), (Ids{259, 'a'}));
  EXPECT_EQ(t.encode("aaaa", false), (Ids{260}));
  EXPECT_EQ(t.encode("aaaaa", false), (Ids{260, 'a'}));
  // A long run goes through the heap path many times: 1001 = 250 * 4 + 1.
  Ids want(250, 260);
  want.push_back('a');
  EXPECT_EQ(t.encode(std::string(1001, 'a'), false), want);
}

TEST(AddedTokens, MatchedOnlyWhenAllowed) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.encode("x<A>y", true), (Ids{'x', 300, 'y'}));
  EXPECT_EQ(t.encode("x<A>y", false), (Ids{'x', '<', 'A', '>', 'y'}));
  // "<AB>" is one added token, even though "<A" starts like the other one.
  EXPECT_EQ(t.encode("<AB>", true), (Ids{301}));
  // Raw (normalized=false) tokens are matched in a first pass over the whole text.
  EXPECT_EQ(t.encode("<A><AB>", true), (Ids{300, 301}));
  EXPECT_EQ(t.token_id("<A>"), 300);
  EXPECT_EQ(t.token_id("ab"), 256);
  EXPECT_EQ(t.token_id("nope"), -1);
  EXPECT_TRUE(t.is_special(300));
  EXPECT_FALSE(t.is_special(301));
  EXPECT_EQ(t.token_text(258), "abc");
  EXPECT_EQ(t.vocab_size(), 302u);
}

TEST(Decode, BytesTextAndErrors) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.decode(Ids{261, 256, 300}), " aab<A>");
  EXPECT_EQ(t.decode(Ids{0xC3}), "\xEF\xBF\xBD");  // lone lead byte -> U+FFFD
  EXPECT_EQ(t.decode_bytes(Ids{0xC3}), "\xC3");
  EXPECT_THROW(t.decode(Ids{-1}), Error);
  EXPECT_THROW(t.decode(Ids{302}), Error);
  EXPECT_THROW(t.decode(Ids{280}), Error);  // a hole in the id space
}

TEST(StreamingDecoder, HoldsBackSplitCharacters) {
  const Tokenizer t = tiny();
  StreamingDecoder d(t);
  EXPECT_EQ(d.push('h'), "h");
  EXPECT_EQ(d.push(0xE4), "");  // 中 = E4 B8 AD
  EXPECT_EQ(d.push(0xB8), "");
  EXPECT_EQ(d.push(0xAD), "\xE4\xB8\xAD");
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.push('x'), "\xEF\xBF\xBDx");  // the sequence broke: replaced, as a whole decode would
  EXPECT_EQ(d.push(0xC3), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(d.flush(), "");
}

TEST(Load, RejectsWhatItCannotReproduce) {
  EXPECT_THROW(Tokenizer::from_file("/nonexistent/tokenizer.json"), Error);
  EXPECT_THROW(Tokenizer::from_json("{not json"), Error);
  json spec = tiny_spec();
  spec["pre_tokenizer"]["pretokenizers"][2]["pattern"]["Regex"] = "\\s+";
  EXPECT_THROW(Tokenizer::from_json(spec.dump()), Error);
  spec = tiny_spec();
  spec["model"]["merges"].push_back("zz q");
  EXPECT_THROW(Tokenizer::from_json(spec.dump()), Error);
  spec = tiny_spec();
  spec["added_tokens"][0]["lstrip"] = true;
  EXPECT_THROW(Tokenizer::from_json(spec.dump()), Error);
  spec = tiny_spec();
  spec["model"]["byte_fallback"] = true;
  EXPECT_THROW(Tokenizer::from_json(spec.dump()), Error);
}

const std::string kV3Path = std::string(DEEPINFER_SOURCE_DIR) + "/../shared/data/tokenizers/deepseek-v3/tokenizer.json";

TEST(DeepseekV3File, SpecialIdsAndPlainUserText) {
  const Tokenizer t = Tokenizer::from_file(kV3Path);
  // model-spec.md §7 and tokenizer.json added_tokens: BOS 0, EOS 1, PAD 2, ids 128000..128814 added.
  EXPECT_EQ(t.vocab_size(), 128815u);
  EXPECT_EQ(t.token_id("<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"), 0);
  EXPECT_EQ(t.token_id("<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"), 1);
  const std::string user = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";
  EXPECT_EQ(t.token_id(user), 128803);
  EXPECT_EQ(t.encode(user, true), (Ids{128803}));
  // serving.md §1.3: typed by a user it is ordinary BPE over the pieces "<｜", "User", "｜>".
  const Ids plain = t.encode(user, false);
  EXPECT_GE(plain.size(), 3u);
  for (int32_t id : plain) EXPECT_LT(id, 128000);
  EXPECT_EQ(t.decode(plain), user);
  EXPECT_EQ(t.encode("Hello", false).size(), 1u);  // a common English word is one token
}

}  // namespace
}  // namespace deepinfer

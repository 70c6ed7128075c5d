#include "text/tokenizer.h"

#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/pretokenize.h"
#include "text/tokenizer_added_tokens.h"
#include "text/tokenizer_bpe.h"
#include "text/unicode.h"

namespace deepinfer {

using nlohmann::json;

struct Tokenizer::Impl {
  std::vector<std::string> text_of_id;   // spelling as stored in tokenizer.json
  std::vector<std::string> bytes_of_id;  // what the ByteLevel decoder turns the spelling into
  std::vector<uint8_t> present;          // 1 if the id has a token
  std::vector<uint8_t> special;          // 1 for added tokens with "special": true
  std::unordered_map<std::string, int32_t> id_of_text;
  std::unique_ptr<BytePairModel> bpe;
  // HF matches added tokens in two passes: first those with "normalized": false on the raw text, then
  // those with "normalized": true on the normalized remainder (the normalizer is empty here).
  AddedTokenMatcher raw_added, normalized_added;

  void encode_plain(std::string_view text, std::vector<int32_t>& ids) const;
  void encode_normalized_added(std::string_view text, std::vector<int32_t>& ids) const;
  void check_id(int32_t id) const;
};

namespace {

std::string json_type_name(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

bool is_null_or_empty_string(const json& j, const char* key) {
  return !j.contains(key) || j[key].is_null() || (j[key].is_string() && j[key].get<std::string>().empty());
}

// The pipeline must be the one pretokenize() implements (model-spec.md §7: use tokenizer.json verbatim;
// we implement exactly that regex sequence and refuse anything else rather than tokenize differently).
void check_pre_tokenizer(const json& pt) {
  const std::string what = "tokenizer.json: unsupported pre_tokenizer (only the DeepSeek V3/V4 Split sequence "
                           "+ ByteLevel is implemented): ";
  DI_CHECK(json_type_name(pt, "type") == "Sequence" && pt.contains("pretokenizers") &&
               pt["pretokenizers"].is_array() && pt["pretokenizers"].size() == 4,
           what + "expected a Sequence of 4 steps");
  const json& steps = pt["pretokenizers"];
  for (int i = 0; i < 3; ++i) {
    const json& s = steps[i];
    const bool ok = json_type_name(s, "type") == "Split" && json_type_name(s, "behavior") == "Isolated" &&
                    s.value("invert", false) == false && s.contains("pattern") && s["pattern"].is_object() &&
                    s["pattern"].contains("Regex") && s["pattern"]["Regex"].is_string() &&
                    s["pattern"]["Regex"].get<std::string>() == kDeepseekSplitPatterns[i];
    DI_CHECK(ok, what + "step " + std::to_string(i) + " is not Split(Isolated) with the expected regex");
  }
  const json& bl = steps[3];
  DI_CHECK(json_type_name(bl, "type") == "ByteLevel" && bl.value("add_prefix_space", true) == false &&
               bl.value("use_regex", true) == false,
           what + "last step must be ByteLevel(add_prefix_space=false, use_regex=false)");
}

void check_supported(const json& root) {
  DI_CHECK(root.is_object(), "tokenizer.json: top level is not an object");
  const json& normalizer = root.value("normalizer", json());
  DI_CHECK(normalizer.is_null() || (json_type_name(normalizer, "type") == "Sequence" &&
                                    normalizer.value("normalizers", json::array()).empty()),
           "tokenizer.json: only an empty normalizer is supported");
  DI_CHECK(root.contains("pre_tokenizer"), "tokenizer.json: missing pre_tokenizer");
  check_pre_tokenizer(root["pre_tokenizer"]);
  DI_CHECK(json_type_name(root.value("decoder", json()), "type") == "ByteLevel",
           "tokenizer.json: only the ByteLevel decoder is supported");
  DI_CHECK(root.contains("model") && root["model"].is_object(), "tokenizer.json: missing model");
  const json& model = root["model"];
  DI_CHECK(json_type_name(model, "type") == "BPE", "tokenizer.json: model.type must be BPE");
  DI_CHECK(model.value("dropout", json()).is_null() && !model.value("byte_fallback", false) &&
               !model.value("ignore_merges", false) && is_null_or_empty_string(model, "continuing_subword_prefix") &&
               is_null_or_empty_string(model, "end_of_word_suffix"),
           "tokenizer.json: BPE options dropout/byte_fallback/ignore_merges/subword affixes are not supported");
  DI_CHECK(model.contains("vocab") && model["vocab"].is_object(), "tokenizer.json: model.vocab missing");
  DI_CHECK(model.contains("merges") && model["merges"].is_array(), "tokenizer.json: model.merges missing");
}

std::vector<std::pair<std::string, std::string>> read_merges(const json& merges) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    if (m.is_string()) {  // legacy form "left right"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      DI_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
               "tokenizer.json: merge " + std::to_string(rank) + " is not two tokens: '" + s + "'");
      out.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {
      DI_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
               "tokenizer.json: merge " + std::to_string(rank) + " is not a pair of strings");
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
  return out;
}

// HF ByteLevel decoder, per token: if every character is in the byte-level alphabet the token stands for
// those bytes, otherwise (added tokens such as `<｜User｜>`) for its own UTF-8 spelling.
std::string byte_level_decode(const std::string& spelling) {
  std::string bytes;
  for (size_t pos = 0; pos < spelling.size();) {
    const Utf8Char c = decode_utf8(spelling, pos);
    const int b = c.cp == kInvalidCodePoint ? -1 : byte_of_byte_level_char(c.cp);
    if (b < 0) return spelling;
    bytes.push_back(static_cast<char>(b));
    pos += c.len;
  }
  return bytes;
}

void place_token(Tokenizer::Impl& impl, int32_t id, const std::string& spelling) {
  DI_CHECK(id >= 0 && id < (1 << 24), "tokenizer.json: token id " + std::to_string(id) + " out of range");
  if (static_cast<size_t>(id) >= impl.text_of_id.size()) {
    const size_t n = static_cast<size_t>(id) + 1;
    impl.text_of_id.resize(n);
    impl.bytes_of_id.resize(n);
    impl.present.resize(n, 0);
    impl.special.resize(n, 0);
  }
  impl.text_of_id[id] = spelling;
  impl.bytes_of_id[id] = byte_level_decode(spelling);
  impl.present[id] = 1;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DI_CHECK(in.good(), "cannot open tokenizer file '" + path + "'");
  std::ostringstream buf;
  buf << in.rdbuf();
  try {
    return from_json(buf.str());
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

Tokenizer Tokenizer::from_json(std::string_view json_text) {
  json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  DI_CHECK(!root.is_discarded(), "tokenizer.json: not valid JSON");
  check_supported(root);
  auto impl = std::make_unique<Impl>();

  const json& model = root["model"];
  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(model["vocab"].size());
  for (const auto& [spelling, id] : model["vocab"].items()) {
    DI_CHECK(id.is_number_integer(), "tokenizer.json: vocab entry '" + spelling + "' has a non-integer id");
    vocab.emplace(spelling, id.get<int32_t>());
    place_token(*impl, id.get<int32_t>(), spelling);
  }
  impl->bpe = std::make_unique<BytePairModel>(vocab, read_merges(model["merges"]));
  impl->id_of_text = std::move(vocab);

  for (const json& t : root.value("added_tokens", json::array())) {
    DI_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                 t["content"].is_string(),
             "tokenizer.json: malformed added_tokens entry");
    const auto id = t["id"].get<int32_t>();
    const auto content = t["content"].get<std::string>();
    // lstrip/rstrip/single_word change how matches absorb surrounding text; no DeepSeek token uses them.
    DI_CHECK(!t.value("lstrip", false) && !t.value("rstrip", false) && !t.value("single_word", false),
             "tokenizer.json: added token '" + content + "' uses lstrip/rstrip/single_word (unsupported)");
    place_token(*impl, id, content);
    impl->special[id] = t.value("special", false) ? 1 : 0;
    impl->id_of_text[content] = id;  // HF resolves a spelling through the added vocabulary first
    (t.value("normalized", false) ? impl->normalized_added : impl->raw_added).add(content, id);
  }
  DI_CHECK(!impl->text_of_id.empty(), "tokenizer.json: empty vocabulary");
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& ids) const {
  thread_local std::vector<std::string_view> pieces;
  pieces.clear();
  pretokenize(text, pieces);
  for (std::string_view piece : pieces) bpe->encode_piece(piece, ids);
}

void Tokenizer::Impl::encode_normalized_added(std::string_view text, std::vector<int32_t>& ids) const {
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedTokenMatcher::Match m = normalized_added.find(text, pos);
    const size_t gap_end = m.begin == AddedTokenMatcher::kNone ? text.size() : m.begin;
    // Each gap between added tokens is pre-tokenized on its own, so no piece spans a token.
    if (gap_end > pos) encode_plain(text.substr(pos, gap_end - pos), ids);
    if (m.begin == AddedTokenMatcher::kNone) break;
    ids.push_back(m.id);
    pos = m.end;
  }
}

// Invalid UTF-8 is accepted: pre-tokenization treats each ill-formed byte as one character of class
// Other (like an unassigned code point), and BPE runs on the raw bytes, so decode(encode(x)) == x for
// every byte string x.
std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (!allow_special) {
    impl_->encode_plain(text, ids);
    return ids;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedTokenMatcher::Match m = impl_->raw_added.find(text, pos);
    const size_t gap_end = m.begin == AddedTokenMatcher::kNone ? text.size() : m.begin;
    if (gap_end > pos) impl_->encode_normalized_added(text.substr(pos, gap_end - pos), ids);
    if (m.begin == AddedTokenMatcher::kNone) break;
    ids.push_back(m.id);
    pos = m.end;
  }
  return ids;
}

void Tokenizer::Impl::check_id(int32_t id) const {
  DI_CHECK(id >= 0 && static_cast<size_t>(id) < present.size() && present[id],
           "token id " + std::to_string(id) + " is not in the vocabulary (size " + std::to_string(present.size()) +
               ")");
}

void Tokenizer::append_token_bytes(int32_t id, std::string& out) const {
  impl_->check_id(id);
  out.append(impl_->bytes_of_id[id]);
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) append_token_bytes(id, out);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  append_utf8_lossy(decode_bytes(ids), text);
  return text;
}

int32_t Tokenizer::token_id(std::string_view token) const {
  auto it = impl_->id_of_text.find(std::string(token));
  return it == impl_->id_of_text.end() ? -1 : it->second;
}

std::string_view Tokenizer::token_text(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->text_of_id.size()) return {};
  return impl_->text_of_id[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[id];
}

size_t Tokenizer::vocab_size() const { return impl_->text_of_id.size(); }

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

// Emitting everything except a trailing incomplete-but-valid prefix keeps the output identical to
// decoding the whole stream at once: the held bytes start a new sequence, so the lossy decoder reaches
// them in the same state either way.
std::string StreamingDecoder::push(int32_t id) {
  tokenizer_->append_token_bytes(id, pending_);
  const size_t hold = utf8_incomplete_tail(pending_);
  std::string text;
  append_utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - hold), text);
  pending_.erase(0, pending_.size() - hold);
  return text;
}

std::string StreamingDecoder::flush() {
  std::string text;
  append_utf8_lossy(pending_, text);
  pending_.clear();
  return text;
}

}  // namespace deepinfer

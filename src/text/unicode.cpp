#include "text/unicode.h"

namespace deepinfer {

namespace unicode_detail {
extern const char kUnicodeVersion[];
extern const int kBlockBits;
extern const uint16_t kBlockOfChunk[];
extern const uint8_t kClassRows[];
}  // namespace unicode_detail

CharClass char_class(char32_t cp) {
  using namespace unicode_detail;
  if (cp > 0x10FFFF) return CharClass::Other;
  const uint32_t block = kBlockOfChunk[cp >> kBlockBits];
  return static_cast<CharClass>(kClassRows[(block << kBlockBits) | (cp & ((1u << kBlockBits) - 1))]);
}

const char* unicode_version() { return unicode_detail::kUnicodeVersion; }

namespace {

// Unicode Table 3-7 (well-formed UTF-8): total length for a lead byte (0 = cannot start a sequence) and
// the allowed range of the second byte; later bytes are always 80..BF.
struct LeadInfo {
  uint8_t len, lo, hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // excludes surrogates
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};  // excludes overlongs
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // excludes > U+10FFFF
  return {0, 0, 0};
}

// Number of bytes from pos that form a valid prefix of the sequence started at pos (>= 1 when the lead
// byte can start a sequence), and the sequence's full length.
struct PrefixScan {
  uint32_t valid;
  uint32_t full;
};

PrefixScan scan_sequence(std::string_view s, size_t pos) {
  const LeadInfo info = lead_info(static_cast<uint8_t>(s[pos]));
  if (info.len <= 1) return {info.len, info.len};
  uint32_t valid = 1;
  while (valid < info.len && pos + valid < s.size()) {
    const uint8_t b = static_cast<uint8_t>(s[pos + valid]);
    const bool ok = valid == 1 ? (b >= info.lo && b <= info.hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++valid;
  }
  return {valid, info.len};
}

}  // namespace

Utf8Char decode_utf8(std::string_view s, size_t pos) {
  const uint8_t b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return {b0, 1};
  const PrefixScan scan = scan_sequence(s, pos);
  if (scan.full == 0 || scan.valid < scan.full) return {kInvalidCodePoint, 1};
  char32_t cp = b0 & (0x7F >> scan.full);
  for (uint32_t i = 1; i < scan.full; ++i) cp = (cp << 6) | (static_cast<uint8_t>(s[pos + i]) & 0x3F);
  return {cp, scan.full};
}

void append_utf8_lossy(std::string_view s, std::string& out) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  size_t pos = 0;
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      out.push_back(s[pos++]);
      continue;
    }
    const PrefixScan scan = scan_sequence(s, pos);
    if (scan.full != 0 && scan.valid == scan.full) {
      out.append(s.substr(pos, scan.full));
      pos += scan.full;
    } else {
      out.append(kReplacement);
      pos += scan.valid == 0 ? 1 : scan.valid;  // one U+FFFD per maximal subpart
    }
  }
}

size_t utf8_incomplete_tail(std::string_view s) {
  // A lead byte at most 3 bytes from the end whose sequence is valid so far but not finished.
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const size_t pos = s.size() - back;
    const uint8_t b = static_cast<uint8_t>(s[pos]);
    if (b >= 0x80 && b <= 0xBF) continue;  // continuation byte: keep looking for the lead
    const PrefixScan scan = scan_sequence(s, pos);
    return (scan.full > back && scan.valid == back) ? back : 0;
  }
  return 0;
}

}  // namespace deepinfer

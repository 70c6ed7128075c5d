// JSON Schema front end -> grammar IR. Objects, arrays, unions and $ref targets get their own rules;
// scalars are inlined into the rule that uses them. Properties are emitted in schema order (required ones
// must appear, optional ones may be skipped), the way xgrammar and llguidance do it.
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {
namespace {

using json = nlohmann::ordered_json;

const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                            "definitions", "$anchor"};
const std::set<std::string> kKnown = {"type", "properties", "required", "additionalProperties", "enum", "const",
                                      "items", "prefixItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf",
                                      "$ref", "format", "pattern", "minLength", "maxLength", "minimum", "maximum",
                                      "exclusiveMinimum", "exclusiveMaximum", "uniqueItems"};

class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, const JsonSchemaOptions& o) : root_(root), o_(o) {}

  Grammar run() {
    int32_t r = g_.add_rule("root");
    g_.root = r;
    g_.rules[r].body = Expr::seq({ws(), schema(root_, "#", 0), ws()});
    compile(g_, o_.limits);
    return std::move(g_);
  }

 private:
  [[noreturn]] static void fail(const std::string& path, const std::string& what) {
    throw Error("JSON Schema: " + what + " (at " + path + ")");
  }

  Expr ws() { return o_.any_whitespace ? Expr::star(Expr::bytes({{'\t', '\n'}, {'\r', '\r'}, {' ', ' '}})) : Expr(); }
  Expr sep(char c) { return Expr::seq({ws(), Expr::literal(std::string(1, c)), ws()}); }

  int32_t new_rule(const std::string& base, Expr body) {
    return g_.add_rule(base + "_" + std::to_string(g_.rules.size()), std::move(body));
  }

  static Expr json_char() {
    // unescaped: any code point except " \ and controls; escaped: \" \\ \/ \b \f \n \r \t \uXXXX
    Expr plain = utf8_expr({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}});
    Expr hex = Expr::bytes({{'0', '9'}, {'A', 'F'}, {'a', 'f'}});
    Expr esc = Expr::seq({Expr::literal("\\"),
                          Expr::alt({Expr::bytes({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'},
                                                  {'n', 'n'}, {'r', 'r'}, {'t', 't'}}),
                                     Expr::seq({Expr::literal("u"), Expr::repeat(hex, 4, 4)})})});
    return Expr::alt({std::move(plain), std::move(esc)});
  }
  static Expr quoted(Expr body) { return Expr::seq({Expr::literal("\""), std::move(body), Expr::literal("\"")}); }
  static Expr any_string() { return quoted(Expr::star(json_char())); }
  static Expr digits1() { return Expr::plus(Expr::byte_range('0', '9')); }
  static Expr nat() {
    return Expr::alt({Expr::literal("0"), Expr::seq({Expr::byte_range('1', '9'), Expr::star(Expr::byte_range('0', '9'))})});
  }
  static Expr frac_exp() {
    return Expr::seq({Expr::opt(Expr::seq({Expr::literal("."), digits1()})),
                      Expr::opt(Expr::seq({Expr::bytes({{'E', 'E'}, {'e', 'e'}}),
                                           Expr::opt(Expr::bytes({{'+', '+'}, {'-', '-'}})), digits1()}))});
  }
  static Expr any_integer() { return Expr::seq({Expr::opt(Expr::literal("-")), nat()}); }
  static Expr any_number() { return Expr::seq({any_integer(), frac_exp()}); }

  int32_t any_value_rule() {
    if (any_value_ >= 0) return any_value_;
    any_value_ = g_.add_rule("any_value");
    Expr v = Expr::ref(any_value_);
    Expr kv = Expr::seq({any_string(), sep(':'), v});
    Expr obj = Expr::seq({Expr::literal("{"), ws(), Expr::opt(Expr::seq({kv, Expr::star(Expr::seq({sep(','), kv}))})),
                          ws(), Expr::literal("}")});
    Expr arr = Expr::seq({Expr::literal("["), ws(), Expr::opt(Expr::seq({v, Expr::star(Expr::seq({sep(','), v}))})),
                          ws(), Expr::literal("]")});
    g_.rules[any_value_].body = Expr::alt({std::move(obj), std::move(arr), any_string(), any_number(),
                                           Expr::literal("true"), Expr::literal("false"), Expr::literal("null")});
    return any_value_;
  }

  // ---- integer ranges (exact decimal languages) ----
  // Same-length decimal strings between lo and hi (inclusive), lo <= hi.
  static Expr same_len(const std::string& lo, const std::string& hi) {
    if (lo.empty()) return Expr();
    if (lo.size() == 1) return Expr::byte_range(uint8_t(lo[0]), uint8_t(hi[0]));
    if (lo[0] == hi[0]) return Expr::seq({Expr::literal(lo.substr(0, 1)), same_len(lo.substr(1), hi.substr(1))});
    size_t r = lo.size() - 1;
    std::vector<Expr> alts;
    alts.push_back(Expr::seq({Expr::literal(lo.substr(0, 1)), same_len(lo.substr(1), std::string(r, '9'))}));
    if (hi[0] - lo[0] >= 2)
      alts.push_back(Expr::seq({Expr::byte_range(uint8_t(lo[0] + 1), uint8_t(hi[0] - 1)),
                                Expr::repeat(Expr::byte_range('0', '9'), int32_t(r), int32_t(r))}));
    alts.push_back(Expr::seq({Expr::literal(hi.substr(0, 1)), same_len(std::string(r, '0'), hi.substr(1))}));
    return Expr::alt(std::move(alts));
  }
  // Non-negative integers in [a, b] (b < 0: unbounded), canonical spelling.
  static Expr nonneg_range(long long a, long long b) {
    std::vector<Expr> alts;
    std::string as = std::to_string(a);
    size_t la = as.size();
    if (b < 0) {
      alts.push_back(same_len(as, std::string(la, '9')));
      alts.push_back(Expr::seq({Expr::byte_range('1', '9'), Expr::repeat(Expr::byte_range('0', '9'), int32_t(la), -1)}));
    } else {
      std::string bs = std::to_string(b);
      for (size_t L = la; L <= bs.size(); ++L)
        alts.push_back(same_len(L == la ? as : "1" + std::string(L - 1, '0'), L == bs.size() ? bs : std::string(L, '9')));
    }
    return Expr::alt(std::move(alts));
  }
  Expr int_range(bool has_lo, long long lo, bool has_hi, long long hi, const std::string& path) {
    if (has_lo && has_hi && lo > hi) fail(path, "integer bounds are empty (minimum > maximum)");
    std::vector<Expr> alts;
    long long upper = has_hi ? std::min(hi, -1LL) : -1;
    if (!has_lo || lo <= upper)
      alts.push_back(Expr::seq({Expr::literal("-"), nonneg_range(-upper, has_lo ? -lo : -1)}));
    long long a = has_lo ? std::max(lo, 0LL) : 0;
    if (!has_hi || a <= hi) alts.push_back(nonneg_range(a, has_hi ? hi : -1));
    if (alts.empty()) fail(path, "integer bounds are empty");
    return Expr::alt(std::move(alts));
  }

  // A count keyword (minLength, maxItems, ...): a non-negative integer, `absent` when not given.
  static long long count_keyword(const json& s, const char* key, const std::string& path, long long absent) {
    if (!s.contains(key)) return absent;
    if (!s[key].is_number_unsigned()) fail(path, std::string("'") + key + "' must be a non-negative integer");
    return s[key].get<long long>();
  }

  static bool get_int_bound(const json& v, bool upper, bool exclusive, long long& out) {
    if (!v.is_number()) return false;
    double d = v.get<double>();
    if (!std::isfinite(d) || std::fabs(d) > 9e17) return false;
    double r = upper ? std::floor(d) : std::ceil(d);
    if (exclusive && r == d) r += upper ? -1 : 1;
    out = (long long)r;
    return true;
  }

  Expr integer(const json& s, const std::string& path) {
    bool has_lo = false, has_hi = false;
    long long lo = 0, hi = 0;
    auto bound = [&](const char* key, bool upper, bool exclusive) {
      if (!s.contains(key)) return;
      const json& v = s[key];
      if (v.is_boolean()) fail(path, std::string("boolean '") + key + "' (draft 4 style) is not supported");
      long long x;
      if (!get_int_bound(v, upper, exclusive, x)) fail(path, std::string("'") + key + "' must be a number within +-9e17");
      if (upper) { hi = has_hi ? std::min(hi, x) : x; has_hi = true; }
      else { lo = has_lo ? std::max(lo, x) : x; has_lo = true; }
    };
    bound("minimum", false, false);
    bound("exclusiveMinimum", false, true);
    bound("maximum", true, false);
    bound("exclusiveMaximum", true, true);
    if (!has_lo && !has_hi) return any_integer();
    return int_range(has_lo, lo, has_hi, hi, path);
  }

  Expr number(const json& s, const std::string& path) {
    for (const char* k : {"maximum", "exclusiveMaximum", "exclusiveMinimum"})
      if (s.contains(k))
        fail(path, std::string("'") + k + "' on type 'number' is not supported (only 'minimum': 0 is; use type 'integer' for other bounds)");
    if (s.contains("minimum")) {
      const json& m = s["minimum"];
      if (!m.is_number() || m.get<double>() != 0.0)
        fail(path, "'minimum' on type 'number' is only supported as 0");
      return Expr::seq({nat(), frac_exp()});
    }
    return any_number();
  }

  Expr format(const std::string& f, const std::string& path) {
    auto rx = [&](const char* p) { return quoted(regex_to_expr(p, true, o_.limits)); };
    const char* day31 = "(0[1-9]|[12][0-9]|3[01])";
    (void)day31;
    std::string date =
        "(000[1-9]|00[1-9][0-9]|0[1-9][0-9][0-9]|[1-9][0-9]{3})-"
        "((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))";
    std::string time = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    if (f == "date") return rx(date.c_str());
    if (f == "time") return rx(time.c_str());
    if (f == "date-time") return rx((date + "T" + time).c_str());
    if (f == "uuid") return rx("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}");
    if (f == "ipv4")
      return rx("(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}");
    if (f == "email") return rx("[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(\\.[A-Za-z0-9-]{1,63})*\\.[A-Za-z]{2,24}");
    fail(path, "unsupported string format '" + f + "' (supported: date, time, date-time, uuid, ipv4, email)");
  }

  Expr string(const json& s, const std::string& path) {
    bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format")) {
      if (!s["format"].is_string()) fail(path, "'format' must be a string");
      if (has_len || s.contains("pattern")) fail(path, "'format' combined with 'pattern'/'minLength'/'maxLength' is not supported");
      return format(s["format"].get<std::string>(), path);
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) fail(path, "'pattern' must be a string");
      if (has_len) fail(path, "'pattern' combined with 'minLength'/'maxLength' is not supported");
      bool as = false, ae = false;
      Expr body;
      try {
        body = regex_to_expr(s["pattern"].get<std::string>(), true, o_.limits, &as, &ae);
      } catch (const Error& e) {
        fail(path, std::string("in 'pattern': ") + e.what());
      }
      // JSON Schema patterns search anywhere in the string unless anchored.
      std::vector<Expr> parts;
      if (!as) parts.push_back(Expr::star(json_char()));
      parts.push_back(std::move(body));
      if (!ae) parts.push_back(Expr::star(json_char()));
      return quoted(Expr::seq(std::move(parts)));
    }
    long long mn = count_keyword(s, "minLength", path, 0), mx = count_keyword(s, "maxLength", path, -1);
    if (mx >= 0 && mx < mn) fail(path, "'maxLength' < 'minLength'");
    if (mn > (long long)o_.limits.max_repeat || mx > (long long)o_.limits.max_repeat)
      fail(path, "'minLength'/'maxLength' above the limit " + std::to_string(o_.limits.max_repeat));
    return quoted(Expr::repeat(json_char(), int32_t(mn), int32_t(mx)));
  }

  Expr array(const json& s, const std::string& path, int depth) {
    if (s.contains("uniqueItems") && s["uniqueItems"] != false)
      fail(path, "'uniqueItems': true is not supported (not expressible as a grammar)");
    std::vector<Expr> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) fail(path, "'prefixItems' must be an array");
      for (size_t i = 0; i < s["prefixItems"].size(); ++i)
        prefix.push_back(schema(s["prefixItems"][i], path + "/prefixItems/" + std::to_string(i), depth + 1));
    }
    bool items_allowed = true;
    Expr item;
    if (s.contains("items")) {
      const json& it = s["items"];
      if (it.is_array()) fail(path, "array-form 'items' (draft 4 tuples) is not supported; use 'prefixItems'");
      if (it.is_boolean() && !it.get<bool>()) items_allowed = false;
      else item = schema(it, path + "/items", depth + 1);
    } else {
      item = Expr::ref(any_value_rule());
    }
    long long mn = count_keyword(s, "minItems", path, 0), mx = count_keyword(s, "maxItems", path, -1);
    long long k = (long long)prefix.size();
    if (!items_allowed) mx = mx < 0 ? k : std::min(mx, k);
    if (mx >= 0 && mx < mn) fail(path, "'maxItems' < 'minItems' (or 'items': false with fewer prefixItems than minItems)");
    if (mn > (long long)o_.limits.max_repeat || mx > (long long)o_.limits.max_repeat)
      fail(path, "'minItems'/'maxItems' above the limit " + std::to_string(o_.limits.max_repeat));
    // build(i): elements i.. given element i is present
    std::function<Expr(long long)> build = [&](long long i) -> Expr {
      if (i >= k) {
        long long min_rem = std::max(0LL, mn - i), max_rem = mx < 0 ? -1 : mx - i;
        // element i present: I (sep I){max(min_rem-1,0), max_rem-1}
        return Expr::seq({item, Expr::repeat(Expr::seq({sep(','), item}), int32_t(std::max(0LL, min_rem - 1)),
                                             max_rem < 0 ? -1 : int32_t(max_rem - 1))});
      }
      Expr rest;
      if (mx < 0 || i + 1 < mx) {
        Expr more = Expr::seq({sep(','), build(i + 1)});
        rest = i + 1 >= mn ? Expr::opt(std::move(more)) : std::move(more);
      }
      return Expr::seq({prefix[size_t(i)], std::move(rest)});
    };
    Expr body;
    if (mx != 0) body = mn == 0 ? Expr::opt(build(0)) : build(0);
    return Expr::ref(new_rule("array", Expr::seq({Expr::literal("["), ws(), std::move(body), ws(), Expr::literal("]")})));
  }

  Expr object(const json& s, const std::string& path, int depth) {
    struct Prop {
      std::string name;
      Expr value;
      bool required;
    };
    std::vector<Prop> props;
    std::set<std::string> req;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(path, "'required' must be an array of strings");
      for (auto& r : s["required"]) {
        if (!r.is_string()) fail(path, "'required' must be an array of strings");
        req.insert(r.get<std::string>());
      }
    }
    std::set<std::string> seen;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) fail(path, "'properties' must be an object");
      for (auto& [name, sub] : s["properties"].items()) {
        props.push_back({name, schema(sub, path + "/properties/" + name, depth + 1), req.count(name) > 0});
        seen.insert(name);
      }
    }
    // additional properties
    bool add_allowed;
    Expr add_value;
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (a.is_boolean()) {
        add_allowed = a.get<bool>();
        if (add_allowed) add_value = Expr::ref(any_value_rule());
      } else {
        add_allowed = true;
        add_value = schema(a, path + "/additionalProperties", depth + 1);
      }
    } else {
      add_allowed = !o_.strict;
      if (add_allowed) add_value = Expr::ref(any_value_rule());
    }
    for (const std::string& r : req)
      if (!seen.count(r)) {
        if (!add_allowed)
          fail(path, "required property '" + r + "' is not in 'properties' and additional properties are not allowed");
        props.push_back({r, add_value, true});
      }
    auto kv = [&](const Prop& p) {
      return Expr::seq({Expr::literal(json(p.name).dump()), sep(':'), p.value});
    };
    Expr add_kv;
    if (add_allowed) add_kv = Expr::seq({any_string(), sep(':'), add_value});
    auto tail = [&](size_t from) {
      std::vector<Expr> parts;
      for (size_t j = from; j < props.size(); ++j) {
        Expr e = Expr::seq({sep(','), kv(props[j])});
        parts.push_back(props[j].required ? std::move(e) : Expr::opt(std::move(e)));
      }
      if (add_allowed) parts.push_back(Expr::star(Expr::seq({sep(','), add_kv})));
      return Expr::seq(std::move(parts));
    };
    size_t first_req = props.size();
    for (size_t i = 0; i < props.size(); ++i)
      if (props[i].required) { first_req = i; break; }
    if ((std::min(first_req, props.size() - (props.empty() ? 0 : 1)) + 1) * props.size() > 20000)
      fail(path, "too many optional properties before the first required one (" + std::to_string(first_req) +
                     " x " + std::to_string(props.size()) + " alternatives; limit 20000)");
    std::vector<Expr> alts;
    for (size_t i = 0; i < props.size() && i <= first_req; ++i) alts.push_back(Expr::seq({kv(props[i]), tail(i + 1)}));
    bool optional_all = first_req == props.size();
    if (optional_all && add_allowed) alts.push_back(Expr::seq({add_kv, Expr::star(Expr::seq({sep(','), add_kv}))}));
    Expr body = alts.empty() ? Expr() : optional_all ? Expr::opt(Expr::alt(std::move(alts))) : Expr::alt(std::move(alts));
    return Expr::ref(new_rule("object", Expr::seq({Expr::literal("{"), ws(), std::move(body), ws(), Expr::literal("}")})));
  }

  // ---- $ref ----
  const json& resolve(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#') fail(path, "'$ref' to '" + ref + "' is not supported (only local refs '#/...')");
    const json* cur = &root_;
    size_t i = 1;
    if (i < ref.size() && ref[i] != '/') fail(path, "'$ref' '" + ref + "' is not a JSON pointer");
    while (i < ref.size()) {
      size_t j = ref.find('/', i + 1);
      std::string tok = ref.substr(i + 1, j == std::string::npos ? std::string::npos : j - i - 1);
      std::string t2;
      for (size_t k = 0; k < tok.size(); ++k) {
        if (tok[k] == '~' && k + 1 < tok.size() && tok[k + 1] == '1') { t2 += '/'; ++k; }
        else if (tok[k] == '~' && k + 1 < tok.size() && tok[k + 1] == '0') { t2 += '~'; ++k; }
        else t2 += tok[k];
      }
      if (cur->is_object() && cur->contains(t2)) cur = &(*cur)[t2];
      else if (cur->is_array() && !t2.empty() && t2.find_first_not_of("0123456789") == std::string::npos &&
               std::stoul(t2) < cur->size())
        cur = &(*cur)[std::stoul(t2)];
      else fail(path, "'$ref' '" + ref + "' does not resolve");
      if (j == std::string::npos) break;
      i = j;
    }
    return *cur;
  }

  // ---- merging (allOf, and siblings of anyOf/oneOf) ----
  json merge(json a, const json& b, const std::string& path) {
    if (!a.is_object() || !b.is_object()) fail(path, "'allOf' with non-object schemas is not supported");
    for (auto& [k, v] : b.items()) {
      if (kAnnotations.count(k)) continue;
      if (!a.contains(k)) { a[k] = v; continue; }
      if (k == "required") {
        for (auto& r : v)
          if (std::find(a[k].begin(), a[k].end(), r) == a[k].end()) a[k].push_back(r);
      } else if (k == "properties") {
        for (auto& [pn, ps] : v.items()) {
          if (!a[k].contains(pn)) a[k][pn] = ps;
          else if (a[k][pn] != ps) fail(path, "'allOf' defines property '" + pn + "' twice with different schemas (not supported)");
        }
      } else if (a[k] != v) {
        fail(path, "'allOf' with conflicting '" + k + "' is not supported");
      }
    }
    return a;
  }

  static std::set<std::string> types_of(const json& s) {
    std::set<std::string> t;
    auto add_val = [&](const json& v) {
      if (v.is_null()) t.insert("null");
      else if (v.is_boolean()) t.insert("boolean");
      else if (v.is_number_integer() || v.is_number_unsigned()) t.insert("integer");
      else if (v.is_number()) t.insert("number");
      else if (v.is_string()) t.insert("string");
      else if (v.is_array()) t.insert("array");
      else t.insert("object");
    };
    if (!s.is_object()) return {"*"};
    if (s.contains("const")) { add_val(s["const"]); return t; }
    if (s.contains("enum") && s["enum"].is_array()) { for (auto& v : s["enum"]) add_val(v); return t; }
    if (s.contains("type")) {
      if (s["type"].is_string()) t.insert(s["type"].get<std::string>());
      else for (auto& x : s["type"]) t.insert(x.get<std::string>());
      if (t.count("number")) t.insert("integer");
      if (t.count("integer")) t.insert("number");
      return t;
    }
    return {"*"};
  }
  static std::vector<json> values_of(const json& s) {
    if (!s.is_object()) return {};
    if (s.contains("const")) return {s["const"]};
    if (s.contains("enum") && s["enum"].is_array()) return std::vector<json>(s["enum"].begin(), s["enum"].end());
    return {};
  }
  static bool disjoint_values(const json& a, const json& b) {
    auto va = values_of(a), vb = values_of(b);
    if (va.empty() || vb.empty()) return false;
    for (auto& x : va)
      for (auto& y : vb)
        if (x == y) return false;
    return true;
  }
  // Decides whether two oneOf branches can both match one value (conservatively: true if unsure).
  bool exclusive(const json& a0, const json& b0) {
    const json& a = a0.is_object() && a0.contains("$ref") ? resolve(a0["$ref"].get<std::string>(), "#") : a0;
    const json& b = b0.is_object() && b0.contains("$ref") ? resolve(b0["$ref"].get<std::string>(), "#") : b0;
    auto ta = types_of(a), tb = types_of(b);
    if (!ta.count("*") && !tb.count("*")) {
      bool overlap = false;
      for (auto& x : ta) overlap |= tb.count(x) > 0;
      if (!overlap) return true;
    }
    if (disjoint_values(a, b)) return true;
    // objects with a required discriminator property of disjoint constant values
    if (a.is_object() && b.is_object() && a.contains("properties") && b.contains("properties") &&
        a.contains("required") && b.contains("required")) {
      for (auto& [pn, ps] : a["properties"].items()) {
        bool ra = std::find(a["required"].begin(), a["required"].end(), pn) != a["required"].end();
        bool rb = std::find(b["required"].begin(), b["required"].end(), pn) != b["required"].end();
        if (ra && rb && b["properties"].contains(pn) && disjoint_values(ps, b["properties"][pn])) return true;
      }
    }
    return false;
  }

  Expr literal_value(const json& v) { return Expr::literal(v.dump()); }

  Expr schema(const json& s, const std::string& path, int depth) {
    if (depth > 64) fail(path, "schema nested deeper than 64 levels");
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "schema 'false' can never be satisfied");
      return Expr::ref(any_value_rule());
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    for (auto& [k, v] : s.items())
      if (!kKnown.count(k) && !kAnnotations.count(k)) fail(path, "unsupported keyword '" + k + "'");

    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) fail(path, "'$ref' must be a string");
      for (auto& [k, v] : s.items())
        if (k != "$ref" && !kAnnotations.count(k)) fail(path, "'$ref' with sibling keyword '" + k + "' is not supported");
      std::string ref = s["$ref"].get<std::string>();
      auto it = refs_.find(ref);
      if (it != refs_.end()) return Expr::ref(it->second);
      const json& target = resolve(ref, path);
      int32_t r = g_.add_rule("ref_" + std::to_string(g_.rules.size()));
      refs_[ref] = r;
      g_.rules[r].body = schema(target, ref, depth + 1);
      return Expr::ref(r);
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].empty()) fail(path, "'allOf' must be a non-empty array");
      json merged = s;
      merged.erase("allOf");
      std::vector<json> parts{merged};
      for (size_t i = 0; i < s["allOf"].size(); ++i) {
        json sub = s["allOf"][i];
        if (sub.is_object() && sub.contains("$ref")) sub = resolve(sub["$ref"].get<std::string>(), path);
        if (sub.is_object() && (sub.contains("allOf") || sub.contains("anyOf") || sub.contains("oneOf")))
          fail(path + "/allOf/" + std::to_string(i), "nested 'allOf'/'anyOf'/'oneOf' inside 'allOf' is not supported");
        merged = merge(std::move(merged), sub, path + "/allOf/" + std::to_string(i));
        parts.push_back(sub);
      }
      // additionalProperties only sees the properties of its own schema object: merging is exact only if
      // every restricting part already lists all merged properties.
      for (const json& p : parts)
        if (p.is_object() && p.contains("additionalProperties") && p["additionalProperties"] != true &&
            merged.contains("properties"))
          for (auto& [pn, ps] : merged["properties"].items())
            if (!p.contains("properties") || !p["properties"].contains(pn))
              fail(path, "'allOf': 'additionalProperties' would reject property '" + pn +
                             "' defined in another part (not supported)");
      return schema(merged, path, depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      if (s.contains("anyOf") && s.contains("oneOf")) fail(path, "'anyOf' together with 'oneOf' is not supported");
      const json& br = s[key];
      if (!br.is_array() || br.empty()) fail(path, std::string("'") + key + "' must be a non-empty array");
      json siblings = s;
      siblings.erase(key);
      bool has_sib = false;
      for (auto& [k, v] : siblings.items()) has_sib |= !kAnnotations.count(k);
      if (std::string(key) == "oneOf")
        for (size_t i = 0; i < br.size(); ++i)
          for (size_t j = i + 1; j < br.size(); ++j)
            if (!exclusive(br[i], br[j]))
              fail(path, "'oneOf': cannot prove branches " + std::to_string(i) + " and " + std::to_string(j) +
                             " are mutually exclusive (use 'anyOf', or distinguish them by type or const)");
      std::vector<Expr> alts;
      for (size_t i = 0; i < br.size(); ++i) {
        std::string p = path + "/" + key + "/" + std::to_string(i);
        if (has_sib) {
          json b = br[i];
          if (b.is_object() && b.contains("$ref")) b = resolve(b["$ref"].get<std::string>(), p);
          alts.push_back(schema(merge(siblings, b, p), p, depth + 1));
        } else {
          alts.push_back(schema(br[i], p, depth + 1));
        }
      }
      return Expr::ref(new_rule("union", Expr::alt(std::move(alts))));
    }
    std::set<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.insert(t.get<std::string>());
      else if (t.is_array() && !t.empty()) {
        for (auto& x : t) {
          if (!x.is_string()) fail(path, "'type' entries must be strings");
          types.insert(x.get<std::string>());
        }
      } else fail(path, "'type' must be a string or a non-empty array of strings");
      for (auto& x : types)
        if (x != "null" && x != "boolean" && x != "integer" && x != "number" && x != "string" && x != "array" && x != "object")
          fail(path, "unknown type '" + x + "'");
    }
    if (s.contains("const") || s.contains("enum")) {
      std::vector<json> vals;
      if (s.contains("const")) vals.push_back(s["const"]);
      else {
        if (!s["enum"].is_array() || s["enum"].empty()) fail(path, "'enum' must be a non-empty array");
        vals.assign(s["enum"].begin(), s["enum"].end());
      }
      std::vector<Expr> alts;
      for (auto& v : vals) {
        if (!types.empty()) {
          auto tv = types_of(json{{"const", v}});
          bool ok = false;
          for (auto& x : tv) ok |= types.count(x) > 0 || (x == "integer" && types.count("number"));
          if (!ok) continue;
        }
        alts.push_back(literal_value(v));
      }
      if (alts.empty()) fail(path, "no 'enum'/'const' value matches 'type'");
      return Expr::alt(std::move(alts));
    }
    if (types.empty()) {
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) types.insert("object");
      if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems"))
        types.insert("array");
      if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength"))
        types.insert("string");
      if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum"))
        types.insert("number");
      if (types.empty()) return Expr::ref(any_value_rule());
    }
    std::vector<Expr> alts;
    for (const std::string& t : types) {
      if (t == "null") alts.push_back(Expr::literal("null"));
      else if (t == "boolean") alts.push_back(Expr::alt({Expr::literal("true"), Expr::literal("false")}));
      else if (t == "integer") alts.push_back(integer(s, path));
      else if (t == "number") {
        if (types.count("integer")) continue;  // integer is a subset; number covers it below only if alone
        alts.push_back(number(s, path));
      } else if (t == "string") alts.push_back(string(s, path));
      else if (t == "array") alts.push_back(array(s, path, depth));
      else if (t == "object") alts.push_back(object(s, path, depth));
    }
    if (types.count("integer") && types.count("number")) alts.push_back(number(s, path));
    return Expr::alt(std::move(alts));
  }

  const json& root_;
  JsonSchemaOptions o_;
  Grammar g_;
  int32_t any_value_ = -1;
  std::map<std::string, int32_t> refs_;
};

}  // namespace

Grammar compile_json_schema(std::string_view schema_json, const JsonSchemaOptions& opts) {
  json root;
  try {
    root = json::parse(schema_json);
  } catch (const std::exception& e) {
    throw Error(std::string("JSON Schema: not valid JSON: ") + e.what());
  }
  SchemaCompiler c(root, opts);
  return c.run();
}

}  // namespace deepinfer::grammar

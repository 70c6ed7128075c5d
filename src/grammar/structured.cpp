// Request specs -> grammars; the DSML tool-call grammar (see structured.h).
#include "grammar/structured.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace deepinfer::grammar {

namespace {

using nlohmann::ordered_json;

void remap(Expr& e, int32_t offset) {
  if (e.kind == Expr::Kind::Ref) e.rule += offset;
  for (Expr& k : e.kids) remap(k, offset);
}

// Raw parameter text: any code point but '<' (a value cannot contain the closing tag's "</｜DSML｜").
Expr raw_char() { return utf8_expr(charset_complement({{'<', '<'}})); }

bool is_string_schema(const ordered_json& s) {
  if (!s.is_object()) return false;
  auto all_strings = [](const ordered_json& a) {
    if (!a.is_array() || a.empty()) return false;
    for (const auto& v : a)
      if (!v.is_string()) return false;
    return true;
  };
  if (s.contains("const")) return s["const"].is_string();
  if (s.contains("enum")) return all_strings(s["enum"]);
  return s.contains("type") && s["type"].is_string() && s["type"] == "string";
}

// string="true" value: the raw text of a string schema.
Expr raw_string_value(const ordered_json& s, const std::string& where) {
  static const char* kAllowed[] = {"type", "description", "title", "enum", "const", "minLength", "maxLength",
                                   "pattern", "default", "examples"};
  for (auto it = s.begin(); it != s.end(); ++it) {
    bool ok = false;
    for (const char* k : kAllowed) ok = ok || it.key() == k;
    if (!ok) throw Error(where + ": keyword '" + it.key() + "' is not supported for a raw (string=\"true\") parameter");
  }
  auto check_raw = [&](const std::string& v) {
    if (v.find('<') != std::string::npos)
      throw Error(where + ": value '" + v + "' contains '<', which a raw DSML parameter cannot hold");
    return Expr::literal(v);
  };
  if (s.contains("const")) return check_raw(s["const"].get<std::string>());
  if (s.contains("enum")) {
    std::vector<Expr> alts;
    for (const auto& v : s["enum"]) alts.push_back(check_raw(v.get<std::string>()));
    return Expr::alt(std::move(alts));
  }
  if (s.contains("pattern")) {
    if (s.contains("minLength") || s.contains("maxLength"))
      throw Error(where + ": 'pattern' together with 'minLength'/'maxLength' is not supported");
    bool a = false, b = false;
    Expr e = regex_to_expr(s["pattern"].get<std::string>(), false, {}, &a, &b);
    if (!a || !b) throw Error(where + ": 'pattern' of a raw parameter must be anchored (^...$)");
    return e;
  }
  int32_t lo = 0, hi = -1;
  if (s.contains("minLength")) lo = s["minLength"].get<int32_t>();
  if (s.contains("maxLength")) hi = s["maxLength"].get<int32_t>();
  if (lo < 0 || (hi >= 0 && hi < lo)) throw Error(where + ": bad minLength/maxLength");
  return Expr::repeat(raw_char(), lo, hi);
}

}  // namespace

int32_t embed_grammar(Grammar& dst, const Grammar& src, const std::string& prefix) {
  const int32_t offset = int32_t(dst.rules.size());
  for (const Rule& r : src.rules) {
    Expr body = r.body;
    remap(body, offset);
    dst.add_rule(prefix + r.name, std::move(body));
  }
  return offset + src.root;
}

Grammar compile_dsml_tool_calls(std::string_view tools_json, const DsmlOptions& opts) {
  ordered_json tools;
  try {
    tools = ordered_json::parse(tools_json);
  } catch (const std::exception& e) {
    throw Error(std::string("tools: not valid JSON: ") + e.what());
  }
  if (!tools.is_array() || tools.empty()) throw Error("tools: must be a non-empty array of tools");
  const std::string d = "｜DSML｜";
  const std::string block = opts.v41 ? " calls" : "tool_calls";
  const std::string invoke = opts.v41 ? " invoke" : "invoke";
  const std::string param = opts.v41 ? " parameter" : "parameter";

  Grammar g;
  const int32_t root = g.add_rule("root");
  std::vector<Expr> invokes;
  for (size_t ti = 0; ti < tools.size(); ++ti) {
    const std::string where = "tools[" + std::to_string(ti) + "]";
    const ordered_json& t = tools[ti];
    const ordered_json* fn = &t;
    if (t.is_object() && t.contains("function")) fn = &t["function"];
    if (!fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
      throw Error(where + ".function.name: missing or not a string");
    const std::string name = (*fn)["name"];
    if (name.empty() || name.find('"') != std::string::npos || name.find('<') != std::string::npos)
      throw Error(where + ".function.name: '" + name + "' cannot be written in a DSML invoke tag");
    ordered_json params = fn->contains("parameters") ? (*fn)["parameters"] : ordered_json::object();
    if (!params.is_object()) throw Error(where + ".function.parameters: must be an object schema");
    if (params.contains("type") && params["type"] != "object")
      throw Error(where + ".function.parameters.type: must be \"object\" (DSML parameters are named)");
    for (const char* k : {"patternProperties", "minProperties", "maxProperties", "anyOf", "oneOf", "allOf", "$ref",
                          "not", "if", "dependentRequired", "dependentSchemas", "propertyNames"})
      if (params.contains(k))
        throw Error(where + ".function.parameters: keyword '" + k + "' is not supported in a tool-call grammar");
    if (params.contains("additionalProperties") && params["additionalProperties"] != false)
      throw Error(where + ".function.parameters.additionalProperties: only false (or absent) is supported");
    std::vector<std::string> required;
    if (params.contains("required")) {
      if (!params["required"].is_array()) throw Error(where + ".function.parameters.required: must be an array");
      for (const auto& r : params["required"]) required.push_back(r.get<std::string>());
    }
    const ordered_json props = params.contains("properties") ? params["properties"] : ordered_json::object();
    if (!props.is_object()) throw Error(where + ".function.parameters.properties: must be an object");
    for (const std::string& r : required)
      if (!props.contains(r))
        throw Error(where + ".function.parameters.required: '" + r + "' is not among the properties");

    // One rule per parameter line (tag + value + tag + "\n").
    std::vector<Expr> lines;
    std::vector<bool> is_required;
    for (auto it = props.begin(); it != props.end(); ++it) {
      const std::string key = it.key();
      const std::string pwhere = where + ".function.parameters.properties." + key;
      if (key.find('"') != std::string::npos || key.find('<') != std::string::npos)
        throw Error(pwhere + ": the name cannot be written in a DSML parameter tag");
      const bool raw = is_string_schema(it.value());
      Expr value;
      if (raw) {
        value = raw_string_value(it.value(), pwhere);
      } else {
        ordered_json sub = it.value();
        if (sub.is_object()) {  // keep local $refs resolvable from the parameter's own schema
          for (const char* k : {"$defs", "definitions"})
            if (params.contains(k) && !sub.contains(k)) sub[k] = params[k];
        }
        JsonSchemaOptions jo;
        jo.any_whitespace = opts.any_whitespace;
        Grammar pg;
        try {
          pg = compile_json_schema(sub.dump(), jo);
        } catch (const Error& e) {
          throw Error(pwhere + ": " + e.what());
        }
        value = Expr::ref(embed_grammar(g, pg, "t" + std::to_string(ti) + "_" + key + "_"));
      }
      Expr line = Expr::seq({Expr::literal("<" + d + param + " name=\"" + key + "\" string=\"" + (raw ? "true" : "false") +
                                           "\">"),
                             std::move(value), Expr::literal("</" + d + param + ">\n")});
      lines.push_back(Expr::ref(g.add_rule("t" + std::to_string(ti) + "_param_" + key, std::move(line))));
      is_required.push_back(std::find(required.begin(), required.end(), key) != required.end());
    }
    auto lines_from = [&](size_t from) {
      std::vector<Expr> s;
      for (size_t j = from; j < lines.size(); ++j) s.push_back(is_required[j] ? lines[j] : Expr::opt(lines[j]));
      return Expr::seq(std::move(s));
    };
    Expr body;
    if (!opts.v41 || std::find(is_required.begin(), is_required.end(), true) != is_required.end()) {
      body = lines_from(0);
    } else {
      // V4.1 writes an empty line for an invoke without parameters: "\n" or at least one parameter line.
      std::vector<Expr> alts{Expr::literal("\n")};
      for (size_t j = 0; j < lines.size(); ++j) alts.push_back(Expr::seq({lines[j], lines_from(j + 1)}));
      body = Expr::alt(std::move(alts));
    }
    invokes.push_back(Expr::seq({Expr::literal("<" + d + invoke + " name=\"" + name + "\">\n"), std::move(body),
                                 Expr::literal("</" + d + invoke + ">")}));
  }
  const int32_t inv = g.add_rule("invoke", Expr::alt(std::move(invokes)));
  Expr calls = Expr::seq({Expr::ref(inv), Expr::star(Expr::seq({Expr::literal("\n"), Expr::ref(inv)})),
                          Expr::literal("\n</" + d + block + ">")});
  const std::string open = "\n\n<" + d + block + ">\n";
  Expr body;
  if (opts.required) {
    body = opts.block_in_prompt ? std::move(calls) : Expr::seq({Expr::literal(open), std::move(calls)});
  } else {
    // Free text (no U+FF5C '｜', so no DSML marker can start in it), then optionally the block.
    Expr text = Expr::star(utf8_expr(charset_complement({{0xFF5C, 0xFF5C}})));
    body = Expr::seq({std::move(text), Expr::opt(Expr::seq({Expr::literal(open), std::move(calls)}))});
  }
  g.rules[size_t(root)].body = std::move(body);
  g.root = root;
  compile(g);
  return g;
}

bool structured_applies(const StructuredOutput& s) {
  if (s.tools.empty() || s.tool_choice != "auto" || !s.json_schema.empty() || !s.regex.empty() || !s.ebnf.empty() ||
      s.json_object)
    return true;
  ordered_json tools = ordered_json::parse(s.tools, nullptr, false);
  if (!tools.is_array()) return true;
  for (const auto& t : tools) {
    if (!t.is_object()) return true;
    const ordered_json& fn = t.contains("function") ? t["function"] : t;
    if (!fn.is_object() || (fn.contains("strict") && fn["strict"] == true)) return true;
  }
  return false;
}

Grammar compile_structured(const StructuredOutput& s) {
  int n = int(!s.json_schema.empty()) + int(!s.regex.empty()) + int(!s.ebnf.empty()) + int(s.json_object) +
          int(!s.tools.empty());
  if (n != 1) throw Error("structured: give exactly one of json_schema, regex, ebnf, json_object, tools");
  auto field = [](const char* name, auto&& f) -> Grammar {
    try {
      return f();
    } catch (const Error& e) {
      throw Error(std::string("structured.") + name + ": " + e.what());
    } catch (const std::exception& e) {
      throw Error(std::string("structured.") + name + ": " + e.what());
    }
  };
  if (!s.json_schema.empty()) return field("json_schema", [&] {
      JsonSchemaOptions o;
      o.any_whitespace = s.any_whitespace;
      return compile_json_schema(s.json_schema, o);
    });
  if (!s.regex.empty()) return field("regex", [&] { return compile_regex(s.regex); });
  if (!s.ebnf.empty()) return field("ebnf", [&] { return compile_ebnf(s.ebnf); });
  if (s.json_object) return field("json_object", [&] {
      JsonSchemaOptions o;
      o.any_whitespace = s.any_whitespace;
      o.strict = false;
      return compile_json_schema(R"({"type": "object"})", o);
    });
  return field("tools", [&] {
    DsmlOptions o;
    if (s.dsml_version == "v4.1") o.v41 = true;
    else if (s.dsml_version != "v4") throw Error("dsml_version '" + s.dsml_version + "' is not v4 or v4.1");
    if (s.tool_choice == "auto") o.required = false;
    else if (s.tool_choice != "required") throw Error("tool_choice '" + s.tool_choice + "' is not required or auto");
    o.block_in_prompt = s.tool_block_in_prompt;
    o.any_whitespace = s.any_whitespace;
    return compile_dsml_tool_calls(s.tools, o);
  });
}

}  // namespace deepinfer::grammar

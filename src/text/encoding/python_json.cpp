#include "text/encoding/python_json.h"

namespace deepinfer {
namespace {

void append_json(const OrderedJson& value, std::string& out) {
  if (value.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += OrderedJson(it.key()).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
      out += ": ";
      append_json(it.value(), out);
    }
    out += '}';
  } else if (value.is_array()) {
    out += '[';
    bool first = true;
    for (const auto& item : value) {
      if (!first) out += ", ";
      first = false;
      append_json(item, out);
    }
    out += ']';
  } else {
    // Scalars: nlohmann's shortest round-trip float form matches the recipe's for the values we emit
    // (1.0, 1e+20, -0.0); strings keep non-ASCII and escape control characters as \u00xx.
    out += value.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
  }
}

}  // namespace

std::string python_style_json(const OrderedJson& value) {
  std::string out;
  append_json(value, out);
  return out;
}

}  // namespace deepinfer

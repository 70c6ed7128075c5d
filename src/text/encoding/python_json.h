// JSON text in the layout Python's json.dumps(ensure_ascii=False) produces: ", " and ": " separators,
// non-ASCII kept verbatim. serving.md §1.3: tool schemas and non-string tool arguments use this layout.
#pragma once

#include <string>

#include "text/encoding/conversation.h"

namespace deepinfer {

std::string python_style_json(const OrderedJson& value);

}  // namespace deepinfer

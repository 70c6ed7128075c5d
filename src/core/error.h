// Errors are answers (DESIGN.md principle 7): every failure names what is wrong and where.
#pragma once

#include <stdexcept>
#include <string>

namespace deepinfer {

// The one exception type the engine throws for bad input (config, checkpoint, request).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// check(cond, message) throws Error(message) when cond is false; message is built only on failure.
#define DI_CHECK(cond, msg)                                   \
  do {                                                        \
    if (!(cond)) throw ::deepinfer::Error(std::string() + msg); \
  } while (0)

}  // namespace deepinfer

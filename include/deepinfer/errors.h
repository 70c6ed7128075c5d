// Errors of the public API (DESIGN.md principle 7, errors are answers).
//
// - A bad *request* never throws: it is answered with a terminal event of reason Rejected whose message
//   names the bad field ("params.top_p: 1.5 is outside (0, 1]").
// - A bad *engine setup* (model directory, tokenizer, options, environment variables) throws
//   deepinfer::Error from Engine::create with a message naming the file, option or variable.
#pragma once

#include "core/error.h"  // deepinfer::Error (a std::runtime_error)

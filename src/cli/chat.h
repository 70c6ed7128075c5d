// `deepinfer chat`: an interactive (or piped) conversation through the V4 / V4.1 chat encoding.
#pragma once

#include <CLI/CLI.hpp>

namespace deepinfer::cli {

// Adds the subcommand to `app`; the returned callback runs it when it was chosen (returns the exit code).
std::function<int()> add_chat_command(CLI::App& app);

}  // namespace deepinfer::cli

// `deepinfer plan`: the memory plan of a model over several GPUs (src/parallel/memory_plan.h).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace deepinfer::cli {

// Adds the subcommand to `app`; the returned callback runs it when it was chosen (returns the exit code, or -1
// when another subcommand was chosen).
std::function<int()> add_plan_command(CLI::App& app);

}  // namespace deepinfer::cli

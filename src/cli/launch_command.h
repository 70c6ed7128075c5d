// `deepinfer launch --nproc N [--nnodes M --node-rank i --master-addr A --master-port P] -- <command> [args]`:
// N processes of a command with the multi-GPU environment (src/parallel/launch.h).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace deepinfer::cli {

// Adds the subcommand to `app`; the returned callback runs it when it was chosen (returns the exit code, or -1
// when another subcommand was chosen).
std::function<int()> add_launch_command(CLI::App& app);

}  // namespace deepinfer::cli

#include "cli/launch_command.h"

#include <memory>
#include <string>
#include <vector>

#include "parallel/launch.h"

namespace deepinfer::cli {

namespace {

struct LaunchArgs {
  parallel::LaunchOptions options;
  std::vector<std::string> command;
};

}  // namespace

std::function<int()> add_launch_command(CLI::App& app) {
  auto args = std::make_shared<LaunchArgs>();
  auto* l = app.add_subcommand(
      "launch", "Start N processes of a command with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set");
  l->add_option("--nproc", args->options.nproc, "Processes on this machine (one per GPU)")
      ->required()
      ->check(CLI::PositiveNumber);
  l->add_option("--nnodes", args->options.nnodes, "Machines in the job")->check(CLI::PositiveNumber);
  l->add_option("--node-rank", args->options.node_rank, "This machine's index in [0, nnodes)")
      ->check(CLI::NonNegativeNumber);
  l->add_option("--master-addr", args->options.master_addr, "Address of global rank 0's machine");
  l->add_option("--master-port", args->options.master_port, "Port rank 0's bootstrap listens on")
      ->check(CLI::Range(1, 65535));
  l->add_option("command", args->command, "The command to run (after --)")->required()->expected(-1);
  return [l, args]() { return *l ? parallel::launch_local(args->options, args->command) : -1; };
}

}  // namespace deepinfer::cli

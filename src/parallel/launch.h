// Multi-process launch on one machine (issue 7): `deepinfer launch --nproc N -- <cmd>` starts N copies of a
// command with the environment the TCP bootstrap reads (src/parallel/bootstrap.h) and each process's GPU index:
// RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (the names torchrun uses). On several
// machines run it once per machine with --nnodes / --node-rank and the first machine's address: global ranks are
// node_rank * nproc + local rank.
#pragma once

#include <string>
#include <vector>

namespace deepinfer::parallel {

struct LaunchOptions {
  int nproc = 1;         // processes on this machine (one per GPU)
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double notice_s = 2;   // after a failure, how long the others get to exit on their own before SIGTERM
  double grace_s = 5;    // then how long they get between SIGTERM and SIGKILL
};

// Runs the processes and waits for them. When one fails (non-zero exit or a signal), the others get notice_s to
// exit on their own (a data-parallel group's ranks report the dead peer), are then terminated, and its status is
// returned (128 + signal number for a signal); 0 when all succeed. A SIGINT / SIGTERM to the
// launcher is passed on to the processes (status 128 + signal). A command that cannot be
// executed exits 127. Throws deepinfer::Error for bad options or an empty command.
int launch_local(const LaunchOptions& options, const std::vector<std::string>& command);

}  // namespace deepinfer::parallel

#include "parallel/launch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace deepinfer::parallel {

namespace {

using Clock = std::chrono::steady_clock;

// A SIGINT / SIGTERM sent to the launcher alone (a job scheduler) is passed on to the processes it started.
volatile sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }

int exit_status(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

}  // namespace

int launch_local(const LaunchOptions& o, const std::vector<std::string>& command) {
  DI_CHECK(!command.empty(), "launch: no command given (deepinfer launch --nproc N -- <command> [args])");
  DI_CHECK(o.nproc > 0 && o.nnodes > 0 && o.node_rank >= 0 && o.node_rank < o.nnodes,
           "launch: --nproc and --nnodes must be positive and --node-rank in [0, nnodes)");
  DI_CHECK(o.master_port > 0 && o.master_port < 65536, "launch: --master-port outside [1, 65535]");
  const int world = o.nproc * o.nnodes;
  std::vector<char*> argv;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // The environment's text is made before forking: a child only calls setenv and exec.
  std::vector<std::string> rank_text, local_text;
  for (int local = 0; local < o.nproc; ++local) {
    rank_text.push_back(std::to_string(o.node_rank * o.nproc + local));
    local_text.push_back(std::to_string(local));
  }
  const std::string world_text = std::to_string(world), nproc_text = std::to_string(o.nproc),
                    port_text = std::to_string(o.master_port);

  g_stop_signal = 0;
  struct sigaction forward {}, old_int {}, old_term {};
  forward.sa_handler = on_stop_signal;
  sigemptyset(&forward.sa_mask);
  ::sigaction(SIGINT, &forward, &old_int);
  ::sigaction(SIGTERM, &forward, &old_term);
  std::fflush(nullptr);  // the children must not repeat buffered output
  std::vector<pid_t> pids;
  for (int local = 0; local < o.nproc; ++local) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      ::sigaction(SIGINT, &old_int, nullptr);
      ::sigaction(SIGTERM, &old_term, nullptr);
      throw Error(std::string("launch: fork() failed: ") + std::strerror(errno));
    }
    if (pid == 0) {
      ::sigaction(SIGINT, &old_int, nullptr);
      ::sigaction(SIGTERM, &old_term, nullptr);
      ::setenv("RANK", rank_text[size_t(local)].c_str(), 1);
      ::setenv("LOCAL_RANK", local_text[size_t(local)].c_str(), 1);
      ::setenv("WORLD_SIZE", world_text.c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", nproc_text.c_str(), 1);
      ::setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
      ::setenv("MASTER_PORT", port_text.c_str(), 1);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "launch: cannot execute '%s': %s\n", argv[0], std::strerror(errno));
      ::_exit(127);
    }
    pids.push_back(pid);
  }

  // Poll our own children only (never wait(-1): the caller may have children of its own).
  std::vector<bool> done(pids.size(), false);
  size_t running = pids.size();
  int first_failure = 0;
  Clock::time_point kill_at{}, term_at{};
  bool terminating = false, noticing = false;
  const auto signal_running = [&](int sig) {
    for (size_t j = 0; j < pids.size(); ++j)
      if (!done[j]) ::kill(pids[j], sig);
  };
  // Asks the children still running to stop; whoever is left after grace_s gets SIGKILL.
  const auto stop_running = [&](int sig) {
    signal_running(sig);
    noticing = false;
    terminating = true;
    kill_at = Clock::now() + std::chrono::milliseconds(int64_t(o.grace_s * 1000));
  };
  while (running > 0) {
    bool progressed = false;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int wstatus = 0;
      const pid_t r = ::waitpid(pids[i], &wstatus, WNOHANG);
      if (r == 0) continue;
      done[i] = true;
      --running;
      progressed = true;
      const int status = r < 0 ? 1 : exit_status(wstatus);
      if (status != 0 && first_failure == 0) {
        first_failure = status;
        std::fprintf(stderr, "launch: local rank %zu exited with status %d; stopping the others\n", i, status);
        // The others first get notice_s to end on their own: a data-parallel group's ranks see a dead peer at once
        // and say why before they exit, which a SIGTERM right away would cut off.
        noticing = true;
        term_at = Clock::now() + std::chrono::milliseconds(int64_t(o.notice_s * 1000));
      }
    }
    if (g_stop_signal != 0 && first_failure == 0) {
      first_failure = 128 + int(g_stop_signal);
      std::fprintf(stderr, "launch: signal %d; stopping the processes\n", int(g_stop_signal));
      stop_running(int(g_stop_signal));
    }
    if (noticing && Clock::now() >= term_at) stop_running(SIGTERM);
    if (terminating && Clock::now() >= kill_at) {
      signal_running(SIGKILL);
      terminating = false;
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  return first_failure;
}

}  // namespace deepinfer::parallel

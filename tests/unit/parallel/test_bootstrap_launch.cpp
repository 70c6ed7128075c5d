// The TCP bootstrap (src/parallel/bootstrap.h) between threads and between processes on localhost, and the
// local multi-process launcher (src/parallel/launch.h) with /bin/sh as the launched command.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "parallel/bootstrap.h"
#include "parallel/launch.h"

namespace deepinfer::parallel {
namespace {

std::vector<uint8_t> test_blob() {
  std::vector<uint8_t> blob(128);  // the size of an ncclUniqueId
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = uint8_t(i * 37 + 11);
  return blob;
}

BootstrapConfig peer(int port, int rank, int world) {
  BootstrapConfig c;
  c.master_port = port;
  c.rank = rank;
  c.world_size = world;
  c.timeout_s = 20;
  return c;
}

TEST(Bootstrap, ThreadsReceiveRankZerosBlob) {
  const int world = 4;
  BootstrapServer server(0, world, 20);
  ASSERT_GT(server.port(), 0);
  std::vector<std::vector<uint8_t>> got(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> peers;
  for (int r = world - 1; r >= 1; --r)  // any order of arrival
    peers.emplace_back([&, r] {
      try {
        got[size_t(r)] = bootstrap_receive(peer(server.port(), r, world));
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  server.serve(test_blob());
  for (auto& t : peers) t.join();
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ(errors[size_t(r)], "") << r;
    EXPECT_EQ(got[size_t(r)], test_blob()) << r;
  }
}

TEST(Bootstrap, TwoProcesses) {
  BootstrapServer server(0, 2, 20);
  const int port = server.port();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 1;
    try {
      code = bootstrap_share(peer(port, 1, 2), {}) == test_blob() ? 0 : 2;
    } catch (...) {
      code = 3;
    }
    ::_exit(code);
  }
  server.serve(test_blob());
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(Bootstrap, ConnectTimesOutNamingTheAddress) {
  int port = 0;
  {
    BootstrapServer closed(0, 2, 1);
    port = closed.port();
  }  // nobody listens there any more
  BootstrapConfig c = peer(port, 1, 2);
  c.timeout_s = 0.5;
  try {
    bootstrap_receive(c);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e.what();
  }
}

TEST(Bootstrap, DuplicateRankIsAnError) {
  BootstrapServer server(0, 3, 20);
  std::vector<std::thread> peers;
  for (int i = 0; i < 2; ++i)
    peers.emplace_back([&] {
      try {
        bootstrap_receive(peer(server.port(), 1, 3));
      } catch (const std::exception&) {
      }
    });
  try {
    server.serve(test_blob());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 connected twice"), std::string::npos) << e.what();
  }
  for (auto& t : peers) t.join();
}

TEST(Bootstrap, EnvironmentIsValidated) {
  ::setenv("MASTER_ADDR", "10.1.2.3", 1);
  ::setenv("MASTER_PORT", "29611", 1);
  ::setenv("WORLD_SIZE", "8", 1);
  ::setenv("RANK", "5", 1);
  BootstrapConfig c = BootstrapConfig::from_env();
  EXPECT_EQ(c.master_addr, "10.1.2.3");
  EXPECT_EQ(c.master_port, 29611);
  EXPECT_EQ(c.world_size, 8);
  EXPECT_EQ(c.rank, 5);
  ::setenv("RANK", "8", 1);
  EXPECT_THROW(BootstrapConfig::from_env(), Error);
  ::setenv("RANK", "x", 1);
  try {
    BootstrapConfig::from_env();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RANK='x'"), std::string::npos) << e.what();
  }
  ::unsetenv("RANK");
  EXPECT_THROW(BootstrapConfig::from_env(), Error);
  for (const char* v : {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE"}) ::unsetenv(v);
}

TEST(Launch, EveryRankGetsItsEnvironment) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("deepinfer_launch_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  LaunchOptions o;
  o.nproc = 3;
  o.master_port = 29517;
  const std::string script =
      "test \"$WORLD_SIZE\" = 3 && test \"$LOCAL_WORLD_SIZE\" = 3 && test \"$LOCAL_RANK\" = \"$RANK\" && "
      "test \"$MASTER_ADDR\" = 127.0.0.1 && test \"$MASTER_PORT\" = 29517 && echo ok > \"" +
      dir.string() + "/rank$RANK\"";
  EXPECT_EQ(launch_local(o, {"/bin/sh", "-c", script}), 0);
  for (int r = 0; r < 3; ++r) {
    std::ifstream f(dir / ("rank" + std::to_string(r)));
    std::string word;
    f >> word;
    EXPECT_EQ(word, "ok") << "rank " << r;
  }
  // The second machine of two: global ranks 3 .. 5.
  o.nnodes = 2;
  o.node_rank = 1;
  EXPECT_EQ(launch_local(o, {"/bin/sh", "-c", "test \"$WORLD_SIZE\" = 6 && test \"$RANK\" = $((LOCAL_RANK + 3))"}), 0);
  std::filesystem::remove_all(dir);
}

TEST(Launch, AFailureStopsTheOthers) {
  LaunchOptions o;
  o.nproc = 2;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(launch_local(o, {"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 60"}), 3);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  EXPECT_EQ(launch_local(o, {"/nonexistent/deepinfer-test-command"}), 127);
  EXPECT_THROW(launch_local(o, {}), Error);
}

TEST(Launch, ASignalToTheLauncherReachesTheProcesses) {
  // A launcher in a child process gets SIGTERM while its two ranks sleep: it stops them and exits 128 + 15. The
  // ranks announce themselves with a file each (the launcher's handler is installed before it starts them).
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("deepinfer_launch_signal_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string script = "touch \"" + dir.string() + "/rank$RANK\"; exec sleep 60";
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    LaunchOptions o;
    o.nproc = 2;
    int code = 1;
    try {
      code = launch_local(o, {"/bin/sh", "-c", script});
    } catch (...) {
    }
    ::_exit(code);
  }
  for (int i = 0; i < 1000 && !(std::filesystem::exists(dir / "rank0") && std::filesystem::exists(dir / "rank1")); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(launcher, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(launcher, &status, 0), launcher);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer::parallel

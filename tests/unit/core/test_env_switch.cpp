// core/env_switch.h: an environment switch is parsed once (at the first get() or set(), from any number of threads),
// set() overrides it for good, a rejected value throws at every call until the environment is fixed, and an unset
// variable reaches parse() as null. Each test owns its variable (DEEPINFER_TEST_ENV_SWITCH_*), set with setenv
// before the switch's first read.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/env_switch.h"
#include "core/error.h"

using namespace deepinfer;

namespace {

// parse() calls per test (parse functions are plain function pointers: they count through globals).
std::atomic<int> g_parses{0};

bool on_unless_zero(const char* v) {
  g_parses.fetch_add(1);
  return !env_equals(v, "0");
}

enum class Form : int { Old, Bins, New };

Form parse_form(const char* v) {
  g_parses.fetch_add(1);
  if (!v || !*v || env_equals(v, "bins")) return Form::Bins;
  if (env_equals(v, "old")) return Form::Old;
  DI_CHECK(env_equals(v, "new"), std::string("DEEPINFER_TEST_ENV_SWITCH_FORM=") + v + ": expected old, bins or new");
  return Form::New;
}

void set_env(const char* name, const char* value) {
  if (value)
    ::setenv(name, value, 1);
  else
    ::unsetenv(name);
}

}  // namespace

TEST(EnvSwitch, EnvEquals) {
  EXPECT_FALSE(env_equals(nullptr, "0"));
  EXPECT_FALSE(env_equals("", "0"));
  EXPECT_FALSE(env_equals("00", "0"));
  EXPECT_TRUE(env_equals("0", "0"));
  EXPECT_TRUE(env_equals("", ""));
}

TEST(EnvSwitch, UnsetReachesParseAsNull) {
  set_env("DEEPINFER_TEST_ENV_SWITCH_UNSET", nullptr);
  EnvSwitch<bool> s{"DEEPINFER_TEST_ENV_SWITCH_UNSET", [](const char* v) { return v == nullptr; }};
  EXPECT_TRUE(s.get());
  EXPECT_STREQ(s.name(), "DEEPINFER_TEST_ENV_SWITCH_UNSET");
}

TEST(EnvSwitch, ReadOnceAtFirstGet) {
  g_parses = 0;
  set_env("DEEPINFER_TEST_ENV_SWITCH_BOOL", "0");
  EnvSwitch<bool> s{"DEEPINFER_TEST_ENV_SWITCH_BOOL", on_unless_zero};
  EXPECT_EQ(g_parses.load(), 0) << "parsed before its first use";
  EXPECT_FALSE(s.get());
  set_env("DEEPINFER_TEST_ENV_SWITCH_BOOL", "1");  // not read again
  EXPECT_FALSE(s.get());
  EXPECT_FALSE(s.get());
  EXPECT_EQ(g_parses.load(), 1);
  set_env("DEEPINFER_TEST_ENV_SWITCH_BOOL", nullptr);
}

TEST(EnvSwitch, SetOverridesBeforeAndAfterTheFirstGet) {
  g_parses = 0;
  set_env("DEEPINFER_TEST_ENV_SWITCH_SET", "0");
  EnvSwitch<bool> s{"DEEPINFER_TEST_ENV_SWITCH_SET", on_unless_zero};
  s.set(true);  // before any get(): the environment's "0" must not replace it later
  EXPECT_EQ(g_parses.load(), 1);
  EXPECT_TRUE(s.get());
  s.set(false);
  EXPECT_FALSE(s.get());
  s.set(true);
  EXPECT_TRUE(s.get());
  EXPECT_EQ(g_parses.load(), 1);
  set_env("DEEPINFER_TEST_ENV_SWITCH_SET", nullptr);
}

TEST(EnvSwitch, EnumValues) {
  g_parses = 0;
  set_env("DEEPINFER_TEST_ENV_SWITCH_FORM", "old");
  EnvSwitch<Form> s{"DEEPINFER_TEST_ENV_SWITCH_FORM", parse_form};
  EXPECT_EQ(s.get(), Form::Old);
  s.set(Form::New);
  EXPECT_EQ(s.get(), Form::New);
  EXPECT_EQ(g_parses.load(), 1);
  set_env("DEEPINFER_TEST_ENV_SWITCH_FORM", nullptr);
}

// A rejected value: get() and set() throw parse()'s error each time (nothing is cached), until the environment
// holds a value parse() accepts.
TEST(EnvSwitch, RejectedValueThrowsUntilFixed) {
  g_parses = 0;
  set_env("DEEPINFER_TEST_ENV_SWITCH_FORM", "fast");
  EnvSwitch<Form> s{"DEEPINFER_TEST_ENV_SWITCH_FORM", parse_form};
  try {
    s.get();
    FAIL() << "get() accepted a value parse() rejects";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "DEEPINFER_TEST_ENV_SWITCH_FORM=fast: expected old, bins or new");
  }
  EXPECT_THROW(s.get(), Error);
  EXPECT_THROW(s.set(Form::Old), Error);
  EXPECT_EQ(g_parses.load(), 3);
  set_env("DEEPINFER_TEST_ENV_SWITCH_FORM", "new");
  EXPECT_EQ(s.get(), Form::New);
  EXPECT_EQ(g_parses.load(), 4);
  set_env("DEEPINFER_TEST_ENV_SWITCH_FORM", nullptr);
}

// Many threads at the first get(): one parse, every thread sees its value. Repeated on fresh switches so that the
// threads meet the unread state more than once.
TEST(EnvSwitch, OneParseAcrossThreads) {
  set_env("DEEPINFER_TEST_ENV_SWITCH_THREADS", "0");
  for (int round = 0; round < 50; ++round) {
    g_parses = 0;
    EnvSwitch<bool> s{"DEEPINFER_TEST_ENV_SWITCH_THREADS", on_unless_zero};
    std::atomic<bool> go{false};
    std::atomic<int> seen_on{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
      threads.emplace_back([&] {
        while (!go.load()) std::this_thread::yield();
        seen_on += s.get() ? 1 : 0;
      });
    go = true;
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(g_parses.load(), 1) << "round " << round;
    EXPECT_EQ(seen_on.load(), 0) << "round " << round;
  }
  set_env("DEEPINFER_TEST_ENV_SWITCH_THREADS", nullptr);
}

// The constructor is constexpr: a namespace-scope switch is constant-initialized (no static initialization order).
namespace {
constinit EnvSwitch<int> g_constant{"DEEPINFER_TEST_ENV_SWITCH_INT",
                                    [](const char* v) { return v && *v ? std::atoi(v) : 7; }};
}  // namespace

TEST(EnvSwitch, ConstantInitializedAtNamespaceScope) {
  set_env("DEEPINFER_TEST_ENV_SWITCH_INT", nullptr);
  EXPECT_EQ(g_constant.get(), 7);
  g_constant.set(3);
  EXPECT_EQ(g_constant.get(), 3);
}

// Process-wide switches read from the environment (the DEEPINFER_* variables that pick a kernel form or turn a path
// off): read once, at the first get() or set(), then held in an atomic that set() overrides (tests and benches; like
// batch_invariant(), set before the steps that should see it are enqueued: a CUDA graph replays what was read when
// it was captured). Steps may be enqueued from several host threads (one per GPU), so the first read is guarded.
//
//   namespace { EnvSwitch<bool> g_fused{"DEEPINFER_DECODE_FUSED", [](const char* v) { return !env_equals(v, "0"); }}; }
//   bool decode_fused() { return g_fused.get(); }
//   void set_decode_fused(bool on) { g_fused.set(on); }
//
// In a header, an inline function holds the switch as a local static. The constructor is constexpr, so a switch at
// namespace scope is constant-initialized (usable from other translation units' static initializers).
//
// parse(value) gets the variable's value, null when it is unset, and returns the switch's value; it may throw (a
// deepinfer::Error naming the variable and what it accepts): the exception reaches the caller of get() / set() and
// the next call parses again. T: bool, an integer or an enum (a lock-free std::atomic<T>).
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace deepinfer {

// Whether an environment value (null: unset) is exactly `s`.
inline bool env_equals(const char* value, const char* s) { return value && std::strcmp(value, s) == 0; }

template <class T>
class EnvSwitch {
  static_assert(std::atomic<T>::is_always_lock_free, "EnvSwitch<T>: T must be a lock-free atomic type");

 public:
  using Parse = T (*)(const char* value);

  constexpr EnvSwitch(const char* name, Parse parse) noexcept : name_(name), parse_(parse) {}
  EnvSwitch(const EnvSwitch&) = delete;
  EnvSwitch& operator=(const EnvSwitch&) = delete;

  // The value: the environment's (parsed at the first call) unless set() overrode it.
  T get() {
    read_once();
    return value_.load(std::memory_order_relaxed);
  }
  // Overrides the value process-wide. Reads the environment first if nothing has, so that a later first get() does
  // not replace the override (and a value parse() rejects still throws here, as at get()).
  void set(T value) {
    read_once();
    value_.store(value, std::memory_order_relaxed);
  }
  const char* name() const { return name_; }

 private:
  void read_once() {
    if (read_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (read_.load(std::memory_order_relaxed)) return;
    value_.store(parse_(std::getenv(name_)), std::memory_order_relaxed);
    read_.store(true, std::memory_order_release);
  }

  const char* name_;
  Parse parse_;
  std::mutex mutex_;
  std::atomic<bool> read_{false};
  std::atomic<T> value_{T{}};
};

}  // namespace deepinfer

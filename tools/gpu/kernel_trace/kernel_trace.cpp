// A CUDA injection library that records the GPU start / end of every kernel, memcpy and memset between
// cudaProfilerStart and cudaProfilerStop (CUPTI activity records), and writes them at exit as the CSV that
// tools/gpu/timeline_table.py reads ("Start (ns)", "Duration (ns)", "Strm", "Name"). It stands in for Nsight Systems
// where the GPU machine has none (session 11): graph replays are traced node by node, with PDL overlap and idle gaps,
// unlike ncu's one-kernel-at-a-time replay.
//   usage: CUDA_INJECTION64_PATH=libkernel_trace.so KERNEL_TRACE_CSV=out.csv PROGRAM ...
//   (v4_decode --profile-step B brackets one graph step with cudaProfilerStart / Stop; tools/gpu/trace_decode.sh)
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Activity {
  uint64_t start = 0, end = 0;
  uint32_t stream = 0;
  std::string name;
};

std::mutex g_mutex;
std::vector<Activity> g_activities;
bool g_enabled = false;

#define TRACE_CHECK(call)                                                                  \
  do {                                                                                     \
    CUptiResult r_ = (call);                                                               \
    if (r_ != CUPTI_SUCCESS) {                                                             \
      const char* msg_ = nullptr;                                                          \
      cuptiGetResultString(r_, &msg_);                                                     \
      std::fprintf(stderr, "kernel_trace: %s failed: %s\n", #call, msg_ ? msg_ : "?");     \
    }                                                                                      \
  } while (0)

constexpr size_t kBufferBytes = 8u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

std::string demangled(const char* name) {
  if (!name) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : name;
  std::free(d);
  return out;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    Activity a;
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        a = {k->start, k->end, k->streamId, demangled(k->name)};
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        a = {m->start, m->end, m->streamId, "[memcpy]"};
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        a = {m->start, m->end, m->streamId, "[memset]"};
        break;
      }
      default: continue;
    }
    g_activities.push_back(std::move(a));
  }
  std::free(buffer);
}

void set_tracing(bool on) {
  if (on == g_enabled) return;
  for (CUpti_ActivityKind kind :
       {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET}) {
    if (on)
      TRACE_CHECK(cuptiActivityEnable(kind));
    else
      TRACE_CHECK(cuptiActivityDisable(kind));
  }
  g_enabled = on;
}

// cudaProfilerStart (or the driver's cuProfilerStart under it) turns the records on as it returns, the Stop calls
// off as they are entered (after the traced work was synchronized by the program). Both domains are watched: with
// the static CUDA runtime only the driver calls may reach CUPTI.
void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  const bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API, driver = domain == CUPTI_CB_DOMAIN_DRIVER_API;
  const bool start = (runtime && id == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000) ||
                     (driver && id == CUPTI_DRIVER_TRACE_CBID_cuProfilerStart);
  const bool stop = (runtime && id == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000) ||
                    (driver && id == CUPTI_DRIVER_TRACE_CBID_cuProfilerStop);
  if (start && info->callbackSite == CUPTI_API_EXIT) set_tracing(true);
  if (stop && info->callbackSite == CUPTI_API_ENTER) set_tracing(false);
}

void write_csv() {
  TRACE_CHECK(cuptiActivityFlushAll(1));
  const char* path = std::getenv("KERNEL_TRACE_CSV");
  std::FILE* f = std::fopen(path && *path ? path : "kernel_trace.csv", "w");
  if (!f) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path ? path : "kernel_trace.csv");
    return;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(f, "Start (ns),Duration (ns),Strm,Name\n");
  for (const Activity& a : g_activities) {
    std::string name = a.name;
    for (char& c : name)
      if (c == '"') c = '\'';
    std::fprintf(f, "%llu,%llu,%u,\"%s\"\n", (unsigned long long)a.start, (unsigned long long)(a.end - a.start),
                 a.stream, name.c_str());
  }
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu activities\n", g_activities.size());
}

}  // namespace

// Called by the CUDA driver when CUDA_INJECTION64_PATH names this library.
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  CUpti_SubscriberHandle subscriber;
  TRACE_CHECK(cuptiSubscribe(&subscriber, on_api, nullptr));
  TRACE_CHECK(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                                  CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000));
  TRACE_CHECK(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                                  CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000));
  TRACE_CHECK(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart));
  TRACE_CHECK(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop));
  TRACE_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
  std::atexit(write_csv);
  return 1;
}

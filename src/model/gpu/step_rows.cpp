#include "model/gpu/step_rows.h"

#include <chrono>
#include <cstdlib>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/launch.h"

namespace deepinfer::gpu {

// ------------------------------------------------------------------------------------------------ streams

StepStreams::StepStreams() {
  DI_CUDA_CHECK(cudaStreamCreateWithFlags(&main_, cudaStreamNonBlocking));
  // DEEPINFER_GPU_SIDE_STREAM=0 runs the branches on the main stream (debugging: same results, no overlap).
  const char* side_env = std::getenv("DEEPINFER_GPU_SIDE_STREAM");
  const bool on_main = side_env && std::string(side_env) == "0";
  for (cudaEvent_t& m : marks_) DI_CUDA_CHECK(cudaEventCreateWithFlags(&m, cudaEventDisableTiming));
  for (cuda::SideStream& b : branches_) {
    if (on_main)
      b.stream = main_;
    else
      DI_CUDA_CHECK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
    DI_CUDA_CHECK(cudaEventCreateWithFlags(&b.fork, cudaEventDisableTiming));
    DI_CUDA_CHECK(cudaEventCreateWithFlags(&b.join, cudaEventDisableTiming));
  }
}

StepStreams::~StepStreams() {
  if (main_) cudaStreamSynchronize(main_);
  for (cuda::SideStream& b : branches_) {
    if (b.stream && b.stream != main_) cudaStreamDestroy(b.stream);
    if (b.fork) cudaEventDestroy(b.fork);
    if (b.join) cudaEventDestroy(b.join);
  }
  for (cudaEvent_t m : marks_)
    if (m) cudaEventDestroy(m);
  if (main_) cudaStreamDestroy(main_);
}

void StepStreams::fork(Branch b) const {
  const cuda::SideStream& br = branches_[index(b)];
  DI_CUDA_CHECK(cudaEventRecord(br.fork, main_));
  DI_CUDA_CHECK(cudaStreamWaitEvent(br.stream, br.fork, 0));
}

void StepStreams::join(Branch b) const {
  const cuda::SideStream& br = branches_[index(b)];
  DI_CUDA_CHECK(cudaEventRecord(br.join, br.stream));
  DI_CUDA_CHECK(cudaStreamWaitEvent(main_, br.join, 0));
}

cudaEvent_t StepStreams::mark(Branch b) const {
  DI_CUDA_CHECK(cudaEventRecord(marks_[index(b)], branches_[index(b)].stream));
  return marks_[index(b)];
}

void StepStreams::wait(cudaEvent_t mark) const { DI_CUDA_CHECK(cudaStreamWaitEvent(main_, mark, 0)); }

// ------------------------------------------------------------------------------------------------ step rows

PinnedStaging::~PinnedStaging() {
  for (int i = 0; i < 2; ++i) {
    if (copied_[i]) cudaEventSynchronize(copied_[i]);
    if (host_[i]) cudaFreeHost(host_[i]);
    if (copied_[i]) cudaEventDestroy(copied_[i]);
  }
}

void PinnedStaging::allocate(size_t bytes, void* device) {
  DI_CHECK(host_[0] == nullptr, "pinned staging: allocated once");
  bytes_ = bytes;
  device_ = device;
  for (int i = 0; i < 2; ++i) {
    DI_CUDA_CHECK(cudaMallocHost(&host_[i], bytes));
    DI_CUDA_CHECK(cudaEventCreateWithFlags(&copied_[i], cudaEventDisableTiming));
  }
}

void* PinnedStaging::acquire(double* waited_s) {
  DI_CHECK(host_[0] != nullptr, "pinned staging: acquire before allocate");
  current_ = next_;
  next_ ^= 1;
  // The buffer was last read by the copy of two steps ago.
  const auto wait0 = std::chrono::steady_clock::now();
  DI_CUDA_CHECK(cudaEventSynchronize(copied_[current_]));
  *waited_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - wait0).count();
  return host_[current_];
}

void PinnedStaging::upload(size_t bytes, cudaStream_t stream) {
  DI_CHECK(current_ >= 0 && bytes <= bytes_, "pinned staging: upload without an acquired buffer or past its size");
  DI_CUDA_CHECK(cudaMemcpyAsync(device_, host_[current_], bytes, cudaMemcpyHostToDevice, stream));
  DI_CUDA_CHECK(cudaEventRecord(copied_[current_], stream));
}

StepRows::StepRows(const StepCapacity& capacity, int vocab_size, const std::string& who)
    : planner_(capacity, vocab_size, who) {}

int StepRows::add_ratio(int ratio, DeviceArena& arena) {
  const int cls = planner_.add_ratio(ratio);
  if (size_t(cls) == tables_dev_.size())
    tables_dev_.push_back(arena.alloc<int32_t>(planner_.ratios()[size_t(cls)].table.size()));
  return cls;
}

void StepRows::allocate_rows(DeviceArena& arena) {
  DI_CHECK(rows_dev_ == nullptr, "step rows: the row arrays are allocated once");
  const size_t count = size_t(StepPlanner::kRowArrays) * planner_.capacity().max_rows;
  rows_dev_ = arena.alloc<int32_t>(count);
  staging_.allocate(sizeof(int32_t) * count, rows_dev_);
}

void StepRows::plan(std::span<const StepRow> rows, cudaStream_t stream) {
  const size_t count = size_t(StepPlanner::kRowArrays) * planner_.capacity().max_rows;
  auto* h = static_cast<int32_t*>(staging_.acquire(&host_wait_s_));
  planner_.plan(rows, std::span<int32_t>(h, count));
  staging_.upload(sizeof(int32_t) * count, stream);
  for (size_t cls = 0; cls < planner_.ratios().size(); ++cls) {
    const RatioPages& rp = planner_.ratios()[cls];
    if (!rp.dirty) continue;
    // Pageable source: the copy is staged before cudaMemcpyAsync returns, so the host may edit the table after.
    DI_CUDA_CHECK(cudaMemcpyAsync(tables_dev_[cls], rp.table.data(), sizeof(int32_t) * rp.table.size(),
                                  cudaMemcpyHostToDevice, stream));
    planner_.mark_uploaded(int(cls));
  }
}

// ------------------------------------------------------------------------------------------------ phase timing

PhaseTimer::~PhaseTimer() { clear_marks(); }

void PhaseTimer::clear_marks() {
  for (auto& m : marks_) cudaEventDestroy(m.second);
  marks_.clear();
}

void PhaseTimer::set(bool on) {
  if (!on) {
    clear_marks();
    ms_.clear();
  }
  on_ = on;
}

void PhaseTimer::mark(const char* name, cudaStream_t stream) {
  if (!on_ || paused_) return;
  cudaEvent_t e;
  DI_CUDA_CHECK(cudaEventCreate(&e));
  DI_CUDA_CHECK(cudaEventRecord(e, stream));
  marks_.push_back({name, e});
}

std::vector<std::pair<std::string, double>> PhaseTimer::times(cudaStream_t stream) {
  std::vector<std::pair<std::string, double>> out;
  if (!on_) return out;
  DI_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (size_t i = 1; i < marks_.size(); ++i) {
    if (marks_[i].first.empty()) continue;
    float ms = 0;
    DI_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[i - 1].second, marks_[i].second));
    ms_[marks_[i].first] += ms;
  }
  clear_marks();
  for (auto& kv : ms_) out.push_back(kv);
  return out;
}

// ------------------------------------------------------------------------------------------------ graphs

StepGraphs::~StepGraphs() {
  for (const auto& cache : graphs_)
    for (cudaGraphExec_t g : cache)
      if (g) cudaGraphExecDestroy(g);
}

void StepGraphs::launch(int n, cudaStream_t stream, PhaseTimer& timer, const std::function<void(int)>& enqueue) {
  std::vector<cudaGraphExec_t>& graphs = graphs_[cuda::pdl_enabled() ? 1 : 0];
  if (graphs.size() <= size_t(n)) graphs.resize(size_t(n) + 1, nullptr);
  if (!graphs[size_t(n)]) {
    cudaGraph_t graph = nullptr;
    // No phase events inside a graph.
    timer.paused_ = true;
    DI_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue(n);
    } catch (...) {
      timer.paused_ = false;
      cudaStreamEndCapture(stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    DI_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    timer.paused_ = false;
    DI_CUDA_CHECK(cudaGraphInstantiate(&graphs[size_t(n)], graph, 0));
    DI_CUDA_CHECK(cudaGraphDestroy(graph));
  }
  DI_CUDA_CHECK(cudaGraphLaunch(graphs[size_t(n)], stream));
}

}  // namespace deepinfer::gpu

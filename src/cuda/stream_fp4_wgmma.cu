// The switch of cuda/stream_fp4_wgmma.cuh for host-only callers (cuda/stream_fp4_wgmma.h). The flag is a static of
// an inline function, one per program, so this translation unit sets the one every launch_stream reads. Also the
// step stamps' records (fp4wg::step_record) and their reader.
#include "cuda/stream_fp4_wgmma.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "cuda/stamp_records.h"
#include "cuda/stream_gemm.cuh"

namespace deepinfer::cuda {

bool stream_fp4_wgmma() { return stream_gemm::fp4_wgmma(); }
void set_stream_fp4_wgmma(bool on) { stream_gemm::set_fp4_wgmma(on); }
void set_stream_fp4_stamps(unsigned long long* stamps) { stream_gemm::fp4wg::stamp_target() = stamps; }
Fp4Items stream_fp4_items() { return stream_gemm::fp4wg::items_switch().get(); }
void set_stream_fp4_items(Fp4Items items) { stream_gemm::fp4wg::items_switch().set(items); }
bool stream_fp4_half_overlap() { return stream_gemm::fp4wg::half_overlap_switch().get(); }
void set_stream_fp4_half_overlap(bool on) { stream_gemm::fp4wg::half_overlap_switch().set(on); }
static_assert(kFp4StampSlots == stream_gemm::fp4wg::kStampSlots, "cuda/stream_fp4_wgmma.h's slot count");
static_assert(kFp4StampItems == stream_gemm::fp4wg::kStItems, "cuda/stream_fp4_wgmma.h's item slot");

// The step stamps (stream_fp4_wgmma.h set_stream_fp4_step_stamps): one record per packed weight pointer and device,
// of the SMs' blocks (the grid is at most one block per SM: launch_fp4_wgmma), with the grid and shape of the launch
// that took it.
namespace {

constexpr int kStepStampSlots = 256;  // 2 products x the layers of any model this runs, with room

struct Fp4Launch {
  const void* key;
  int blocks, n, k;
};

LaunchStampRecords<Fp4Launch>& step_stamps() {
  static LaunchStampRecords<Fp4Launch> s{kStepStampSlots, stream_gemm::device_smem_limits().x * kFp4StampSlots};
  return s;
}

}  // namespace

namespace stream_gemm::fp4wg {

unsigned long long* step_record(const void* key, int blocks, int n, int k, cudaStream_t stream) {
  if (blocks > device_smem_limits().x) return nullptr;  // more blocks than a record holds
  return step_stamps().record({key, blocks, n, k}, stream);
}

}  // namespace stream_gemm::fp4wg

bool stream_fp4_step_stamps() { return stream_gemm::fp4wg::step_stamps_switch().get(); }
void set_stream_fp4_step_stamps(bool on) {
  if (on) step_stamps().allocate();  // this device's records, outside any capture
  stream_gemm::fp4wg::step_stamps_switch().set(on);
}

std::vector<Fp4StepStampRecord> stream_fp4_step_stamps_read() {
  const int words = stream_gemm::device_smem_limits().x * kFp4StampSlots;
  const auto [order, raw] = step_stamps().read();
  std::vector<Fp4StepStampRecord> out;
  for (size_t i = 0; i < order.size() && (i + 1) * size_t(words) <= raw.size(); ++i) {
    Fp4StepStampRecord r;
    r.slot = int(i);
    r.blocks = order[i].blocks;
    r.n = order[i].n;
    r.k = order[i].k;
    const unsigned long long* rec = raw.data() + i * size_t(words);
    r.stamps.assign(rec, rec + size_t(r.blocks) * kFp4StampSlots);
    for (int b = 0; b < r.blocks; ++b) {
      const unsigned long long start = rec[size_t(b) * kFp4StampSlots];
      r.start_ns = b == 0 ? start : std::min(r.start_ns, start);
    }
    out.push_back(std::move(r));
  }
  return out;
}

Fp4LaunchPhases fp4_launch_phases(const unsigned long long* stamps, int blocks) {
  using namespace stream_gemm::fp4wg;
  Fp4LaunchPhases p;
  if (blocks <= 0) return p;
  auto at = [&](int b, int slot) { return stamps[size_t(b) * kFp4StampSlots + size_t(slot)]; };
  // The median over blocks of f(block) (the upper one of an even count, as roofline's bench_fp4_phases).
  auto median = [&](auto f) {
    std::vector<double> v;
    for (int b = 0; b < blocks; ++b) v.push_back(double(f(b)));
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  std::vector<std::pair<uint64_t, uint64_t>> start_end;
  for (int b = 0; b < blocks; ++b) start_end.emplace_back(at(b, kStStartNs), at(b, kStEndNs));
  static_cast<LaunchSpan&>(p) = launch_span(start_end);
  auto slot = [&](int s) { return median([&](int b) { return at(b, s); }); };
  p.cons_waited = slot(kStConsWaited);
  p.first_staged = slot(kStFirstStaged);
  p.first_data = slot(kStFirstData);
  p.cons_end = slot(kStConsEnd);
  p.full_wait = slot(kStFullWaitCycles);
  p.stages = slot(kStStages);
  p.stage_b = slot(kStStageBCycles);
  p.items = slot(kStItems);
  p.prod_waited = slot(kStProdWaited);
  p.prod_end = slot(kStProdEnd);
  p.empty_wait = slot(kStEmptyWaitCycles);
  p.b_entry = slot(kStBEntry);
  p.b_zeroed = slot(kStBZeroed);
  p.b_codes = slot(kStBCodes);
  p.b_scales = slot(kStBScales);
  return p;
}

}  // namespace deepinfer::cuda

// The register-held sampler's launch plan (kernel in mass_rows.cuh).
#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "cuda/launch.cuh"
#include "cuda/sampling/mass_rows.cuh"
#include "cuda/sampling/mass_rows.h"

namespace jaxnorm {
namespace sampling {
namespace {

// Tokens a thread holds: up to 16 at 2 CTAs an SM; up to 32 at one CTA an SM (mass_rows.cuh), only
// for rows that 16 CTAs of 16 cannot hold, and without a bias (16-bit rows would hold float sums;
// float32's bias loads spilled 68 bytes at 128 registers: ptxas).
constexpr int kHeld = 16;
template <bool kBias>
constexpr int kMaxHeld = kBias ? 16 : 32;

// Whether clusters of `cluster` CTAs of this instance can be scheduled at all (a GPU whose GPCs hold
// fewer SMs than such a cluster needs could not run it), cached by device and size.
template <class T, bool kBias, int kPacks>
bool schedulable(int cluster) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, bool> known;
  const auto key = std::make_pair(device_facts().device, cluster);
  std::lock_guard<std::mutex> lock(mu);
  const auto it = known.find(key);
  if (it != known.end()) return it->second;
  return known[key] = max_active_clusters(mass_rows<T, kMassThreads, kPacks, kBias>, kMassThreads, cluster) > 0;
}

template <class T, bool kBias, int kPacks>
ffi::Error run(cudaStream_t stream, const SelectArgs<T>& a, int cluster, const char* what, bool* launched) {
  if (!schedulable<T, kBias, kPacks>(cluster)) return ffi::Error::Success();
  *launched = true;
  const dim3 grid(cluster, static_cast<unsigned>(std::min<int64_t>(a.rows, 65535)));
  return launch(mass_rows<T, kMassThreads, kPacks, kBias>, grid, dim3(kMassThreads), cluster, stream, what, a);
}

}  // namespace

// The plan: the fewest CTAs a row whose threads hold it (8 K tokens a CTA, else 16 K), taken only
// where every row's CTAs start at once, one an SM (a quarter of the SMs for 16 K a CTA: one CTA an
// SM there). Each CTA holds its SM through the row's whole chain (the read, two cluster exchanges,
// the scan), so rows that queue wait out the chains of the rows before them; the general kernel,
// 2-3 CTAs an SM overlapping their copies, was faster there. Same-call A/B, general / this kernel
// (h100-sampling.md, ff78c98; no filter and min-p 0.1, device time): at 1-8 rows 0.74-0.95x the
// time (32000, 128256 columns; 256000 at 1 row), at 8 x 256000 1.02-1.11x, 64 x 32000 0.97-1.10x,
// 64-256 x 128256 1.13-1.89x. Then spread while the batch leaves SMs idle (a thread's share of the
// row, and so its chain of loads, exps and adds, shrinks), and the fewest packs a thread that hold
// a chunk.
template <class T, bool kBias>
ffi::Error launch_mass_rows(cudaStream_t stream, SelectArgs<T> a, const char* what, bool* launched) {
  constexpr int64_t N = kVecOf<T>;
  *launched = false;
  if (a.cols == 0 || a.cols * static_cast<int64_t>(sizeof(T)) % 16 != 0) return ffi::Error::Success();
  const int64_t sms = device_facts().sms;
  int cluster = static_cast<int>(ceil_div(a.cols, int64_t{kMassThreads} * kHeld));
  int64_t slots = sms;
  if (cluster > kMaxCluster) {
    cluster = static_cast<int>(ceil_div(a.cols, int64_t{kMassThreads} * kMaxHeld<kBias>));
    slots = sms / 4;
  }
  if (cluster > kMaxCluster || a.rows * cluster > slots) return ffi::Error::Success();
  while (cluster < kMaxCluster && a.rows * (cluster + 1) <= sms) ++cluster;
  a.chunk = ceil_div(ceil_div(a.cols, int64_t{cluster}), N) * N;
  const int64_t packs = ceil_div(a.chunk, kMassThreads * N);
  if (packs <= 1) return run<T, kBias, 1>(stream, a, cluster, what, launched);
  if (packs <= 2) return run<T, kBias, 2>(stream, a, cluster, what, launched);
  if constexpr (kMaxHeld<kBias> / N >= 4) {
    if (packs <= 4) return run<T, kBias, 4>(stream, a, cluster, what, launched);
  }
  if constexpr (kMaxHeld<kBias> / N >= 8) return run<T, kBias, 8>(stream, a, cluster, what, launched);
  return ffi::Error::Internal("jaxnorm: mass_rows plan past its packs");
}

#define JN_MASS_ROWS(T)                                                                                       \
  template ffi::Error launch_mass_rows<T, false>(cudaStream_t, SelectArgs<T>, const char*, bool*); \
  template ffi::Error launch_mass_rows<T, true>(cudaStream_t, SelectArgs<T>, const char*, bool*);
JN_MASS_ROWS(float)
JN_MASS_ROWS(__nv_bfloat16)
JN_MASS_ROWS(__half)
#undef JN_MASS_ROWS

}  // namespace sampling
}  // namespace jaxnorm

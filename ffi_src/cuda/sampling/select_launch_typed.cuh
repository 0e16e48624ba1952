// select_rows' launch for logits of type JAXNORM_TYPED (select_launch.h): the plans and rules
// by which the sampling, filter and top_k handlers take the general kernel or the one-read one.
// Included only by the build's translation unit of that dtype.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "cuda/launch.cuh"
#include "cuda/sampling/row_select.cuh"
#include "cuda/sampling/select_launch.h"

namespace jaxnorm {
namespace sampling {

// Columns of one CTA's share of a row: about 32 KB, so a cluster of up to 16 CTAs spreads a wide
// row over many SMs and several clusters fit on an SM; rows past 16 CTAs of 160 KB are not copied
// into shared memory (the passes then re-read global memory, mostly from L2). cluster_for_batch
// revises the cluster from the batch.
constexpr int64_t kChunkBytes = 32 << 10;
constexpr int64_t kMaxResidentBytes = 160 << 10;
constexpr int64_t kChunkElemsQueued = 16 << 10;  // float32 rows that queue: 64 KB chunks
constexpr int64_t kMinChunkElems = 4 << 10;
constexpr int64_t kLongChunk = 32 << 10;  // tokens: the one-read sampler's chunks from here

struct Plan {
  int cluster = 1;
  size_t dyn_smem = 0;
};

inline int default_cluster(int64_t cols, int64_t elem_bytes) {
  int c = 1;
  while (c < kMaxCluster && cols * elem_bytes > kChunkBytes * c) c *= 2;
  return c;
}

// The chunks of a cluster of `cluster` CTAs, sized by the logits' element type and aligned for
// 16-byte loads.
// `copy`: whether the chunks may be held in shared memory (the one-read kernel holds none).
template <class T>
Plan plan_rows(SelectArgs<T>* a, int64_t extra_smem, int cluster, bool copy = true) {
  Plan p;
  p.cluster = cluster;
  constexpr int64_t N = kVecOf<T>;
  a->chunk = ceil_div(ceil_div(a->cols, p.cluster), N) * N;
  const int64_t chunk_bytes = a->chunk * static_cast<int64_t>(sizeof(T));
  a->resident = copy && chunk_bytes <= kMaxResidentBytes;
  a->vec = a->cols * static_cast<int64_t>(sizeof(T)) % 16 == 0;
  a->cand_offset = a->resident ? ceil_div(chunk_bytes, 16) * 16 : 0;
  p.dyn_smem = static_cast<size_t>(a->cand_offset + extra_smem);
  return p;
}

// select_rows at one CTA size: its attributes, its cluster launch, and its resident clusters.
template <class T, int kMode, bool kBias, int kThreads, bool kStream = false>
struct Launch {
  static cudaError_t prepare(const Plan& p) {
    cudaError_t e = allow_smem(select_rows<T, kMode, kBias, kThreads, kStream>, p.dyn_smem);
    return e == cudaSuccess ? allow_cluster(select_rows<T, kMode, kBias, kThreads, kStream>, p.cluster) : e;
  }
  static cudaLaunchConfig_t config(int64_t rows, const Plan& p, cudaStream_t stream, cudaLaunchAttribute* attr) {
    const dim3 grid(p.cluster, static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
    return cluster_config(grid, dim3(kThreads), p.cluster, p.dyn_smem, stream, attr);
  }
  static ffi::Error run(cudaStream_t stream, const SelectArgs<T>& a, const Plan& p, const char* what) {
    cudaError_t e = prepare(p);
    if (e != cudaSuccess) return cuda_error(e, what);
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = config(a.rows, p, stream, &attr);
    e = cudaLaunchKernelEx(&cfg, select_rows<T, kMode, kBias, kThreads, kStream>, a);
    if (e != cudaSuccess) return cuda_error(e, what);
    return last_launch_error(what);
  }
  // How many of these clusters (a row each) the device holds at once, cached by device and plan.
  static int resident_rows(const Plan& p) {
    static std::mutex mu;
    static std::map<std::tuple<int, int, size_t>, int> known;
    const auto key = std::make_tuple(device_facts().device, p.cluster, p.dyn_smem);
    std::lock_guard<std::mutex> lock(mu);
    auto it = known.find(key);
    if (it != known.end()) return it->second;
    int n = 1;
    if (prepare(p) == cudaSuccess) {
      cudaLaunchAttribute attr;
      n = active_clusters(select_rows<T, kMode, kBias, kThreads, kStream>, config(1, p, nullptr, &attr));
    }
    cudaGetLastError();
    return known[key] = n;
  }
};

// A row's cluster: 32 KB chunks, revised by the batch (each revision from the A/B of cluster
// sizes at 1-256 x 32000-151936, h100-sampling.md: the kernel takes about as long per SM per
// resident byte whatever the split, so what counts is that every SM works and no wave runs
// part-empty):
// - 16-bit rows of a small batch, which leaves SMs idle, spread over up to twice as many CTAs
//   (chunks of at least 4K elements);
// - rows that would queue for a second wave: 16-bit rows take the larger resident chunks of a
//   smaller cluster where all rows then fit at once at one CTA an SM and keep 3/4 of the SMs
//   busy; float32 rows take 64 KB chunks where that makes fewer waves.
// The logits update (kBias) keeps the default: its finished rows, known only on the device,
// leave part of the batch idle, and its 16-bit rows re-read the bias over a chunk (64 x 128256,
// half the rows finished: bfloat16 44.3 -> 69.3 us, float32 50.6 -> 57.1 with the revisions).
template <class T, bool kBias, class Few, class Many>
int cluster_for_batch(const SelectArgs<T>& a, int64_t extra_smem) {
  const int64_t sms = device_facts().sms;
  int c = default_cluster(a.cols, sizeof(T));
  if constexpr (kBias) return c;
  if (sizeof(T) == 2) {
    while (c < kMaxCluster && a.rows * 4 * c <= sms && a.cols >= 2 * kMinChunkElems * c) c *= 2;
  }
  SelectArgs<T> t = a;
  const int64_t resident = Many::resident_rows(plan_rows<T>(&t, extra_smem, c));
  if (a.rows <= resident) return c;
  if (sizeof(T) == 2) {
    for (int h = c / 2; h >= 2; h /= 2) {
      const Plan q = plan_rows<T>(&t, extra_smem, h);
      if (!t.resident) break;
      if (a.rows * h <= sms) {
        // One wave that keeps at least 3/4 of the SMs busy.
        return 4 * a.rows * h >= 3 * sms && a.rows <= Few::resident_rows(q) ? h : c;
      }
    }
    return c;
  }
  int h = c;
  while (h > 2 && ceil_div(a.cols, h / 2) <= kChunkElemsQueued) h /= 2;
  if (h == c) return c;
  const int64_t resident_h = Many::resident_rows(plan_rows<T>(&t, extra_smem, h));
  return ceil_div(a.rows, resident_h) < ceil_div(a.rows, resident) ? h : c;
}

// A launch of select_rows: its plan, and whether it takes the 512-thread CTAs (where the rows'
// clusters all fit at one CTA an SM, each pass being latency-bound with 8 warps an SM) or 256
// (up to 3 CTAs an SM).
struct RowsLaunch {
  Plan p;
  bool few = false;
};

template <class T, int kMode, bool kBias>
RowsLaunch rows_launch(SelectArgs<T>* a, int64_t extra_smem) {
  using Few = Launch<T, kMode, kBias, kThreadsFew>;
  using Many = Launch<T, kMode, kBias, kThreadsMany>;
  RowsLaunch l;
  const int c = cluster_for_batch<T, kBias, Few, Many>(*a, extra_smem);
  l.p = plan_rows<T>(a, extra_smem, c);
  if constexpr (kMode == kSample && !kBias && sizeof(T) == sizeof(float)) {
    // Float32 rows that queue for the SMs: the same cluster without the shared-memory copy where
    // that holds more clusters at once and so takes fewer waves (a wave's rows, re-read by the
    // later passes, stay in L2). Forced everywhere it lost 1.15-1.24x where the waves were equal
    // (16 and 48 x 128256); by waves, same-call A/B of top-p 0.9 over 16-256 rows x 32000-256000:
    // 0.80-0.86x at 256000, 0.88-0.97x at 64-256 x 128256, 1.00x elsewhere (h100-sampling.md).
    if (a->resident) {
      SelectArgs<T> t = *a;
      const Plan q = plan_rows<T>(&t, extra_smem, c, false);
      const int64_t held = Many::resident_rows(l.p), streamed = Many::resident_rows(q);
      if (ceil_div(a->rows, streamed) < ceil_div(a->rows, held)) *a = t, l.p = q;
    }
  }
  l.few = a->rows * l.p.cluster <= device_facts().sms && a->rows <= Few::resident_rows(l.p);
  return l;
}

// The one-read kernel's launch: no shared-memory copy of the chunks (a row it hands back re-reads
// global memory, mostly from L2), so a CTA needs only its lists and 2 fit an SM whatever the
// chunk. The smallest cluster whose chunks its list holds (kStreamChunkMax), spread while the
// rows' CTAs still find an SM each. Cluster sizes swept at 1-256 x 32000 and 128256, top-k 50
// (h100-sampling.md, fc08168): where rows queue, the smallest cluster won (its chain of steps a
// row is shortest and every row starts at once: float32 64 x 128256 33.9 us at 2 CTAs a row, 55.9
// at 4, 63.5 at 8; bfloat16 256 x 128256 62.7 at 1, 79.9 at 2, 116.7 at 4).
template <class T, int kMode, bool kBias>
RowsLaunch stream_launch(SelectArgs<T>* a, int64_t extra_smem) {
  using Few = Launch<T, kMode, kBias, kThreadsFew, true>;
  const int64_t sms = device_facts().sms;
  int c = 1;
  while (c < kMaxCluster && ceil_div(a->cols, c) > kStreamChunkMax<T, kBias>) c *= 2;
  while (c < kMaxCluster && a->rows * 2 * c <= sms) c *= 2;
  RowsLaunch l;
  l.p = plan_rows<T>(a, extra_smem, c, false);
  l.few = a->rows * c <= sms && a->rows <= Few::resident_rows(l.p);
  return l;
}

// Whether a one-read CTA's list is expected to hold its chunk's tokens at or above the floor for
// a static k: the floor is about the k-th largest of the threads' first-round maxima, which a
// token passes with probability ~1 - (1 - k / threads)^(1 / t) (t: the tokens a thread sees in a
// round). Taken where that share of the chunk is at most half the list: a list past its capacity
// hands the row to the general passes over global memory (same-call A/B, top_k k = 256 at
// float32 256 x 32000: 134 us against 71 on the general kernel).
template <class T, bool kBias>
bool stream_lists_hold(const SelectArgs<T>& s, bool few, int64_t k) {
  const double threads = few ? kThreadsFew : kThreadsMany;
  const double t = kStreamRoundPacks<T, kBias> * kVecOf<T>;
  const double share = 1.0 - std::pow(1.0 - std::min(1.0, static_cast<double>(k) / threads), 1.0 / t);
  return share * static_cast<double>(s.chunk) <= static_cast<double>(s.local_cap) / 2;
}

template <class T, int kMode, bool kBias, bool kStream>
ffi::Error run_rows(cudaStream_t stream, const SelectArgs<T>& a, const RowsLaunch& l, const char* what) {
  return l.few ? Launch<T, kMode, kBias, kThreadsFew, kStream>::run(stream, a, l.p, what)
               : Launch<T, kMode, kBias, kThreadsMany, kStream>::run(stream, a, l.p, what);
}

template <class T, int kMode, bool kBias>
ffi::Error launch_select(cudaStream_t stream, SelectArgs<T> a, int64_t extra_smem, const char* what) {
  if (a.rows == 0) return ffi::Error::Success();
  // The delegate floor (gather_select.cuh) where rows queue for the SMs: same-call A/B at 39ad89e,
  // top-k 50 and top-k 50 with top-p 0.9, 1-256 x 32000 and 128256: 5-10% faster at 64-256 rows
  // (both dtypes, both vocabularies), 1-2% slower at batch 1 and at 8 x 32000 (its two barriers
  // on a row's critical path), +2% at 8 x 128256.
  a.delegate_floor = a.rows >= 64;
  SelectArgs<T> g = a;
  const RowsLaunch general = rows_launch<T, kMode, kBias>(&g, extra_smem);
  // The chunk copy by cp.async where rows queue for the SMs (more CTAs than SMs). Same-call A/B
  // against the register copy (h100-sampling.md, cd5d1c9; top-p 0.9 and top_k 50 at 1-256 x
  // 128256): float32 64 rows 0.959-0.971x the time, 256 rows 0.944-0.961x; bfloat16 256 rows
  // 0.972x; but bfloat16 64 rows (one wave) 1.011-1.025x and batch 1 1.003-1.011x.
  g.async_copy = a.rows * general.p.cluster > device_facts().sms;
  if constexpr (kMode != kFilter) {
    // The one-read top-k kernel (stream_select.cuh) with its own plan where rows queue for the SMs
    // (more CTAs than SMs in the general kernel's plan), or where the general kernel's chunks are
    // long (its passes there are instruction-bound). Same-call A/B against the general kernel, top-k
    // 50 sampling (h100-sampling.md, 8ef219c): 0.47x at float32 64 x 128256 (0.72x bfloat16),
    // 0.43x / 0.39x at float32 / bfloat16 256 x 128256, 0.60x / 0.52x at 256 x 32000, 0.38-0.52x
    // with a logits update; forced at 1-8 rows (fc08168's sweep), 0.91-1.34x (the latency of its
    // steps on a row's critical path), so the general kernel stays there. top_k of k <= 1024 takes
    // the same rule: same-call A/B at 66bf10a, k = 50 and 100, 0.42-0.68x at 64-256 x 128256 and
    // 256 x 32000, 0.90-1.03x at 64 x 32000.
    if (a.stream) {
      SelectArgs<T> s = a;
      const bool queue = a.rows * general.p.cluster > device_facts().sms;
      if (queue || g.chunk >= kLongChunk || one_read_switch() == 1) {
        const RowsLaunch one_read = stream_launch<T, kMode, kBias>(&s, extra_smem + (a.local_cap + a.comp_cap) * 8);
        // top_k past what the delegates' floor holds takes the rising floor (stream_select.cuh).
        // Same-call A/B at 979b18f (h100-sampling.md), against the general kernel: k = 1024 at
        // float32 64 x 128256 99.8 -> 61.9 us, 256 x 128256 0.65x, 256 x 32000 0.69x, bfloat16
        // 0.50-0.95x; k = 256 0.46-0.79x. Forced where the delegates hold, it lost (k = 50: 1.04-
        // 1.09x the delegates' time: a histogram of the whole first round, a barrier a round).
        if constexpr (kMode == kTopK) s.rising = !stream_lists_hold<T, kBias>(s, one_read.few, a.k);
        return run_rows<T, kMode, kBias, true>(stream, s, one_read, what);
      }
    }
  }
  return run_rows<T, kMode, kBias, false>(stream, g, general, what);
}

// JAXNORM_FLAG: kBias (a unit each, CMakeLists.txt); top_k takes no bias.
template ffi::Error launch_select<JAXNORM_TYPED, kSample, JAXNORM_FLAG>(cudaStream_t, SelectArgs<JAXNORM_TYPED>,
                                                                        int64_t, const char*);
template ffi::Error launch_select<JAXNORM_TYPED, kFilter, JAXNORM_FLAG>(cudaStream_t, SelectArgs<JAXNORM_TYPED>,
                                                                        int64_t, const char*);
#if !JAXNORM_FLAG
template ffi::Error launch_select<JAXNORM_TYPED, kTopK, false>(cudaStream_t, SelectArgs<JAXNORM_TYPED>, int64_t,
                                                               const char*);
#endif

}  // namespace sampling
}  // namespace jaxnorm

// What every pass of the sampling kernel shares: its launch arguments and shared memory, the
// cluster-wide max/argmax, the histogram of a pass summed over the cluster, the crossing bin of
// a count or mass target, and the per-token definitions (value bin, mass, Gumbel score).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/sampling_math.h"
#include "cuda/device_facts.h"
#include "cuda/device_types.cuh"
#include "cuda/row_reduce.cuh"

namespace jaxnorm {
namespace sampling {

namespace cg = cooperative_groups;

// A CTA's threads: 256, or 512 where a grid has at most one CTA an SM (a small batch), so each
// SM has more warps to hide the passes' latencies. Shared state and block reductions are sized
// by it (SelectShared<kThreads>; the functions below deduce it from their SelectShared).
constexpr int kThreadsMany = 256;
constexpr int kThreadsFew = 512;
constexpr int kBins = kValueBins;
constexpr int kWindowShift = 21;  // top_k's first pass: the keys' top 11 bits
constexpr int kTopKMax = 2048;
constexpr int kMassSplit = 19;
constexpr int kCand = 1024;  // the sampling modes' gather buffer in CTA 0: 8 KB, 2 or 4 a thread

enum Mode : int { kSample = 0, kFilter = 1, kTopK = 2 };

template <class T>
struct SelectArgs {
  const T* x;
  int64_t rows, cols;
  int64_t chunk;    // columns per CTA (a multiple of the 16-byte pack)
  bool resident;    // the chunk is copied into shared memory (else passes re-read global memory)
  bool vec;         // rows are 16-byte aligned: copy by 16-byte packs
  const uint32_t* keys;
  int64_t n_keys, key_width;
  const float* temps;
  int64_t n_temps;
  const int32_t* top_k;
  int64_t n_k;
  const float* top_p;
  int64_t n_p;
  const float* log_min_p;
  int64_t n_m;
  const float* bias;       // kBias: (C) f32
  const bool* finished;    // kSample: (n_fin) or null
  int64_t n_fin;
  const int32_t* end_id;   // (n_end), with finished
  int64_t n_end;
  bool delegate_floor; // samplers with top-k: bound the boundary bin by delegate_floor first
  bool topk_window;    // kTopK: first pass over key bins in a window below the row's largest key
  int64_t gather_cap;  // entries of CTA 0's gather buffer (0: radix passes only; A/B knob)
  bool async_copy;     // resident chunks without a bias are copied by cp.async (launch_select)
  int64_t k;           // kTopK
  int64_t cand_offset; // kTopK: byte offset of CTA 0's candidate buffer in dynamic shared memory
  bool stream;         // kSample rows with top-k, kTopK rows: the one-read path (stream_select.cuh)
  bool rising;         // kTopK: the one-read floor from the first round's tokens, raised as the list fills
  int64_t local_cap;   // the one-read lists: entries of a CTA's list (and of CTA 0's top_k merge)
  int64_t comp_cap;    // and of its entries at or above theta, sorted
  void* out;           // int32 tokens (R), T filtered (R, C), or int32 indices (R, k)
};

// The one-read top-k path (stream_select.cuh): its lists' default capacities (the sampler's; top_k
// sizes them by k), the largest k it takes (top_k, with the rising floor), and what a CTA
// publishes of its list for its peers.
constexpr int kLocalCap = 2048;  // entries of a CTA's own list (16 KB of shared memory)
constexpr int kCompCap = 512;    // and of its entries at or above theta, sorted (4 KB)
constexpr int kStreamKMax = 1024;
constexpr int kStreamTop = 16;
struct StreamStatus {
  uint32_t kth;              // a key the chunk has k tokens at or above (0: it has fewer than k)
  uint32_t max;              // the chunk's largest key (0: no token)
  uint32_t at;               // its tokens at or above kth, sorted in its compacted list
  uint32_t over;             // the list overflowed
  uint32_t top[kStreamTop];  // the keys of ranks step, 2 step, ... of its sorted list (0 past its tokens)
};

template <int kThreads>
struct SelectShared {
  static constexpr int kWarps = kThreads / 32;
  uint32_t cnt[2][kBins];               // this CTA's histogram, double-buffered across passes
  unsigned long long mass[2][kBins];
  unsigned long long warp_mass[kWarps][kBins];  // per warp (CAS loops uncontended): 64-bit sums, or split halves (cluster_histogram)
  float fval[2];                        // this CTA's published max / best score
  int ival[2];                          // and best index
  unsigned long long bin_cnt[kBins];    // the cluster's totals
  unsigned long long bin_mass[kBins];
  float wf[kWarps];
  int wi[kWarps];
  uint32_t dec_bin;
  unsigned long long dec_above, dec_n, target;
  uint32_t ncand;                       // CTA 0: candidates gathered so far
  unsigned long long wsum[kWarps];      // block sums and scans
  int wmax[kWarps];
  unsigned long long gather_n;
  uint32_t floor_bin;                   // delegate_floor's bound
  uint32_t pub[4];                      // CTA 0's resolved thresholds (bin, key of top-k, top-p)
  float above_s;                        // this CTA's best draw among the tokens above the gathered bin
  int above_i;
  bool arrived;                         // at the exit barrier, early (see arrive_early)
  // The inverse-transform draws (inverse_draw.cuh):
  unsigned long long part[2];           // this CTA's share of a cluster sum, double-buffered by phase
  unsigned long long pick_pos;          // the draw's position in the picked CTA's share
  unsigned long long pick_sub;          // the mass of the next proposal's tokens in the crossing bin
  uint32_t pick_bin;                    // the picked value bin
  int pick_rank;                        // the CTA that holds the drawn token
  int located;                          // its local index (locate_token)
  uint32_t pick_key;                    // its key, for the peers' test
  // The one-read top-k path (stream_select.cuh):
  uint32_t nlocal, ncomp;               // entries of this CTA's list, and of its compacted top
  StreamStatus status;                  // this CTA's, for its peers
  uint32_t peer_at[kMaxCluster];        // each peer's compacted entries
  uint32_t peer_kth[kMaxCluster];       // and the key they lie at or above
  uint32_t peer_top[kMaxCluster][kStreamTop];
  uint32_t peer_n[kMaxCluster];         // top_k: each peer's entries that CTA 0 merges
  uint32_t pull_from, row_max;          // the bound CTA 0 pulls from; the row's largest key
  bool stream_ok;                       // the row takes the path (CTA 0's, after its pull)
};

// cl.sync() in halves. CTA 0 of a row's cluster, once it has read what it needs of its peers'
// shared memory and they need nothing of its own, arrives at the kernel's exit barrier early (on
// its last row) and sorts after: the peers leave at once instead of holding their SM slots
// through the sort (measured: 32-40% of the warps' stall samples were peers at that barrier,
// top-p and top_k k=1024 at 64 x 128256). Every CTA arrives once at every barrier phase.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void arrive_early(volatile bool* arrived) {
  cluster_arrive();
  *arrived = true;
}

__device__ __forceinline__ bool better(float s, int i, float bs, int bi) { return s > bs || (s == bs && i < bi); }

__device__ __forceinline__ float max_of(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ uint32_t max_of(uint32_t a, uint32_t b) { return max(a, b); }

template <class V>
__device__ __forceinline__ V warp_max(V v) {
  for (int o = 16; o > 0; o >>= 1) v = max_of(v, __shfl_xor_sync(~0u, v, o));
  return v;
}

// The block step of the cluster maxima: each warp's maximum of v into sh.wf, then a CTA barrier;
// max_of_warps reads them back.
template <int kThreads, class V>
__device__ __forceinline__ const V* publish_warp_max(SelectShared<kThreads>& sh, V v) {
  V* wv = reinterpret_cast<V*>(sh.wf);
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) wv[threadIdx.x / 32] = v;
  __syncthreads();
  return wv;
}
template <int kThreads, class V>
__device__ __forceinline__ V max_of_warps(const V* wv) {
  V m = wv[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) m = max_of(m, wv[w]);
  return m;
}

// The cluster-wide maximum of v (a NaN-free float, or a key) or argmax of (score, index): every
// CTA publishes its block result in its buffer of this phase, and after the cluster barrier reads
// all of them in rank order, so every CTA holds the same answer. `lowest` is the identity.
template <int kThreads, class V>
__device__ V cluster_max(const cg::cluster_group& cl, SelectShared<kThreads>& sh, int& phase, V v, V lowest) {
  static_assert(sizeof(V) == sizeof(float), "published in the float slots");
  const V* wv = publish_warp_max(sh, v);
  const int b = phase++ & 1;
  V* pub = reinterpret_cast<V*>(&sh.fval[b]);
  if (threadIdx.x == 0) *pub = max_of_warps<kThreads>(wv);
  cl.sync();
  V v_r[kMaxCluster];
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r) v_r[r] = r < cl.num_blocks() ? *cl.map_shared_rank(pub, r) : lowest;
  V m = lowest;
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r) m = max_of(m, v_r[r]);
  return m;
}

// cluster_max over the cluster's `peers` CTAs by st.async pushes onto mbarriers (row_reduce.cuh's
// push_and_wait): no cluster barrier, so no release fence waits for the CTA's memory operations in
// flight. `ex` counts these exchanges (push_and_wait alternates mx's copies by it); the kernel
// called cluster_reduce_init(mx, peers) first and this is the first cluster barrier after it.
using MaxPushSmem = RowReduceSmem<uint32_t, 1, true>;
template <int kThreads, class V>
__device__ V cluster_max_pushed(SelectShared<kThreads>& sh, MaxPushSmem& mx, int& phase, int& ex, V v, V lowest,
                                unsigned peers) {
  static_assert(sizeof(V) == sizeof(uint32_t), "pushed as a 32-bit word");
  const V m = max_of_warps<kThreads>(publish_warp_max(sh, v));
  ++phase;  // the same phase sequence as cluster_max's
  uint32_t bits;
  memcpy(&bits, &m, 4);
  push_and_wait(bits, mx, ex, peers);
  const int copy = ex++ & 1;
  V out = lowest;
  for (unsigned r = 0; r < peers; ++r) {
    V pr;
    memcpy(&pr, &mx.cta[copy][r], 4);
    out = max_of(out, pr);
  }
  return out;
}

// The warp's best (score, index), in every lane.
__device__ __forceinline__ void warp_best(float& s, int& i) {
  for (int o = 16; o > 0; o >>= 1) {
    const float s2 = __shfl_xor_sync(~0u, s, o);
    const int i2 = __shfl_xor_sync(~0u, i, o);
    if (better(s2, i2, s, i)) s = s2, i = i2;
  }
}

// The block's best (score, index), left in sh.wf[0] / sh.wi[0] for thread 0 (callers sync
// before others read it).
template <int kThreads>
__device__ void block_best(SelectShared<kThreads>& sh, float s, int i) {
  constexpr int kWarps = kThreads / 32;
  warp_best(s, i);
  __syncthreads();  // an earlier reader of sh.wf / sh.wi is done
  if (threadIdx.x % 32 == 0) sh.wf[threadIdx.x / 32] = s, sh.wi[threadIdx.x / 32] = i;
  __syncthreads();
  if (threadIdx.x == 0) {
    float bs = sh.wf[0];
    int bi = sh.wi[0];
    for (int w = 1; w < kWarps; ++w) {
      if (better(sh.wf[w], sh.wi[w], bs, bi)) bs = sh.wf[w], bi = sh.wi[w];
    }
    sh.wf[0] = bs;
    sh.wi[0] = bi;
  }
}

template <int kThreads>
__device__ int cluster_argmax(const cg::cluster_group& cl, SelectShared<kThreads>& sh, int& phase, float s, int i) {
  block_best(sh, s, i);
  const int b = phase++ & 1;
  if (threadIdx.x == 0) sh.fval[b] = sh.wf[0], sh.ival[b] = sh.wi[0];
  cl.sync();
  float s_r[kMaxCluster];
  int i_r[kMaxCluster];
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r) {
    const bool in = r < cl.num_blocks();
    s_r[r] = in ? *cl.map_shared_rank(&sh.fval[b], r) : -INFINITY;
    i_r[r] = in ? *cl.map_shared_rank(&sh.ival[b], r) : 0x7fffffff;
  }
  float bs = -INFINITY;
  int bi = 0x7fffffff;
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r) {
    if (better(s_r[r], i_r[r], bs, bi)) bs = s_r[r], bi = i_r[r];
  }
  return bi;
}

// The pushed histogram exchange (cluster_histogram's kPush): each CTA's counts land in every
// peer's receive buffer by st.async on the peer's mbarrier, copy `count & 1`, so a CTA waits for
// its peers' bytes instead of meeting them at a cluster barrier, and sums its own shared memory
// instead of reading 16 peers'. The receive buffer is the CTA's sh.warp_mass (exactly its 32 KiB
// at 512 threads; static shared memory has no room for another): the weighed histograms use it
// only before their cluster barrier, and a peer pushes the next counts only after it received
// this CTA's previous exchange, which this CTA sends after all of its earlier work. Only the
// kernels that push allocate the mbarriers (hist_push_smem's function-scope storage); they init
// them with init_hist_push before the cluster barrier that orders an init before any peer's push.
struct HistPushSmem {
  unsigned long long arrived[2];
  unsigned count;  // the CTA's pushed exchanges so far
};
__device__ __forceinline__ HistPushSmem& hist_push_smem() {
  __shared__ HistPushSmem s;
  return s;
}
template <int kThreads>
__device__ __forceinline__ uint32_t* hist_push_buffer(SelectShared<kThreads>& sh, int copy) {
  static_assert(sizeof(sh.warp_mass) >= 2 * kMaxCluster * kBins * sizeof(uint32_t), "room for two copies");
  return reinterpret_cast<uint32_t*>(&sh.warp_mass[0][0]) + copy * kMaxCluster * kBins;
}
// Thread 0, before the cluster barrier's fence (cluster_reduce_init's).
__device__ __forceinline__ void init_hist_push() {
  HistPushSmem& hp = hist_push_smem();
  for (int b = 0; b < 2; ++b) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&hp.arrived[b])));
  hp.count = 0;
}
// Histograms the elements i < n for which visit(i, digit, mass) is true, and leaves the
// cluster's totals in sh.bin_cnt (and sh.bin_mass) for every thread. Without kCounts (a weighed
// histogram whose caller needs no counts) the counts are all 0: one shared atomic less a token.
// kGroups: visit(g, digit[4], mass[4]) takes tokens 4g .. 4g + 3 at once (one vector load, four
// independent chains), every one of them in (those past n are not added).
// kPush (counts only): the exchange by st.async (HistPushSmem), in the kernels that init it.
template <bool kMass, bool kCounts = true, bool kGroups = false, bool kPush = false, int kThreads, class Visit>
__device__ void cluster_histogram(const cg::cluster_group& cl, SelectShared<kThreads>& sh, int& phase, int n,
                                  Visit visit) {
  constexpr int kWarps = kThreads / 32;
  const int b = phase++ & 1;
  const int warp = threadIdx.x / 32;
  for (int i = threadIdx.x; i < kBins; i += kThreads) {
    sh.cnt[b][i] = 0;
    if (kMass) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sh.warp_mass[w][i] = 0;
    }
  }
  __syncthreads();
  static_assert(!kPush || (kCounts && !kMass), "pushed histograms carry counts only");
  unsigned hx = 0;  // kPush: the exchange's number, read by all before thread 0 moves it
  if constexpr (kPush) hx = hist_push_smem().count;
  // A 64-bit shared atomic add is a CAS loop. While a warp's sums fit, masses go into its slot as
  // two 32-bit halves by native atomics: q = hi * 2^19 + lo with both halves <= 2^19, and a warp
  // adds at most n / kWarps + 128 tokens to a bin, so each half's sum stays below 2^32 while that
  // is below 2^13 (float32 chunks of 64 KB, 16-bit ones of 128 KB at 512 threads). The warp's
  // slots hold the kBins low halves, then the high ones: a warp's adds to distinct bins spread
  // over all 32 banks, where interleaved halves put every low half on the 16 even banks.
  const bool split = n / kWarps + 128 < (1 << 13);
  unsigned* const lo_half = reinterpret_cast<unsigned*>(&sh.warp_mass[warp][0]);
  // The token loop, split a constant in it (kHoist 1: true, 2: false) or tested at each token
  // (0). Weighed groups (top-p's histogram) take the constant: tested inside, ptxas re-tested the
  // uniform flag at every token (3 instructions of ~36). The radix passes keep the test: two copies
  // of their loops pushed the 80-register samplers into more spills.
  auto pass = [&](auto hoist_c) {
    constexpr int kHoist = decltype(hoist_c)::value;
    auto add = [&](uint32_t d, unsigned long long q) {
      if (kCounts) atomicAdd(&sh.cnt[b][d], 1u);
      if (kMass && q) {  // tail tokens weigh 0
        if (kHoist == 1 || (kHoist == 0 && split)) {
          atomicAdd(lo_half + d, static_cast<unsigned>(q & ((1u << kMassSplit) - 1)));
          atomicAdd(lo_half + kBins + d, static_cast<unsigned>(q >> kMassSplit));
        } else {
          atomicAdd(&sh.warp_mass[warp][d], q);
        }
      }
    };
    if constexpr (kGroups) {
      for (int g = threadIdx.x; 4 * g < n; g += kThreads) {
        uint32_t d[4];
        unsigned long long q[4];
        visit(g, d, q);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (4 * g + j < n) add(d[j], q[j]);
        }
      }
    } else {
      for (int i = threadIdx.x; i < n; i += kThreads) {
        uint32_t d;
        unsigned long long q = 0;
        if (visit(i, d, q)) add(d, q);
      }
    }
  };
  if constexpr (kMass && kGroups) {
    if (split) {
      pass(std::integral_constant<int, 1>{});
    } else {
      pass(std::integral_constant<int, 2>{});
    }
  } else {
    pass(std::integral_constant<int, 0>{});
  }
  if (kMass) {
    __syncthreads();
    for (int i = threadIdx.x; i < kBins; i += kThreads) {
      unsigned long long m = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const unsigned* halves = reinterpret_cast<const unsigned*>(&sh.warp_mass[w][0]);
        m += split ? halves[i] + (static_cast<unsigned long long>(halves[kBins + i]) << kMassSplit)
                   : sh.warp_mass[w][i];
      }
      sh.mass[b][i] = m;
    }
  }
  if constexpr (kPush) {
    HistPushSmem& hp = hist_push_smem();
    const unsigned peers = cl.num_blocks(), rank = cl.block_rank();
    const int copy = hx & 1;
    uint32_t* recv = hist_push_buffer(sh, copy);  // [kMaxCluster][kBins]
    __syncthreads();  // the CTA's counts complete
    if (threadIdx.x == 0) {
      hp.count = hx + 1;
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&hp.arrived[copy])),
                   "r"(peers * kBins * 4u)
                   : "memory");
    }
    for (unsigned i = threadIdx.x; i < peers * (kBins / 2); i += kThreads) {
      const unsigned r = i / (kBins / 2), q = i % (kBins / 2);
      push_async2(sh.cnt[b][2 * q], sh.cnt[b][2 * q + 1], recv + rank * kBins + 2 * q, &hp.arrived[copy], r);
    }
    // A copy is rewritten two exchanges later: by then every thread here has summed it (each
    // exchange starts with a CTA barrier, and a peer pushes the next one only after this CTA's).
    wait_phase<true>(&hp.arrived[copy], (hx >> 1) & 1);
    for (int bin = threadIdx.x; bin < kBins; bin += kThreads) {
      unsigned long long ct = 0;
      for (unsigned r = 0; r < peers; ++r) ct += recv[r * kBins + bin];
      sh.bin_cnt[bin] = ct;
    }
    __syncthreads();
    return;
  }
  cl.sync();
  const unsigned peers = cl.num_blocks();
  for (int bin = threadIdx.x; bin < kBins; bin += kThreads) {
    // All peers' loads issued before any is summed: one DSMEM round trip, not one per peer.
    uint32_t c[kMaxCluster];
    unsigned long long m[kMaxCluster];
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r) {
      c[r] = kCounts && r < peers ? *cl.map_shared_rank(&sh.cnt[b][bin], r) : 0u;
      if (kMass) m[r] = r < peers ? *cl.map_shared_rank(&sh.mass[b][bin], r) : 0ull;
    }
    unsigned long long ct = 0, mt = 0;
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r) {
      ct += c[r];
      if (kMass) mt += m[r];
    }
    sh.bin_cnt[bin] = ct;
    if (kMass) sh.bin_mass[bin] = mt;
  }
  __syncthreads();
}

// The first bin from the top whose running total (counts, or masses) reaches the target, or the
// lowest non-empty bin when none does; sets sh.dec_bin, dec_above (the total above the bin) and
// dec_n (its count). With p >= 0 the target is top_p_target(p, total) (kept in sh.target).
template <bool kMass, int kThreads>
__device__ void find_crossing(SelectShared<kThreads>& sh, unsigned long long target, double p) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    unsigned long long v[8], s = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int bin = kBins - 1 - 8 * lane - j;
      v[j] = kMass ? sh.bin_mass[bin] : sh.bin_cnt[bin];
      s += v[j];
    }
    unsigned long long incl = s;
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned long long t = __shfl_up_sync(~0u, incl, o);
      if (lane >= o) incl += t;
    }
    if (p >= 0.0) target = top_p_target(p, __shfl_sync(~0u, incl, 31));
    if (lane == 0) sh.target = target;
    const unsigned long long excl = incl - s;
    const unsigned cross = __ballot_sync(~0u, excl < target && incl >= target);
    if (cross) {
      if (lane == __ffs(cross) - 1) {
        unsigned long long a = excl;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (a + v[j] >= target) {
            const int bin = kBins - 1 - 8 * lane - j;
            sh.dec_bin = bin, sh.dec_above = a, sh.dec_n = sh.bin_cnt[bin];
            break;
          }
          a += v[j];
        }
      }
    } else {
      int low = -1;
      unsigned long long a = excl, above = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int bin = kBins - 1 - 8 * lane - j;
        if (sh.bin_cnt[bin] > 0) low = bin, above = a;
        a += v[j];
      }
      const unsigned any = __ballot_sync(~0u, low >= 0);
      if (any && lane == 31 - __clz(any)) sh.dec_bin = low, sh.dec_above = above, sh.dec_n = sh.bin_cnt[low];
    }
  }
  __syncthreads();
}

// A threshold of the sampling modes: token v (key `key`) is kept when its value digit is above
// `bin`, or equal to it with key >= `key`. The value digit is 255 minus a bin 1/8 wide in
// s = (v - max) / temperature (digit 0: s <= -31.875 and -inf), so the first pass spreads the row
// over ~200 bins where the key's top byte (sign and exponent) would crowd it into ~10 (measured:
// top-p 503 -> 167 us at 64 x 128256); digits grow with v, so a threshold keeps an upper set of
// values, as a key threshold would.
struct Threshold {
  uint32_t bin = 0;
  uint32_t key = 0;
};

// A token's mass exp(s) in fixed point and its Gumbel-max score: one definition for every path,
// so the gather and the radix passes weigh and draw the same token bit for bit.
//
// __expf(s) is ex2.approx.f32(s * log2(e)); without -ftz ptxas wraps that MUFU.EX2 in a subnormal
// fixup (a compare, a scale before and a square after: 3 of the weighed histogram's ~36
// instructions a token). ex2_approx, the .ftz form, is the same MUFU.EX2 on every argument >= -126,
// and below it both results times 2^38 are under 2^-88, which round to the same 0: the same masses
// bit for bit. Likewise lg2_approx for __logf's arguments here, which are normal floats (uniforms
// in [2^-24, 1 - 2^-24] and their -ln, >= 5.9e-8), so the fixup never fires.
constexpr float kLn2 = 0x1.62e430p-1f;  // float(ln 2), __logf's factor (0x3f317218)

__device__ __forceinline__ unsigned long long mass_of(float s) {
  return __float2ull_rn(ex2_approx(s * kLog2e) * static_cast<float>(kMassScale));
}

// The inverse-transform draw of rows without top-k or top-p weighs a token by these alone, in both
// kernels that draw it (draw_by_mass, mass_rows), so both draw the same token: s = (v - max) /
// temperature of a token whose logit (bias added) is x, in a row of maximum m (0 in a +inf row),
// and its kept mass, 0 where min-p drops it.
__device__ __forceinline__ float scaled(float x, float m, bool inf_row, const RowParams& q) {
  return (sampling_value(x, inf_row) - m) * q.inv_t;
}
__device__ __forceinline__ unsigned long long kept_mass(float s, const RowParams& q) {
  return s >= q.log_min_p ? mass_of(s) : 0ull;
}

// -ln(u) of a uniform in (0, 1). Near 1 __logf is no good: its absolute error (up to 2^-21.41 on
// [0.5, 2], CUDA's math API) is most of the value (~5% of it at the largest u of a 128K-token row,
// whose noises decide flat rows). PyTorch guards its exponential sampler at u = 1 - 2^-24, where
// the fast log may return 0 (an infinite noise); on sm_90 it did not (H200, e0a2848), but nothing
// documents that. For v = 1 - u <= 1/16 (exact), the series of -ln(1 - v) to v^6
// (relative error < 1e-8); __logf elsewhere (|ln u| >= 0.064: relative error < 6e-6). Branch-free:
// a warp's tokens would take both sides.
__device__ __forceinline__ float neg_log_uniform(float u) {
  const float v = 1.0f - u;
  const float series =
      v * fmaf(v, fmaf(v, fmaf(v, fmaf(v, fmaf(v, 1.0f / 6.0f, 0.2f), 0.25f), 1.0f / 3.0f), 0.5f), 1.0f);
  return v <= 0.0625f ? series : lg2_approx(u) * -kLn2;  // -__logf(u)
}

// s - __logf(y) as nvcc emits it (one fma.rn of lg2(y) by -ln 2), with the .ftz lg2.
__device__ __forceinline__ float gumbel_score(float s, uint32_t word) {
  return fmaf(lg2_approx(neg_log_uniform(open_uniform(word))), -kLn2, s);
}

// Token idx's own random word (its group's Philox call picks one of four; selects, not an
// indexed local array). For a row's few candidates: the rounds rolled.
__device__ __forceinline__ uint32_t token_word(int idx, const RowParams& q) {
  const Philox4 r = token_words<1>(static_cast<uint32_t>(idx) >> 2, q.row_in_key, q.key0, q.key1);
  return idx & 2 ? (idx & 1 ? r.v[3] : r.v[2]) : (idx & 1 ? r.v[1] : r.v[0]);
}

// The Gumbel-max draw over the kept tokens 4g .. 4g + 3 of a chunk starting at column c0 (a
// multiple of 4), whose s are given: the group's one Philox call, skipped when none is kept.
__device__ __forceinline__ void draw4(int64_t c0, int g, const float (&s)[4], const bool (&keep)[4],
                                      const RowParams& q, float& best, int& best_i) {
  if (!(keep[0] || keep[1] || keep[2] || keep[3])) return;
  const Philox4 w = token_words(static_cast<uint32_t>((c0 >> 2) + g), q.row_in_key, q.key0, q.key1);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (!keep[j]) continue;
    const float score = gumbel_score(s[j], w.v[j]);
    const int idx = static_cast<int>(c0) + 4 * g + j;
    if (better(score, idx, best, best_i)) best = score, best_i = idx;
  }
}

__device__ __forceinline__ bool keeps(const Threshold& t, uint32_t bin, uint32_t key) {
  return bin > t.bin || (bin == t.bin && key >= t.key);
}

}  // namespace sampling
}  // namespace jaxnorm

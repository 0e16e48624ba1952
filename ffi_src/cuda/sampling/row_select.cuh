// One kernel for the sampling family: a thread-block cluster takes a row, each CTA copies its
// chunk of the row into shared memory once (the row's only DRAM read), and every later pass
// (radix-select histograms, the Gumbel draw, the filtered store) reads those copies.
//
// The sampling modes first try one gather: a histogram of value bins finds the bin that holds the
// top-k boundary (or, top-p alone, the top-p crossing), and the tokens at or above it (or in it),
// usually a few dozen to a few hundred, are gathered into CTA 0, which sorts them and resolves
// the thresholds exactly, from the same keys and fixed-point masses as the radix passes below,
// and draws the token: among its candidates, and, when only the bin was gathered, among the
// peers' draws over the tokens above it, made in the same pass. Rows whose gather would overflow
// CTA 0's buffer (flat rows, wide top-k) take the radix passes.
//
// Thresholds are otherwise found by radix select: each CTA histograms its chunk in shared memory, the
// cluster sums the histograms through distributed shared memory (each CTA reads every peer's, so
// all take the same decision), and the bin holding the target is refined in the next pass. A
// pass stops early once the chosen bin holds exactly what is still needed. Counts and fixed-point
// masses are integers, so the sums, and therefore the thresholds, do not depend on the order of
// the atomic additions.
//
// Modes: kSample (one token a row: Gumbel-max over the kept tokens) and kFilter (the logits with
// the dropped tokens at -inf) select with select_threshold: a first pass over value bins of
// (v - max) / T, then 8 key bits a pass inside the chosen bin. kTopK (the k largest in lax.top_k's
// order) selects with count_select on the raw key, which orders NaN and -0 as lax.top_k does and
// needs no row maximum, until the keys at or above its bin fit CTA 0's buffer (then it gathers
// and sorts them all), else on to the index among ties; CTA 0 bitonic-sorts the k winners.
//
// The logits update of a decoding loop rides on the same read (kBias: the sampling modes with an
// output bias): every pass sees logits + bias in float32. A float32 row's shared-memory copy holds
// those sums; a 16-bit row's holds the logits as loaded and each pass adds the bias again (a
// [vocab] vector that all rows share, in L1/L2): float sums would double its shared memory, so its
// cluster (bf16, 64 x 128256, top-k 50 and top-p 0.9: 1.63x the time without a bias). A finished
// row (kSample) writes its end_id and reads nothing.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/sampling_math.h"
#include "cuda/device_types.cuh"

namespace jaxnorm {
namespace sampling {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
constexpr int kMaxCluster = 16;
constexpr int kTopKMax = 2048;
constexpr int kMassSplit = 19;
constexpr int kCand = 1024;  // the sampling modes' gather buffer in CTA 0: 8 KB, 4 a thread

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
  int64_t gather_cap;  // entries of CTA 0's gather buffer (0: radix passes only; A/B knob)
  int64_t k;           // kTopK
  int64_t cand_offset; // kTopK: byte offset of CTA 0's candidate buffer in dynamic shared memory
  void* out;           // int32 tokens (R), T filtered (R, C), or int32 indices (R, k)
};

struct SelectShared {
  uint32_t cnt[2][kBins];               // this CTA's histogram, double-buffered across passes
  unsigned long long mass[2][kBins];
  unsigned long long warp_mass[kWarps][kBins];  // per warp: 64-bit atomics are CAS loops, keep them uncontended
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
  uint32_t pub[4];                      // CTA 0's resolved thresholds (bin, key of top-k, top-p)
  float above_s;                        // this CTA's best draw among the tokens above the gathered bin
  int above_i;
};

__device__ __forceinline__ bool better(float s, int i, float bs, int bi) { return s > bs || (s == bs && i < bi); }

// The cluster-wide maximum of v (NaN-free) or argmax of (score, index): every CTA publishes its
// block result in its buffer of this phase, and after the cluster barrier reads all of them in
// rank order, so every CTA holds the same answer.
__device__ float cluster_max(const cg::cluster_group& cl, SelectShared& sh, int& phase, float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(~0u, v, o));
  if (threadIdx.x % 32 == 0) sh.wf[threadIdx.x / 32] = v;
  __syncthreads();
  const int b = phase++ & 1;
  if (threadIdx.x == 0) {
    float m = sh.wf[0];
    for (int w = 1; w < kWarps; ++w) m = fmaxf(m, sh.wf[w]);
    sh.fval[b] = m;
  }
  cl.sync();
  float v_r[kMaxCluster];
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r) v_r[r] = r < cl.num_blocks() ? *cl.map_shared_rank(&sh.fval[b], r) : -INFINITY;
  float m = -INFINITY;
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r) m = fmaxf(m, v_r[r]);
  return m;
}

// The block's best (score, index), left in sh.wf[0] / sh.wi[0] for thread 0 (callers sync
// before others read it).
__device__ void block_best(SelectShared& sh, float s, int i) {
  for (int o = 16; o > 0; o >>= 1) {
    const float s2 = __shfl_xor_sync(~0u, s, o);
    const int i2 = __shfl_xor_sync(~0u, i, o);
    if (better(s2, i2, s, i)) s = s2, i = i2;
  }
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

__device__ int cluster_argmax(const cg::cluster_group& cl, SelectShared& sh, int& phase, float s, int i) {
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

// Histograms the elements i < n for which visit(i, digit, mass) is true, and leaves the
// cluster's totals in sh.bin_cnt (and sh.bin_mass) for every thread.
template <bool kMass, class Visit>
__device__ void cluster_histogram(const cg::cluster_group& cl, SelectShared& sh, int& phase, int n, Visit visit) {
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
  // A 64-bit shared atomic add is a CAS loop. While a warp's sums fit, masses go into its slot as
  // two 32-bit halves by native atomics: q = hi * 2^19 + lo with both halves <= 2^19, and a warp
  // adds at most n / 8 + 32 tokens to a bin, so each half's sum stays below 2^32 for n <= 2^15.
  const bool split = n <= (1 << 15);
  for (int i = threadIdx.x; i < n; i += kThreads) {
    uint32_t d;
    unsigned long long q = 0;
    if (visit(i, d, q)) {
      atomicAdd(&sh.cnt[b][d], 1u);
      if (kMass && q) {  // tail tokens weigh 0
        if (split) {
          unsigned* half = reinterpret_cast<unsigned*>(&sh.warp_mass[warp][d]);
          atomicAdd(half, static_cast<unsigned>(q & ((1u << kMassSplit) - 1)));
          atomicAdd(half + 1, static_cast<unsigned>(q >> kMassSplit));
        } else {
          atomicAdd(&sh.warp_mass[warp][d], q);
        }
      }
    }
  }
  if (kMass) {
    __syncthreads();
    for (int i = threadIdx.x; i < kBins; i += kThreads) {
      unsigned long long m = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const unsigned long long v = sh.warp_mass[w][i];
        m += split ? (v & 0xffffffffull) + ((v >> 32) << kMassSplit) : v;
      }
      sh.mass[b][i] = m;
    }
  }
  cl.sync();
  const unsigned peers = cl.num_blocks();
  for (int bin = threadIdx.x; bin < kBins; bin += kThreads) {
    // All peers' loads issued before any is summed: one DSMEM round trip, not one per peer.
    uint32_t c[kMaxCluster];
    unsigned long long m[kMaxCluster];
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r) {
      c[r] = r < peers ? *cl.map_shared_rank(&sh.cnt[b][bin], r) : 0u;
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
template <bool kMass>
__device__ void find_crossing(SelectShared& sh, unsigned long long target, double p) {
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

// Radix select over the 32-bit keys that key_of(i, &key) yields (false: not a candidate) for the
// `needed`-th largest; the key bits above `top_shift + 8` are already fixed by the caller's
// predicate. Returns the threshold: every candidate key >= it is among the `needed` largest plus
// ties with the last. *remaining gets how many of the threshold's ties are needed (exact when
// the select ran to the last bit), *exact whether it did. With cap > 0 it stops as soon as the
// candidates at or above the chosen bin number at most cap: *fits is set and the return value is
// the least key of that set (every candidate key >= it is in), for the caller to gather and sort.
template <class KeyOf>
__device__ uint32_t count_select(const cg::cluster_group& cl, SelectShared& sh, int& phase, int n,
                                 unsigned long long needed, int top_shift, KeyOf key_of,
                                 unsigned long long* remaining, bool* exact, unsigned long long cap = 0,
                                 bool* fits = nullptr) {
  const unsigned long long total = needed;
  uint32_t prefix = 0, pmask = 0;
  *exact = false;
  if (fits) *fits = false;
  for (int shift = top_shift; shift >= 0; shift -= 8) {
    cluster_histogram<false>(cl, sh, phase, n, [&](int i, uint32_t& d, unsigned long long&) {
      uint32_t key;
      if (!key_of(i, key) || (key & pmask) != prefix) return false;
      d = (key >> shift) & 0xffu;
      return true;
    });
    find_crossing<false>(sh, needed, -1.0);
    if (total - needed + sh.dec_above + sh.dec_n <= cap) {
      *fits = true;
      *remaining = needed - sh.dec_above;
      return prefix | (sh.dec_bin << shift);
    }
    needed -= sh.dec_above;
    prefix |= sh.dec_bin << shift;
    pmask |= 0xffu << shift;
    if (sh.dec_n == needed) break;  // the whole bin is in
    *exact = shift == 0;
  }
  *remaining = needed;
  return prefix;
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
__device__ __forceinline__ unsigned long long mass_of(float s) {
  return __float2ull_rn(__expf(s) * static_cast<float>(kMassScale));
}

__device__ __forceinline__ float gumbel_score(float s, uint32_t word) { return s - __logf(-__logf(open_uniform(word))); }

// Token idx's own random word (its group's Philox call picks one of four; selects, not an
// indexed local array).
__device__ __forceinline__ uint32_t token_word(int idx, const RowParams& q) {
  const Philox4 r = token_words(static_cast<uint32_t>(idx) >> 2, q.row_in_key, q.key0, q.key1);
  return idx & 2 ? (idx & 1 ? r.v[3] : r.v[2]) : (idx & 1 ? r.v[1] : r.v[0]);
}

__device__ __forceinline__ uint32_t value_bin(float s) {
  return kBins - 1 - static_cast<uint32_t>(fminf(-8.0f * s, static_cast<float>(kBins - 1)));
}

__device__ __forceinline__ bool keeps(const Threshold& t, uint32_t bin, uint32_t key) {
  return bin > t.bin || (bin == t.bin && key >= t.key);
}

// Top-k (kMass false: the `needed` largest, ties kept) or top-p (kMass: the mass rule of
// jaxnorm.sampling with fraction p) among the tokens with in_set(v, bin, key): value bins first,
// then the keys within the chosen bin 8 bits at a time.
template <bool kMass, class Token, class InSet>
__device__ Threshold select_threshold(const cg::cluster_group& cl, SelectShared& sh, int& phase, int n,
                                      unsigned long long needed, double p, Token token, InSet in_set) {
  Threshold t;
  uint32_t prefix = 0, pmask = 0;
  for (int shift = 32; shift >= 0; shift -= 8) {
    const bool first = shift == 32;
    cluster_histogram<kMass>(cl, sh, phase, n, [&](int i, uint32_t& d, unsigned long long& q) {
      float s;
      uint32_t bin, key;
      token(i, s, bin, key);
      if (!in_set(bin, key)) return false;
      if (first) {
        d = bin;
      } else {
        if (bin != t.bin || (key & pmask) != prefix) return false;
        d = (key >> shift) & 0xffu;
      }
      if (kMass) q = mass_of(s);
      return true;
    });
    find_crossing<kMass>(sh, needed, kMass && first ? p : -1.0);
    needed = (kMass ? sh.target : needed) - sh.dec_above;
    if (first) {
      t.bin = sh.dec_bin;
    } else {
      prefix |= sh.dec_bin << shift;
      pmask |= 0xffu << shift;
    }
    t.key = prefix;
    if (sh.dec_n == (kMass ? 1 : needed)) break;  // the whole bin is in
  }
  return t;
}

// Block-wide sum and exclusive scan (in thread order) of one 64-bit value a thread.
__device__ unsigned long long block_sum(SelectShared& sh, unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
  __syncthreads();  // an earlier reader of sh.wsum is done
  if (threadIdx.x % 32 == 0) sh.wsum[threadIdx.x / 32] = v;
  __syncthreads();
  unsigned long long t = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t += sh.wsum[w];
  return t;
}

__device__ unsigned long long block_exclusive_scan(SelectShared& sh, unsigned long long v) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  unsigned long long incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long t = __shfl_up_sync(~0u, incl, o);
    if (lane >= o) incl += t;
  }
  __syncthreads();
  if (lane == 31) sh.wsum[warp] = incl;
  __syncthreads();
  unsigned long long base = 0;
  for (int w = 0; w < warp; ++w) base += sh.wsum[w];
  return base + incl - v;
}

__device__ int block_max(SelectShared& sh, int v) {
  v = __reduce_max_sync(~0u, v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh.wmax[threadIdx.x / 32] = v;
  __syncthreads();
  int t = sh.wmax[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) t = max(t, sh.wmax[w]);
  return t;
}

// Bitonic sort (descending) of cand[0, kp) by one CTA, kp a power of two: log2(kp)^2 / 2 barrier
// steps instead of a kp^2 rank count.
__device__ void bitonic_sort_desc(unsigned long long* cand, int kp) {
  for (int size = 2; size <= kp; size <<= 1) {
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int t = threadIdx.x; t < kp / 2; t += kThreads) {
        const int i = 2 * t - (t & (stride - 1));
        const int j = i + stride;
        const bool desc = (i & size) == 0;
        const unsigned long long x = cand[i], y = cand[j];
        if ((x < y) == desc) cand[i] = y, cand[j] = x;
      }
      __syncthreads();
    }
  }
}

// Appends the composites c of this CTA's tokens i < n with pick(i, c) to CTA 0's buffer `cand`
// (the first `cap`; in no particular order, callers sort). A warp takes its slots by one atomic.
template <class Pick>
__device__ void gather_to_rank0(const cg::cluster_group& cl, SelectShared& sh, unsigned long long* cand, int n,
                                unsigned cap, Pick pick) {
  unsigned* ncand = cl.map_shared_rank(&sh.ncand, 0);
  unsigned long long* cand0 = cl.map_shared_rank(cand, 0);
  const int lane = threadIdx.x % 32;
  for (int base = 0; base < n; base += kThreads) {
    const int i = base + threadIdx.x;
    unsigned long long c = 0;
    const bool sel = i < n && pick(i, c);
    const unsigned ball = __ballot_sync(~0u, sel);
    if (ball == 0) continue;
    unsigned slot0 = 0;
    if (lane == __ffs(ball) - 1) slot0 = atomicAdd(ncand, __popc(ball));
    slot0 = __shfl_sync(~0u, slot0, __ffs(ball) - 1);
    const unsigned slot = slot0 + __popc(ball & ((1u << lane) - 1));
    if (sel && slot < cap) cand0[slot] = c;
  }
}

// A candidate's composite: its key above, (last - index) below, so a descending sort orders by
// value, then by index.
__device__ __forceinline__ unsigned long long composite(uint32_t key, uint32_t last, int64_t index) {
  return (static_cast<unsigned long long>(key) << 32) | (last - static_cast<uint32_t>(index));
}

__device__ __forceinline__ float key_value(uint32_t key) { return __uint_as_float(key_bits(key)); }

// What the gather of a row collected in CTA 0 (the same in every CTA of the cluster).
struct Gather {
  bool fits = false;             // else: the radix passes
  bool all = false;              // every token the filters can keep is among the candidates
  int n = 0;                     // candidates
  unsigned long long above = 0;  // mass of the larger tokens not gathered (top-p alone)
  unsigned long long target = 0; // top-p's target over the whole row (top-p alone)
};

// The gather: one histogram pass over value bins, the boundary bin found as the radix path's
// first pass finds it, then the tokens at or above it (top-k, or top-p alone when they fit) or
// in it (top-p alone otherwise) appended to CTA 0's buffer. With top-k the histogram counts
// only: CTA 0 weighs the gathered top-k set itself. With kDraw, when only the bin is gathered,
// the same pass draws among the tokens above it (all kept) and publishes this CTA's best.
template <bool kDraw, class Token>
__device__ Gather gather_candidates(const cg::cluster_group& cl, SelectShared& sh, int& phase, int n, int64_t c0,
                                    uint32_t last, unsigned long long* cand, int64_t cap, const RowParams& q,
                                    Token token) {
  Gather g;
  const bool weigh = q.use_p && !q.use_k;
  auto visit = [&](int i, uint32_t& d, unsigned long long& w) {
    float s;
    uint32_t key;
    token(i, s, d, key);
    if (weigh) w = mass_of(s);
    return true;
  };
  if (weigh) {
    cluster_histogram<true>(cl, sh, phase, n, visit);
    find_crossing<true>(sh, 0, q.p);
  } else {
    cluster_histogram<false>(cl, sh, phase, n, visit);
    find_crossing<false>(sh, q.k, -1.0);
  }
  const uint32_t bin = sh.dec_bin;
  const unsigned long long in_bin = sh.dec_n, above = sh.dec_above, target = sh.target;
  if (threadIdx.x < 32) {  // tokens at or above the bin
    unsigned long long c = 0;
    for (int b = bin + threadIdx.x; b < kBins; b += 32) c += sh.bin_cnt[b];
    for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(~0u, c, o);
    if (threadIdx.x == 0) sh.gather_n = c;
  }
  __syncthreads();
  const unsigned long long at_or_above = sh.gather_n;
  g.all = q.use_k || at_or_above <= static_cast<unsigned long long>(cap);
  const unsigned long long count = g.all ? at_or_above : in_bin;
  g.fits = count <= static_cast<unsigned long long>(cap) && (!q.use_k || static_cast<unsigned long long>(q.k) <= count);
  if (!g.fits) return g;
  g.n = static_cast<int>(count);
  if (weigh) {
    g.target = target;
    g.above = g.all ? 0 : above;
  }
  if (g.all || !kDraw) {
    const bool all = g.all;
    gather_to_rank0(cl, sh, cand, n, kCand, [&](int i, unsigned long long& c) {
      float s;
      uint32_t b, key;
      token(i, s, b, key);
      if (all ? b < bin : b != bin) return false;
      c = composite(key, last, c0 + i);
      return true;
    });
  } else {
    // Its own loop: the draw's code in the gather above cost top-k 5-10% (measured at 3a61960).
    float best = -INFINITY;
    int best_i = 0x7fffffff;
    gather_to_rank0(cl, sh, cand, n, kCand, [&](int i, unsigned long long& c) {
      float s;
      uint32_t b, key;
      token(i, s, b, key);
      if (b > bin && s >= q.log_min_p) {
        const int idx = static_cast<int>(c0) + i;
        const float score = gumbel_score(s, token_word(idx, q));
        if (better(score, idx, best, best_i)) best = score, best_i = idx;
      }
      if (b != bin) return false;
      c = composite(key, last, c0 + i);
      return true;
    });
    block_best(sh, best, best_i);
    if (threadIdx.x == 0) sh.above_s = sh.wf[0], sh.above_i = sh.wi[0];
  }
  cl.sync();
  return g;
}

// CTA 0, after a gather that fits: sorts the candidates and resolves top-k, top-p within it and
// min-p as the radix path would (the k-th largest key; the last value whose strictly larger mass,
// in the same fixed point, is below the target); publishes the thresholds in sh.pub. With kDraw
// returns the token: the Gumbel-max over the kept candidates, with the noise the full pass would
// give each of them, and (when only the boundary bin was gathered) over the peers' draws above it.
template <bool kDraw>
__device__ int resolve_candidates(const cg::cluster_group& cl, SelectShared& sh, unsigned long long* cand,
                                  const Gather& g, float m, const RowParams& q, uint32_t last) {
  constexpr int J = kCand / kThreads;
  int kp = 2;
  while (kp < g.n) kp <<= 1;
  for (int i = g.n + threadIdx.x; i < kp; i += kThreads) cand[i] = 0;
  __syncthreads();
  bitonic_sort_desc(cand, kp);
  const uint32_t kkey = q.use_k ? static_cast<uint32_t>(cand[q.k - 1] >> 32) : 0u;
  // Candidate J * thread + j, recomputed in each step rather than held across the block
  // reductions (registers): its key, s, and whether it is in the top-k set.
  auto at = [&](int j, uint32_t& key, float& s) {
    const int i = J * threadIdx.x + j;
    key = i < g.n ? static_cast<uint32_t>(cand[i] >> 32) : 0u;
    s = (key_value(key) - m) * q.inv_t;
    return i < g.n && key >= kkey;
  };
  uint32_t pkey = 0;
  if (q.use_p) {
    unsigned long long local = 0;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      uint32_t key;
      float s;
      if (at(j, key, s)) local += mass_of(s);
    }
    const unsigned long long target = q.use_k ? top_p_target(q.p, block_sum(sh, local)) : g.target;
    unsigned long long excl = g.above + block_exclusive_scan(sh, local);
    int cut = -1;  // the last candidate that starts a value whose larger mass is below the target
    uint32_t prev = J * threadIdx.x > 0 && J * threadIdx.x < g.n ? static_cast<uint32_t>(cand[J * threadIdx.x - 1] >> 32) : 0u;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int i = J * threadIdx.x + j;
      uint32_t key;
      float s;
      if (!at(j, key, s)) break;
      if ((i == 0 || key != prev) && excl < target) cut = i;
      excl += mass_of(s);
      prev = key;
    }
    cut = max(block_max(sh, cut), 0);  // the first candidate always qualifies
    pkey = static_cast<uint32_t>(cand[cut] >> 32);
  }
  if (threadIdx.x == 0) {
    sh.pub[0] = q.use_k ? value_bin((key_value(kkey) - m) * q.inv_t) : 0u;
    sh.pub[1] = kkey;
    sh.pub[2] = q.use_p ? value_bin((key_value(pkey) - m) * q.inv_t) : 0u;
    sh.pub[3] = pkey;
  }
  int token = -1;
  if constexpr (kDraw) {
    float best = -INFINITY;
    int best_i = 0x7fffffff;
    if (!g.all && threadIdx.x < cl.num_blocks()) {
      best = *cl.map_shared_rank(&sh.above_s, threadIdx.x);
      best_i = *cl.map_shared_rank(&sh.above_i, threadIdx.x);
    }
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int i = J * threadIdx.x + j;
      uint32_t key;
      float s;
      if (!at(j, key, s) || key < pkey || !(s >= q.log_min_p)) continue;
      const int idx = static_cast<int>(last - static_cast<uint32_t>(cand[i]));
      const float score = gumbel_score(s, token_word(idx, q));
      if (better(score, idx, best, best_i)) best = score, best_i = idx;
    }
    block_best(sh, best, best_i);
    token = sh.wi[0];  // thread 0's
  }
  __syncthreads();  // every read of cand is done before the next row's gather
  if (threadIdx.x == 0) sh.ncand = 0;
  return token;
}

// Whether the shared-memory copy holds logits + bias (float32 rows) rather than the logits.
template <class T, bool kBias>
constexpr bool kHoldsSums = kBias && sizeof(T) == sizeof(float);

// The samplers ask for 3 CTAs an SM (<= 80 registers, no spills with nvcc 13; what the shared
// memory of a 32 KB chunk allows): without it ptxas gave the sampler 92 registers once the
// finished-row test was in, 2 CTAs an SM. The filters and top_k keep ptxas's choice (at 80 the
// filter with a bias spills).
template <class T, int kMode, bool kBias = false>
__global__ void __launch_bounds__(kThreads, kMode == kSample ? 3 : 0) select_rows(const SelectArgs<T> a) {
  static_assert(!kBias || kMode != kTopK, "top_k takes no bias");
  using S = T;
  constexpr bool kSums = kHoldsSums<T, kBias>;
  extern __shared__ __align__(16) unsigned char dyn[];
  __shared__ SelectShared sh;
  const cg::cluster_group cl = cg::this_cluster();
  const int rank = static_cast<int>(cl.block_rank());
  const int64_t c0 = min(a.cols, rank * a.chunk);
  const int n = static_cast<int>(min(a.cols, c0 + a.chunk) - c0);
  S* smem_chunk = reinterpret_cast<S*>(dyn);
  unsigned long long* cand = reinterpret_cast<unsigned long long*>(dyn + a.cand_offset);
  if (threadIdx.x == 0) sh.ncand = 0;
  int phase = 0;
  const float* gbias = kBias ? a.bias + c0 : nullptr;

  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    if constexpr (kMode == kSample) {
      // The same decision in every CTA of the cluster (a per-row value), so none waits at a
      // cluster barrier the others skip.
      int32_t forced;
      if (forced_token(r, a.rows, a.finished, a.n_fin, a.end_id, a.n_end, &forced)) {
        if (rank == 0 && threadIdx.x == 0) static_cast<int32_t*>(a.out)[r] = forced;
        continue;
      }
    }
    const T* grow = a.x + r * a.cols + c0;
    // What the passes read: the held chunk, or (not resident) the row in global memory.
    const S* src = a.resident ? smem_chunk : grow;
    // Whether src lacks the bias (logit() adds it).
    const bool add_bias = kBias && !(kSums && a.resident);
    // Element i of this CTA's chunk as the sampler sees it (the bias added).
    auto logit = [&](int i) -> float { return add_bias ? to_float(src[i]) + gbias[i] : to_float(src[i]); };
    float lmax = -INFINITY;
    if (a.resident) {
      constexpr int N = kVecOf<T>;
      int i0 = 0;
      if (a.vec) {
        // U packs a thread in flight before any is stored (the copy is the row's DRAM read): the
        // most that stay within the 80 registers of 3 CTAs an SM without spilling (ptxas, nvcc 13).
        constexpr int U = kBias || sizeof(T) == 2 ? 2 : 4;
        const int npk = n / N;
        for (int base = threadIdx.x; base < npk; base += U * kThreads) {
          Pack<T, N> v[U];
#pragma unroll
          for (int u = 0; u < U; ++u) {
            if (base + u * kThreads < npk) v[u] = load_raw_nc<T, N>(grow + (base + u * kThreads) * N);
          }
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int pk = base + u * kThreads;
            if (pk >= npk) break;
            if constexpr (kBias) {
              float b[N];
              load_pack<float, N>(gbias + pk * N, b);
              Pack<T, N> held = v[u];
#pragma unroll
              for (int j = 0; j < N; ++j) {
                const float sum = to_float(v[u].v[j]) + b[j];
                if constexpr (kSums) held.v[j] = sum;
                lmax = fmaxf(lmax, sampling_value(sum, false));
              }
              *reinterpret_cast<Pack<T, N>*>(smem_chunk + pk * N) = held;
            } else {
              *reinterpret_cast<Pack<T, N>*>(smem_chunk + pk * N) = v[u];
#pragma unroll
              for (int j = 0; j < N; ++j) lmax = fmaxf(lmax, sampling_value(to_float(v[u].v[j]), false));
            }
          }
        }
        i0 = n / N * N;
      }
      for (int i = i0 + threadIdx.x; i < n; i += kThreads) {
        const T v = grow[i];
        if constexpr (kBias) {
          const float sum = to_float(v) + gbias[i];
          smem_chunk[i] = kSums ? from_float<T>(sum) : v;
          lmax = fmaxf(lmax, sampling_value(sum, false));
        } else {
          smem_chunk[i] = v;
          lmax = fmaxf(lmax, sampling_value(to_float(v), false));
        }
      }
    } else if (kMode != kTopK) {
      for (int i = threadIdx.x; i < n; i += kThreads) lmax = fmaxf(lmax, sampling_value(logit(i), false));
    }
    __syncthreads();

    if constexpr (kMode == kTopK) {
      const uint32_t last = static_cast<uint32_t>(a.cols - 1);
      auto value_key = [&](int i, uint32_t& key) {
        key = order_key(__float_as_uint(to_float(src[i])));
        return true;
      };
      unsigned long long remaining;
      bool exact;
      bool all = false;  // every key >= tv gathered (at most gather_cap), not just the k winners
      const uint32_t tv = count_select(cl, sh, phase, n, a.k, 24, value_key, &remaining, &exact,
                                       static_cast<unsigned long long>(a.gather_cap), &all);
      uint32_t ti = 0;  // among ties with tv, the index keys (last - index) >= ti are in
      if (!all && exact && remaining < sh.dec_n) {
        const int bits = 32 - __clz(last);
        bool exact_i;
        ti = count_select(cl, sh, phase, n, remaining, (bits - 1) / 8 * 8,
                          [&](int i, uint32_t& key) {
                            key = last - static_cast<uint32_t>(c0 + i);
                            return order_key(__float_as_uint(to_float(src[i]))) == tv;
                          },
                          &remaining, &exact_i);
      }
      // The k winners (or every key >= tv) into CTA 0, sorted there.
      const unsigned cap = all ? static_cast<unsigned>(a.gather_cap) : static_cast<unsigned>(a.k);
      gather_to_rank0(cl, sh, cand, n, cap, [&](int i, unsigned long long& c) {
        const uint32_t key = order_key(__float_as_uint(to_float(src[i])));
        const uint32_t ikey = last - static_cast<uint32_t>(c0 + i);
        c = composite(key, last, c0 + i);
        return all ? key >= tv : key > tv || (key == tv && ikey >= ti);
      });
      cl.sync();
      if (rank == 0) {
        const int got = static_cast<int>(min(sh.ncand, cap));
        int kp = 1;
        while (kp < got) kp <<= 1;
        for (int i = got + threadIdx.x; i < kp; i += kThreads) cand[i] = 0;
        __syncthreads();
        bitonic_sort_desc(cand, kp);
        // A key of 0 (-NaN at the last column) ties with the padding; it can only be the k-th.
        int32_t* out = static_cast<int32_t*>(a.out) + r * a.k;
        for (int i = threadIdx.x; i < a.k; i += kThreads) out[i] = static_cast<int32_t>(last - static_cast<uint32_t>(cand[i]));
        __syncthreads();
        if (threadIdx.x == 0) sh.ncand = 0;
      }
    } else {
      float m = cluster_max(cl, sh, phase, lmax);
      const bool inf_row = m == INFINITY;
      if (inf_row) m = 0.0f;
      auto value_of = [&](int i) { return sampling_value(logit(i), inf_row); };
      const RowParams q = row_params(r, a.rows, a.cols, a.temps, a.n_temps, a.top_k, a.n_k, a.top_p, a.n_p,
                                     a.log_min_p, a.n_m, a.keys, a.n_keys, a.key_width);
      // s, value bin and key of a token whose logit (the bias added) is x, and of token i
      auto token_x = [&](float x, float& s, uint32_t& bin, uint32_t& key) {
        const float v = sampling_value(x, inf_row);
        s = (v - m) * q.inv_t;
        bin = value_bin(s);
        key = order_key(__float_as_uint(v));
      };
      auto token = [&](int i, float& s, uint32_t& bin, uint32_t& key) { token_x(logit(i), s, bin, key); };
      Threshold tk, tp;
      bool drawn = false;  // CTA 0 drew the row's token from its candidates
      Gather g;
      if (m != -INFINITY && !q.greedy && (q.use_k || q.use_p)) {
        g = gather_candidates<kMode == kSample>(cl, sh, phase, n, c0, static_cast<uint32_t>(a.cols - 1), cand,
                                                a.gather_cap, q, token);
      }
      if (g.fits) {
        constexpr bool kDraw = kMode == kSample;
        drawn = kDraw;
        if (rank == 0) {
          const int t = resolve_candidates<kDraw>(cl, sh, cand, g, m, q, static_cast<uint32_t>(a.cols - 1));
          if (drawn && threadIdx.x == 0) static_cast<int32_t*>(a.out)[r] = t;
        }
        if (!drawn) {
          cl.sync();
          const uint32_t* pub = cl.map_shared_rank(sh.pub, 0);
          tk.bin = pub[0], tk.key = pub[1], tp.bin = pub[2], tp.key = pub[3];
        }
      } else if (m != -INFINITY && !q.greedy) {
        if (q.use_k) {
          tk = select_threshold<false>(cl, sh, phase, n, q.k, -1.0, token, [](uint32_t, uint32_t) { return true; });
        }
        if (q.use_p) {
          tp = select_threshold<true>(cl, sh, phase, n, 0, q.p, token,
                                      [&](uint32_t bin, uint32_t key) { return keeps(tk, bin, key); });
        }
      }
      auto kept_x = [&](float x, float& s) {
        uint32_t bin, key;
        token_x(x, s, bin, key);
        return m != -INFINITY && keeps(tk, bin, key) && keeps(tp, bin, key) && s >= q.log_min_p;
      };
      auto kept_token = [&](int i, float& s) { return kept_x(logit(i), s); };
      if (drawn) {
        // nothing left: the peers go on to their next row
      } else if constexpr (kMode == kFilter) {
        T* out = static_cast<T*>(a.out) + r * a.cols + c0;
        const T neg_inf = from_float<T>(-INFINITY);
        for (int i = threadIdx.x; i < n; i += kThreads) {
          float s;
          const bool keep = kept_token(i, s) && s != -INFINITY;  // NaN out as -inf
          if constexpr (kBias) {
            out[i] = keep ? from_float<T>(logit(i)) : neg_inf;
          } else {
            out[i] = keep ? src[i] : neg_inf;
          }
        }
      } else {
        float best = -INFINITY;
        int best_i = 0x7fffffff;
        if (m != -INFINITY && q.greedy) {
          for (int i = threadIdx.x; i < n; i += kThreads) {
            const float v = value_of(i);
            if (better(v, static_cast<int>(c0) + i, best, best_i)) best = v, best_i = static_cast<int>(c0) + i;
          }
        } else if (m != -INFINITY) {
          // Tokens in groups of four share one Philox call (the chunk starts at a multiple of 4).
          for (int g = threadIdx.x; 4 * g < n; g += kThreads) {
            float x[4], s[4];
            bool keep[4], any = false;
            if (a.resident && 4 * g + 4 <= n) {
              // One 4-token load: four scalar loads 16 bytes apart would be 4-way bank conflicts.
              const Pack<S, 4> pk = *reinterpret_cast<const Pack<S, 4>*>(smem_chunk + 4 * g);
              float b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
              if (add_bias) load_pack<float, 4>(gbias + 4 * g, b);
#pragma unroll
              for (int j = 0; j < 4; ++j) x[j] = to_float(pk.v[j]) + b[j];
            } else {
#pragma unroll
              for (int j = 0; j < 4; ++j) x[j] = 4 * g + j < n ? logit(4 * g + j) : -INFINITY;
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              keep[j] = 4 * g + j < n && kept_x(x[j], s[j]);
              any |= keep[j];
            }
            if (!any) continue;
            const Philox4 w = token_words(static_cast<uint32_t>((c0 >> 2) + g), q.row_in_key, q.key0, q.key1);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const float score = gumbel_score(s[j], w.v[j]);
              const int idx = static_cast<int>(c0) + 4 * g + j;
              if (keep[j] && better(score, idx, best, best_i)) best = score, best_i = idx;
            }
          }
        }
        const int token = cluster_argmax(cl, sh, phase, best, best_i);
        if (rank == 0 && threadIdx.x == 0) {
          static_cast<int32_t*>(a.out)[r] = m == -INFINITY || token == 0x7fffffff ? -1 : token;
        }
      }
    }
    __syncthreads();  // the next row's copy overwrites the chunk
  }
  cl.sync();  // no CTA leaves while a peer may still read its shared memory
}

}  // namespace sampling
}  // namespace jaxnorm

// Thresholds by one gather: the tokens at or above a histogram's boundary bin collected in CTA
// 0, sorted and resolved there (and the token drawn), with the block reductions it needs.
#pragma once

#include "cuda/sampling/select_common.cuh"

namespace jaxnorm {
namespace sampling {

// Warp- and block-wide sums and exclusive scans (in thread order) of one 64-bit value a thread.
__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
  return v;
}

__device__ __forceinline__ unsigned long long warp_inclusive_scan(unsigned long long v) {
  const int lane = threadIdx.x % 32;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long t = __shfl_up_sync(~0u, v, o);
    if (lane >= o) v += t;
  }
  return v;
}

template <int kThreads>
__device__ unsigned long long block_sum(SelectShared<kThreads>& sh, unsigned long long v) {
  constexpr int kWarps = kThreads / 32;
  v = warp_sum(v);
  __syncthreads();  // an earlier reader of sh.wsum is done
  if (threadIdx.x % 32 == 0) sh.wsum[threadIdx.x / 32] = v;
  __syncthreads();
  unsigned long long t = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t += sh.wsum[w];
  return t;
}

template <int kThreads>
__device__ unsigned long long block_exclusive_scan(SelectShared<kThreads>& sh, unsigned long long v) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned long long incl = warp_inclusive_scan(v);
  __syncthreads();
  if (lane == 31) sh.wsum[warp] = incl;
  __syncthreads();
  unsigned long long base = 0;
  for (int w = 0; w < warp; ++w) base += sh.wsum[w];
  return base + incl - v;
}

template <int kThreads>
__device__ int block_max(SelectShared<kThreads>& sh, int v) {
  constexpr int kWarps = kThreads / 32;
  v = __reduce_max_sync(~0u, v);
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh.wmax[threadIdx.x / 32] = v;
  __syncthreads();
  int t = sh.wmax[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) t = max(t, sh.wmax[w]);
  return t;
}

// Bitonic sort (descending) of cand[0, kp) by one CTA, kp a power of two. Each warp sorts
// segments of kSortSeg entries in registers (strides below 32 by shuffles, the larger ones
// within a lane), so only strides of a segment or more take a shared-memory step: for kp = 1024,
// 15 barriers instead of 55 (measured at 449b1f6: `top_k` 10% faster at batch 1, 1-5% at 64).
// Two entries a lane: at four, ptxas spilled in the top_k kernels of 256 threads.
constexpr int kSortLane = 2;               // entries a lane holds
constexpr int kSortSeg = 32 * kSortLane;  // entries a warp sorts in registers
static_assert(kSortLane == 2, "bitonic_segments' in-lane step takes two entries a lane");

// The bitonic steps of sizes size_lo .. size_hi (powers of two) whose strides are below kSortSeg,
// over each of this warp's segments of cand[0, kp) (entries past kp held as 0, not stored). Not
// inlined: inlined, it pushed the 80-register samplers into spilling in their copy loop.
template <int kThreads>
__device__ __noinline__ void bitonic_segments(unsigned long long* cand, int kp, int size_lo, int size_hi) {
  constexpr int E = kSortLane, kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32;
  for (int base = threadIdx.x / 32 * kSortSeg; base < kp; base += kWarps * kSortSeg) {
    unsigned long long v[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int i = base + 32 * e + lane;
      v[e] = i < kp ? cand[i] : 0ull;
    }
    for (int size = size_lo; size <= size_hi; size <<= 1) {
      // The strides rolled: each row sorts a few times, and its code is fetched afresh each row.
#pragma unroll 1
      for (int s = min(size, kSortSeg) / 2; s > 0; s >>= 1) {
        if (s == 32) {  // within the lane: entries 0 and 1 (kSortLane == 2)
          const bool desc = ((base + lane) & size) == 0;
          const unsigned long long x = v[0], y = v[1];
          if ((x < y) == desc) v[0] = y, v[1] = x;
          continue;
        }
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const bool desc = ((base + 32 * e + lane) & size) == 0;  // the same for both entries of a pair
          const unsigned long long o = __shfl_xor_sync(~0u, v[e], s);
          v[e] = (((lane & s) == 0) == desc) ? max(v[e], o) : min(v[e], o);
        }
      }
    }
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int i = base + 32 * e + lane;
      if (i < kp) cand[i] = v[e];
    }
  }
}

template <int kThreads>
__device__ void bitonic_sort_desc(unsigned long long* cand, int kp) {
  if (kp < 2) return;
  bitonic_segments<kThreads>(cand, kp, 2, min(kp, kSortSeg));
  __syncthreads();
  for (int size = 2 * kSortSeg; size <= kp; size <<= 1) {
    for (int stride = size / 2; stride >= kSortSeg; stride >>= 1) {
      for (int t = threadIdx.x; t < kp / 2; t += kThreads) {
        const int i = 2 * t - (t & (stride - 1));
        const int j = i + stride;
        const bool desc = (i & size) == 0;
        const unsigned long long x = cand[i], y = cand[j];
        if ((x < y) == desc) cand[i] = y, cand[j] = x;
      }
      __syncthreads();
    }
    bitonic_segments<kThreads>(cand, kp, size, size);
    __syncthreads();
  }
}

// Sorts cand[0, n) descending (kp: the bitonic length, cand[n, kp) already 0). Short lists, as a
// row's chain has (the ~50 entries of a chunk, the ~100 candidates of a row), are sorted by
// ranking: each entry's rank is counted by P adjacent lanes (4, or as many as the block has for
// n entries), each over every P-th entry, and summed by shuffles; then stored at that rank. Two
// barriers and a few instructions of code, where the bitonic network takes 21-28 steps and
// kilobytes of code fetched afresh each row. ptxas gives a lane's loads one register, so each
// compare waits out its shared-memory load (unrolling into an array did not change that): with
// one lane an entry, ~100 of them were most of the ~1.8 us CTA 0 sorts a batch-1 row (clock trace
// and SASS, benchmarks/results/h200-stage-x-hist-push); P lanes make n / P each.
constexpr int kRankSortMax = 128;

template <int kThreads>
__device__ void sort_desc(unsigned long long* cand, int n, int kp) {
  static_assert(kThreads >= kRankSortMax, "one entry a lane at least");
  if (n > kRankSortMax) {
    bitonic_sort_desc<kThreads>(cand, kp);
    return;
  }
  const int lg = 4 * n <= kThreads ? 2 : 2 * n <= kThreads ? 1 : 0;  // log2 of P, the lanes an entry
  const int P = 1 << lg;
  const int i = threadIdx.x >> lg, part = threadIdx.x & (P - 1);
  const unsigned long long e = i < n ? cand[i] : 0ull;
  int rank = 0;
  // The entries are distinct (composites: every one holds its token's index), so an entry's rank
  // is the count of larger ones; the tie test (c == e && j < i) never held and cost ~5 of ~10
  // instructions an entry.
  if (i < n) {
    for (int j = part; j < n; j += P) rank += cand[j] > e;
  }
  for (int o = 1; o < P; o <<= 1) rank += __shfl_xor_sync(~0u, rank, o);
  __syncthreads();
  if (i < n && part == 0) cand[rank] = e;
  __syncthreads();
}

// Appends c to CTA 0's buffer `cand0` (the first `cap` entries) for the lanes with sel: the warp
// takes its slots by one atomic. Every lane of the warp calls it.
__device__ __forceinline__ void append_to_rank0(unsigned* ncand, unsigned long long* cand0, unsigned cap, bool sel,
                                                unsigned long long c) {
  const unsigned ball = __ballot_sync(~0u, sel);
  if (ball == 0) return;
  const int lane = threadIdx.x % 32;
  unsigned slot0 = 0;
  if (lane == __ffs(ball) - 1) slot0 = atomicAdd(ncand, __popc(ball));
  slot0 = __shfl_sync(~0u, slot0, __ffs(ball) - 1);
  const unsigned slot = slot0 + __popc(ball & ((1u << lane) - 1));
  if (sel && slot < cap) cand0[slot] = c;
}

// Appends the composites c of this CTA's tokens i < n with pick(i, c) to CTA 0's buffer `cand`
// (the first `cap`; in no particular order, callers sort).
template <int kThreads, class Pick>
__device__ void gather_to_rank0(const cg::cluster_group& cl, SelectShared<kThreads>& sh, unsigned long long* cand, int n,
                                unsigned cap, Pick pick) {
  unsigned* ncand = cl.map_shared_rank(&sh.ncand, 0);
  unsigned long long* cand0 = cl.map_shared_rank(cand, 0);
  for (int base = 0; base < n; base += kThreads) {
    const int i = base + threadIdx.x;
    unsigned long long c = 0;
    const bool sel = i < n && pick(i, c);
    append_to_rank0(ncand, cand0, cap, sel, c);
  }
}

// A candidate's composite: its key above, (last - index) below, so a descending sort orders by
// value, then by index.
__device__ __forceinline__ unsigned long long composite(uint32_t key, uint32_t last, int64_t index) {
  return (static_cast<unsigned long long>(key) << 32) | (last - static_cast<uint32_t>(index));
}

__device__ __forceinline__ float key_value(uint32_t key) { return __uint_as_float(key_bits(key)); }

// A CTA's scratch histogram of kBins counts (warp_mass, free outside a weighed histogram).
template <int kThreads>
__device__ uint32_t* scratch_counts(SelectShared<kThreads>& sh) {
  return reinterpret_cast<uint32_t*>(&sh.warp_mass[0][0]);
}

// The highest bin B of scratch_counts whose count with the bins above reaches k (0 if none),
// for every thread.
template <int kThreads>
__device__ uint32_t count_crossing(SelectShared<kThreads>& sh, int k) {
  const uint32_t* cnt = scratch_counts(sh);
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    uint32_t v[8], sum = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) sum += v[j] = cnt[kBins - 1 - 8 * lane - j];
    uint32_t incl = sum;
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t t = __shfl_up_sync(~0u, incl, o);
      if (lane >= o) incl += t;
    }
    const uint32_t target = static_cast<uint32_t>(k);
    const unsigned cross = __ballot_sync(~0u, incl - sum < target && incl >= target);
    if (lane == 0) sh.floor_bin = 0;
    __syncwarp();
    if (cross && lane == __ffs(cross) - 1) {
      uint32_t a = incl - sum;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        a += v[j];
        if (a >= target) {
          sh.floor_bin = kBins - 1 - 8 * lane - j;
          break;
        }
      }
    }
  }
  __syncthreads();
  return sh.floor_bin;
}

// A lower bound, as a value bin, on the bin of the row's k-th largest token, from this CTA's
// delegates: each thread's largest token (`mine`, its bin; `has`: the thread holds one). If k
// threads have their largest in bins >= B, k distinct tokens of the row are there, so its k-th
// largest is too. 0 (no bound) when k exceeds the CTA's delegates. Each CTA's bound holds for
// the whole row, so the peers need not agree on one. Uses warp_mass (free outside a weighed
// histogram) as the delegates' histogram.
template <int kThreads>
__device__ uint32_t delegate_floor(SelectShared<kThreads>& sh, uint32_t mine, bool has, int k) {
  if (k > kThreads) return 0;
  uint32_t* cnt = scratch_counts(sh);
  for (int i = threadIdx.x; i < kBins; i += kThreads) cnt[i] = 0;
  __syncthreads();
  if (has) atomicAdd(&cnt[mine], 1u);
  __syncthreads();
  return count_crossing(sh, k);
}

// Tokens whose s lies below this are in value bins below `bin` (value_bin: s < -(257 - bin) / 8
// gives -8s > 257 - bin, a bin of at most bin - 2, or bin 0 where -8s passes 255), so a pass
// that wants bins >= bin can skip them on s alone. -inf (skip nothing) for bin 0.
__device__ __forceinline__ float s_below_bin(uint32_t bin) {
  return bin == 0 ? -INFINITY : -static_cast<float>(kBins + 1 - bin) * 0.125f;
}

// Top-p's first pass (draw_top_p's, and the gather's without top-k): the cluster's masses by value
// bin, and top-p's crossing bin in them (sh.dec_bin, dec_above, target; with kCounts the counts
// and dec_n too). token4(g, ...) as in gather_candidates.
template <bool kCounts, int kThreads, class Token4>
__device__ void weigh_value_bins(const cg::cluster_group& cl, SelectShared<kThreads>& sh, int& phase, int n,
                                 const RowParams& q, Token4 token4) {
  cluster_histogram<true, kCounts, true>(cl, sh, phase, n, [&](int g, uint32_t (&d)[4], unsigned long long (&w)[4]) {
    float s[4];
    uint32_t key[4];
    token4(g, s, d, key);
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = mass_of(s[j]);
  });
  find_crossing<true>(sh, 0, q.p);
}

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
// token(i, ...) gives token i's s, value bin and key; token4(g, ...) those of tokens 4g .. 4g + 3
// (a CTA's chunk starts at a multiple of 4). kPush: the histogram's exchange by st.async
// (cluster_histogram), in the kernels that init it.
template <bool kDraw, bool kPush, int kThreads, class Token, class Token4, class SOf>
__device__ Gather gather_candidates(const cg::cluster_group& cl, SelectShared<kThreads>& sh, int& phase, int n, int64_t c0,
                                    uint32_t last, unsigned long long* cand, int64_t cap, const RowParams& q,
                                    uint32_t floor_bin, Token token, Token4 token4, SOf s_of) {
  Gather g;
  const bool weigh = q.use_p && !q.use_k;
  if (weigh) {
    weigh_value_bins<true>(cl, sh, phase, n, q, token4);
  } else {
    // Top-k counts only the bins from floor_bin (delegate_floor) up, where the boundary bin is:
    // the count above it stays exact, and most tokens leave after one subtract, multiply and
    // compare instead of a shared atomic on a crowded bin.
    const float s_floor = s_below_bin(floor_bin);
    cluster_histogram<false, true, false, kPush>(cl, sh, phase, n, [&](int i, uint32_t& d, unsigned long long&) {
      if (s_of(i) < s_floor) return false;
      float s;
      uint32_t key;
      token(i, s, d, key);
      return d >= floor_bin;
    });
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
    const float s_skip = all ? s_below_bin(bin) : -INFINITY;
    gather_to_rank0(cl, sh, cand, n, kCand, [&](int i, unsigned long long& c) {
      if (s_of(i) < s_skip) return false;
      float s;
      uint32_t b, key;
      token(i, s, b, key);
      if (all ? b < bin : b != bin) return false;
      c = composite(key, last, c0 + i);
      return true;
    });
  } else {
    // Its own loop: the draw's code in the gather above cost top-k 5-10% (measured at 3a61960).
    // Tokens in groups of four, as the draw pass takes them: one Philox call a group.
    unsigned* ncand = cl.map_shared_rank(&sh.ncand, 0);
    unsigned long long* cand0 = cl.map_shared_rank(cand, 0);
    float best = -INFINITY;
    int best_i = 0x7fffffff;
    const int groups = (n + 3) / 4;
    for (int base = 0; base < groups; base += kThreads) {
      const int grp = base + threadIdx.x;
      float s[4];
      uint32_t b[4], key[4];
      token4(grp, s, b, key);
      bool above[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) above[j] = grp < groups && 4 * grp + j < n && b[j] > bin && s[j] >= q.log_min_p;
      draw4(c0, grp, s, above, q, best, best_i);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const bool sel = grp < groups && 4 * grp + j < n && b[j] == bin;
        append_to_rank0(ncand, cand0, kCand, sel, composite(key[j], last, c0 + 4 * grp + j));
      }
    }
    block_best(sh, best, best_i);
    if (threadIdx.x == 0) sh.above_s = sh.wf[0], sh.above_i = sh.wi[0];
  }
  cl.sync();
  return g;
}

// CTA 0, after a gather that fits: sorts the candidates and resolves top-k, top-p within it and
// min-p as the radix path would (the k-th largest key; the last value whose strictly larger mass,
// in the same fixed point, is below the target); publishes the thresholds in sh.pub. With kDraw
// returns the token (to thread 0): the Gumbel-max over the kept candidates, with the noise the
// full pass would give each of them, and over (best, best_i), this thread's share of the peers'
// draws above the gathered bin (read by the caller before the sort, so the peers need not wait
// for it; at most one a CTA of the cluster, so in warp 0).
template <bool kDraw, int kThreads>
__device__ int resolve_candidates(SelectShared<kThreads>& sh, unsigned long long* cand, const Gather& g, float m,
                                  const RowParams& q, uint32_t last, float best, int best_i) {
  constexpr int J = kCand / kThreads;
  int kp = 2;
  while (kp < g.n) kp <<= 1;
  for (int i = g.n + threadIdx.x; i < kp; i += kThreads) cand[i] = 0;
  __syncthreads();
  sort_desc<kThreads>(cand, g.n, kp);
  const uint32_t kkey = q.use_k ? static_cast<uint32_t>(cand[q.k - 1] >> 32) : 0u;
  // When every candidate is in warp 0's share (as are the peers' draws), warp 0 resolves alone:
  // its shuffles give the sums, the scan and the best without a block barrier, the same integers
  // and the same total order as the block's. The choice is the same in every thread.
  const bool one_warp = g.n <= 32 * J;
  int token = -1;
  if (!one_warp || threadIdx.x < 32) {
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
      const unsigned long long target =
          q.use_k ? top_p_target(q.p, one_warp ? warp_sum(local) : block_sum(sh, local)) : g.target;
      unsigned long long excl =
          g.above + (one_warp ? warp_inclusive_scan(local) - local : block_exclusive_scan(sh, local));
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
      cut = max(one_warp ? __reduce_max_sync(~0u, cut) : block_max(sh, cut), 0);  // the first candidate always qualifies
      pkey = static_cast<uint32_t>(cand[cut] >> 32);
    }
    if (threadIdx.x == 0) {
      sh.pub[0] = q.use_k ? value_bin((key_value(kkey) - m) * q.inv_t) : 0u;
      sh.pub[1] = kkey;
      sh.pub[2] = q.use_p ? value_bin((key_value(pkey) - m) * q.inv_t) : 0u;
      sh.pub[3] = pkey;
    }
    if constexpr (kDraw) {
#pragma unroll 1
      for (int j = 0; j < J; ++j) {
        const int i = J * threadIdx.x + j;
        uint32_t key;
        float s;
        if (!at(j, key, s) || key < pkey || !(s >= q.log_min_p)) continue;
        const int idx = static_cast<int>(last - static_cast<uint32_t>(cand[i]));
        const float score = gumbel_score(s, token_word(idx, q));
        if (better(score, idx, best, best_i)) best = score, best_i = idx;
      }
      if (one_warp) {
        warp_best(best, best_i);
        token = best_i;
      } else {
        block_best(sh, best, best_i);
        token = sh.wi[0];  // thread 0's
      }
    }
  }
  __syncthreads();  // every read of cand is done before the next row's gather
  if (threadIdx.x == 0) sh.ncand = 0;
  return token;
}

}  // namespace sampling
}  // namespace jaxnorm

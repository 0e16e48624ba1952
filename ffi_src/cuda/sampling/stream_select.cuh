// Top-k in one read of the row: the sampler's top-k rows (kSample; a logits update's bias is added
// as the chunk streams, in float32, as the general passes add it) and the `top_k` op's rows of
// k <= 1024 (kTopK, on the raw keys of lax.top_k's order). Each CTA streams its chunk from global
// memory once, without a shared-memory copy, and keeps in a list of its own the tokens at or
// above a floor under the chunk's k-th largest: from its threads' largest tokens of the first
// round (delegate_floor: k threads whose largest lie in bins >= B mean k tokens there), or for
// top_k past what those hold, from every token of the first round and raised as the list fills
// (StreamLists::rising). A histogram of the list bounds the chunk's k-th largest key from below
// (theta), and the entries at or above it, about k, are sorted. The row's k-th largest is at
// least every chunk's theta, and at least any key that the chunks' published keys (ranks step,
// 2 step, ... of each sorted list) count k tokens above, so CTA 0 takes from each peer only the
// tokens at or above the best such bound (about k for the whole row, every one of the row's top
// k among them). The sampler resolves top-k, top-p within it, min-p and the Gumbel-max draw as a
// fitting gather does (resolve_candidates): the same thresholds, the same noise, the same token as
// the general passes; top_k merges the peers' sorted prefixes by rank and stores the first k
// indices. A row it cannot take (a list past its capacity, as with thousands of tied tokens or an
// ascending row; a NaN in a top_k row; a sampler's +inf or all -inf row; a pull past CTA 0's
// buffer) goes on to the general passes, which then re-read the row from global memory.
#pragma once

#include "cuda/sampling/gather_select.cuh"

namespace jaxnorm {
namespace sampling {

constexpr int kStreamPacks = 4;  // 16-byte packs a thread has in flight per round
constexpr int kFloorShift = 19;  // the floor's bins: 1/16 binade of the key, a window of 16 binades

// Packs a thread streams a round: a 16-bit pack's bias is 8 floats, so the logits update takes
// half as many and stays within 128 registers.
template <class T, bool kBias>
constexpr int kStreamRoundPacks = kBias && sizeof(T) == 2 ? kStreamPacks / 2 : kStreamPacks;

// The longest chunk of the one-read kernel, in tokens. The floor keeps about k / (threads x the
// tokens a thread sees in the first round) of a chunk (each thread's largest of those is a
// delegate): at k = 50, 256 threads and 16 tokens a round, ~1.2% of 64K tokens, within the list.
template <class T, bool kBias>
constexpr int64_t kStreamChunkMax = int64_t{4096} * kStreamRoundPacks<T, kBias> * kVecOf<T>;

// Asks the L2 for packs [from, to) of a row of 16-byte packs starting at p: bulk prefetches (no
// registers, nothing to wait for) of at most 32 KB each. Called by one thread.
template <class T, int N>
__device__ __forceinline__ void prefetch_packs_l2(const T* p, int from, int to) {
  constexpr int kPiece = (32 << 10) / (N * static_cast<int>(sizeof(T)));
  for (int i = from; i < to; i += kPiece) {
    const uint32_t bytes = static_cast<uint32_t>(min(kPiece, to - i) * N * static_cast<int>(sizeof(T)));
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + static_cast<int64_t>(i) * N), "r"(bytes)
                 : "memory");
  }
}

template <int kThreads>
__device__ uint32_t block_max_key(SelectShared<kThreads>& sh, uint32_t key) {
  // Keys as signed ints with the top bit flipped keep their order.
  return static_cast<uint32_t>(block_max(sh, static_cast<int>(key ^ 0x80000000u))) ^ 0x80000000u;
}

// max.NaN: a NaN among the operands gives NaN (fmaxf drops it), so top_k's running maximum also
// tells whether its chunk holds a NaN, which the float compares of the stream cannot order.
__device__ __forceinline__ float fmax_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// A CTA's lists in shared memory (capacities in entries).
struct StreamLists {
  unsigned long long* local;  // its tokens at or above the floor; then, in CTA 0, top_k's merge
  unsigned long long* comp;   // its entries at or above theta, sorted
  int local_cap, comp_cap;
  // top_k: the first floor from a histogram of the first round's tokens (k past the delegates)
  // and raised, each time the list passes half its capacity, to the list's bound theta, with
  // the list compacted to the entries at or above it: the floor follows the k-th largest key
  // seen so far, so about k ln(chunk / first round) tokens enter the list.
  bool rising;
};

// Row r by the one-read path, or false (every CTA of the cluster alike) when the row must take
// the general passes: kSample its token into *out, kTopK the indices of its q.k largest into
// out[0, q.k). `lmax` gets this thread's largest sampling value either way (the sampler's general
// passes' delegate and maximum). Called by every thread of every CTA.
template <class T, int kThreads, bool kBias, bool kTopK = false>
__device__ __noinline__ bool stream_row(const cg::cluster_group& cl, SelectShared<kThreads>& sh, const T* grow,
                                         const float* gbias, int n, int64_t c0, uint32_t last, const RowParams& q,
                                         const StreamLists ls, unsigned long long* cand, int32_t* out,
                                         bool last_row, float& lmax) {
  static_assert(!(kBias && kTopK), "top_k takes no bias");
  constexpr int N = kVecOf<T>;
  constexpr int U = kStreamRoundPacks<T, kBias>;
  const int npk = n / N;  // the caller takes this path only for rows of whole packs
  const int lane = threadIdx.x % 32;
  const int rank = static_cast<int>(cl.block_rank());
  unsigned long long* const local = ls.local;
  unsigned long long* const comp = ls.comp;
  const uint32_t cap = static_cast<uint32_t>(ls.local_cap);
  const bool rising = kTopK && ls.rising;
  // Tokens compare as floats: for a floor above -inf, x >= f exactly when the key of x's sampling
  // value is >= the floor's key (a NaN compares false, as its -inf would; -0 >= +0 as the keys
  // have it), so a token costs a max and a compare; keys are built for the kept ones only.
  float vmax = -INFINITY;  // fmaxf drops NaN
  float floor_v = -INFINITY;
  bool keep_all = true;  // no floor: k past the delegates, or a bound at or below -inf
  auto set_floor = [&](uint32_t key) {
    keep_all = key <= order_key(__float_as_uint(-INFINITY));
    floor_v = keep_all ? -INFINITY : key_value(key);
  };
  // A bound theta <= the k-th largest key of the list's nl >= k entries: the edge of the bin
  // where a histogram of them (256 bins over their key range) counts k from the top.
  auto list_theta = [&](uint32_t nl) {
    uint32_t hi = 0, lo_inv = 0;
    for (int i = threadIdx.x; i < static_cast<int>(nl); i += kThreads) {
      const uint32_t key = static_cast<uint32_t>(local[i] >> 32);
      hi = max(hi, key), lo_inv = max(lo_inv, ~key);
    }
    hi = block_max_key(sh, hi);
    const uint32_t lo = ~block_max_key(sh, lo_inv);
    int shift = 0;
    while (((hi - lo) >> shift) >= static_cast<uint32_t>(kBins)) ++shift;
    uint32_t* cnt = scratch_counts(sh);
    for (int i = threadIdx.x; i < kBins; i += kThreads) cnt[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < static_cast<int>(nl); i += kThreads) {
      atomicAdd(&cnt[(static_cast<uint32_t>(local[i] >> 32) - lo) >> shift], 1u);
    }
    __syncthreads();
    return lo + (count_crossing(sh, static_cast<int>(q.k)) << shift);
  };
  // The list's entries at or above theta into comp (the first comp_cap); returns their count.
  auto compact = [&](uint32_t nl, uint32_t theta) {
    if (threadIdx.x == 0) sh.ncomp = 0;
    __syncthreads();
    for (int b = 0; b < static_cast<int>(nl); b += kThreads) {
      const int i = b + threadIdx.x;
      const unsigned long long e = i < static_cast<int>(nl) ? local[i] : 0ull;
      const bool sel = i < static_cast<int>(nl) && static_cast<uint32_t>(e >> 32) >= theta;
      append_to_rank0(&sh.ncomp, comp, static_cast<unsigned>(ls.comp_cap), sel, e);
    }
    __syncthreads();
    return sh.ncomp;
  };
  if (threadIdx.x == 0) sh.nlocal = 0;
  for (int base = 0; base < npk; base += U * kThreads) {
    if (rising && base > 0) {
      __syncthreads();  // the last round's entries are in
      const uint32_t nl = sh.nlocal;
      if (nl > cap) break;  // the row goes to the general passes
      if (nl > cap / 2) {
        const uint32_t theta = list_theta(nl);
        const uint32_t kept = compact(nl, theta);
        if (kept > static_cast<uint32_t>(ls.comp_cap)) {
          if (threadIdx.x == 0) sh.nlocal = cap + 1;
          break;
        }
        for (int i = threadIdx.x; i < static_cast<int>(kept); i += kThreads) local[i] = comp[i];
        if (threadIdx.x == 0) sh.nlocal = kept;
        __syncthreads();
        set_floor(theta);
      }
    }
    if (threadIdx.x == 0) {  // the round after next: two rounds in flight beyond the loads
      prefetch_packs_l2<T, N>(grow, min(npk, base + 2 * U * kThreads), min(npk, base + 3 * U * kThreads));
    }
    Pack<T, N> v[U];
    float b[kBias ? U : 1][N];  // the logits update's output bias
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int pk = base + u * kThreads + threadIdx.x;
      if (pk < npk) {
        v[u] = load_raw_nc<T, N>(grow + static_cast<int64_t>(pk) * N);
        if constexpr (kBias) load_pack<float, N>(gbias + static_cast<int64_t>(pk) * N, b[u]);
      }
    }
    auto valid = [&](int u) { return base + u * kThreads + static_cast<int>(threadIdx.x) < npk; };
    // Token j of pack u as the sampler sees it: the logit, plus the bias in float32.
    auto logit = [&](int u, int j) {
      if constexpr (kBias) return to_float(v[u].v[j]) + b[u][j];
      return to_float(v[u].v[j]);
    };
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (!valid(u)) continue;
#pragma unroll
      for (int j = 0; j < N; ++j) vmax = kTopK ? fmax_nan(vmax, logit(u, j)) : fmaxf(vmax, logit(u, j));
    }
    if (base == 0) {
      // The first floor: from the delegates (each thread's largest of the round), or with the
      // rising floor from every token of the round. k tokens in bins >= B put the chunk's k-th
      // largest there.
      const uint32_t kmax = order_key(__float_as_uint(vmax + 0.0f));  // -inf for a thread without tokens
      const uint32_t top = block_max_key(sh, kmax) >> kFloorShift;
      const uint32_t lo = max(top, kBins - 1u) - (kBins - 1u);
      uint32_t bin;
      if (rising) {
        uint32_t* cnt = scratch_counts(sh);
        for (int i = threadIdx.x; i < kBins; i += kThreads) cnt[i] = 0;
        __syncthreads();
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (!valid(u)) continue;
#pragma unroll
          for (int j = 0; j < N; ++j) {
            // A NaN's key may lie past the window's top (top is the +0-folded max); such a row
            // is handed back below, so its count only has to stay in range.
            const uint32_t d = max(order_key(__float_as_uint(logit(u, j))) >> kFloorShift, lo) - lo;
            atomicAdd(&cnt[min(d, kBins - 1u)], 1u);
          }
        }
        __syncthreads();
        bin = count_crossing(sh, static_cast<int>(q.k));
      } else {
        bin = delegate_floor(sh, max(kmax >> kFloorShift, lo) - lo, threadIdx.x < npk, static_cast<int>(q.k));
      }
      if (bin != 0) set_floor((lo + bin) << kFloorShift);
    }
    auto kept = [&](float x) { return keep_all || x >= floor_v; };
    // This thread's tokens at or above the floor, appended in one warp-wide reservation.
    uint32_t cnt = 0;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (!valid(u)) continue;
#pragma unroll
      for (int j = 0; j < N; ++j) cnt += kept(logit(u, j));
    }
    uint32_t incl = cnt;
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t t = __shfl_up_sync(~0u, incl, o);
      if (lane >= o) incl += t;
    }
    if (__shfl_sync(~0u, incl, 31) == 0) continue;
    uint32_t slot = 0;
    if (lane == 31) slot = atomicAdd(&sh.nlocal, incl);
    slot = __shfl_sync(~0u, slot, 31) + incl - cnt;
    if (cnt > 0) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (!valid(u)) continue;
        const int64_t i0 = static_cast<int64_t>(base + u * kThreads + threadIdx.x) * N;
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const float x = logit(u, j);
          if (!kept(x)) continue;
          // top_k's raw key (-0 below +0); the sampler's value (-0 as +0). Kept by the float
          // compare either way: -0 >= +0, so a floor at +0 keeps both.
          const float v = kTopK ? x : sampling_value(x, false);
          if (slot < cap) local[slot] = composite(order_key(__float_as_uint(v)), last, c0 + i0 + j);
          ++slot;
        }
      }
    }
  }
  lmax = vmax + 0.0f;
  // A NaN anywhere in a top_k chunk hands the row back: the whole CTA's verdict (a thread's own
  // would split the barriers below between its threads).
  const bool nan_chunk = __syncthreads_or(kTopK && vmax != vmax) != 0;

  // The chunk's bound theta; only the entries at or above it (about k) are compacted and sorted:
  // the rest can hold no token of the row's top-k.
  const uint32_t nl = sh.nlocal;
  bool over = nl > cap || nan_chunk;
  uint32_t theta = 0, at = 0;
  if (!over) {
    if (nl >= static_cast<uint32_t>(q.k)) theta = list_theta(nl);
    at = compact(nl, theta);
    over = at > static_cast<uint32_t>(ls.comp_cap);
    if (!over) {
      int kp = 2;
      while (kp < static_cast<int>(at)) kp <<= 1;
      for (int i = at + threadIdx.x; i < kp; i += kThreads) comp[i] = 0;
      __syncthreads();
      sort_desc<kThreads>(comp, static_cast<int>(at), kp);
    }
  }
  // Published: the keys of ranks step, 2 step, ... 16 step of the sorted list (a chunk has at
  // least j step tokens at or above its j-th), step = k / 16 rounded up.
  const int step = (static_cast<int>(q.k) + kStreamTop - 1) / kStreamTop;
  if (threadIdx.x == 0) {
    sh.status.kth = theta;
    sh.status.max = at > 0 && !over ? static_cast<uint32_t>(comp[0] >> 32) : 0u;
    sh.status.at = at;
    sh.status.over = over ? 1u : 0u;
  }
  if (threadIdx.x < kStreamTop) {
    const int i = (threadIdx.x + 1) * step - 1;
    sh.status.top[threadIdx.x] = !over && i < static_cast<int>(at) ? static_cast<uint32_t>(comp[i] >> 32) : 0u;
  }
  cl.sync();

  // Every CTA reads every status: the same decision everywhere.
  const int peers = static_cast<int>(cl.num_blocks());
  if (threadIdx.x < 32) {
    StreamStatus s{0u, 0u, 0u, 0u};
    if (lane < peers) {
      const StreamStatus* ps = cl.map_shared_rank(&sh.status, lane);
      s.kth = ps->kth, s.max = ps->max, s.at = ps->at, s.over = ps->over;
    }
    const bool any_over = __any_sync(~0u, s.over != 0);
    const uint32_t t0 = __reduce_max_sync(~0u, s.kth);
    const uint32_t mkey = __reduce_max_sync(~0u, s.max);
    if (lane < peers) sh.peer_at[lane] = s.at, sh.peer_kth[lane] = s.kth;
    if (lane == 0) sh.pull_from = t0, sh.row_max = mkey, sh.stream_ok = !any_over && mkey != 0;
  }
  __syncthreads();
  if (!sh.stream_ok) return false;
  const float m = key_value(sh.row_max);
  if (!kTopK && (m == INFINITY || m == -INFINITY)) return false;  // the sampler's special rows

  if (rank == 0) {
    // A tighter bound than the largest chunk k-th key t0: the largest published key t that
    // counts at least k tokens at or above it, each chunk counting step tokens for each of its
    // published keys >= t, or k when its k-th key is >= t. The pull below then brings k plus
    // at most a step a chunk.
    for (int i = threadIdx.x; i < peers * kStreamTop; i += kThreads) {
      sh.peer_top[i / kStreamTop][i % kStreamTop] = cl.map_shared_rank(&sh.status, i / kStreamTop)->top[i % kStreamTop];
    }
    __syncthreads();
    uint32_t best = sh.pull_from;
    for (int i = threadIdx.x; i < peers * kStreamTop; i += kThreads) {
      const uint32_t t = sh.peer_top[i / kStreamTop][i % kStreamTop];
      if (t <= best) continue;
      int64_t count = 0;
      for (int c = 0; c < peers; ++c) {
        int64_t in_c = 0;
#pragma unroll
        for (int j = 0; j < kStreamTop; ++j) in_c += sh.peer_top[c][j] >= t;
        in_c *= step;
        if (sh.peer_kth[c] != 0 && sh.peer_kth[c] >= t) in_c = max(in_c, q.k);
        count += in_c;
      }
      if (count >= q.k) best = t;
    }
    const uint32_t tb = block_max_key(sh, best);
    if (threadIdx.x == 0) sh.pull_from = tb;
    __syncthreads();
  }

  const uint32_t t0 = sh.pull_from;
  if constexpr (kTopK) {
    // CTA 0 copies each peer's entries at or above t0 (a prefix of its sorted list, of which
    // only the first k can rank below k) into its own list's space, peer after peer, and ranks
    // each by its position plus the other segments' entries above it: a merge without a sort.
    if (rank == 0) {
      if (threadIdx.x < peers) {
        const unsigned long long* list = cl.map_shared_rank(comp, threadIdx.x);
        int lo = 0, hi = min(static_cast<int>(sh.peer_at[threadIdx.x]), static_cast<int>(q.k));
        while (lo < hi) {
          const int mid = (lo + hi) / 2;
          if (static_cast<uint32_t>(list[mid] >> 32) >= t0) lo = mid + 1; else hi = mid;
        }
        sh.peer_n[threadIdx.x] = static_cast<uint32_t>(lo);
      }
      __syncthreads();
      uint32_t got = 0;
      for (int c = 0; c < peers; ++c) got += sh.peer_n[c];
      // got >= k always holds (t0 is at most the row's k-th largest key); checked, not assumed.
      const bool ok = got >= static_cast<uint32_t>(q.k) && got <= cap;
      if (ok) {
        uint32_t off = 0;
        for (int c = 0; c < peers; ++c) {
          const unsigned long long* list = cl.map_shared_rank(comp, c);
          for (int i = threadIdx.x; i < static_cast<int>(sh.peer_n[c]); i += kThreads) local[off + i] = list[i];
          off += sh.peer_n[c];
        }
      }
      if (threadIdx.x == 0) sh.stream_ok = ok;
    }
    cl.sync();  // the peers' lists are read; CTA 0's verdict is out
    if (!*cl.map_shared_rank(&sh.stream_ok, 0)) return false;
    if (rank == 0) {
      if (last_row) arrive_early(&sh.arrived);
      uint32_t got = 0;
      for (int c = 0; c < peers; ++c) got += sh.peer_n[c];
      for (int idx = threadIdx.x; idx < static_cast<int>(got); idx += kThreads) {
        const unsigned long long e = local[idx];
        int pos = idx;  // its rank: its place in its segment, plus the other segments' larger entries
        int off = 0;
        for (int c = 0; c < peers; ++c) {
          const int nc = static_cast<int>(sh.peer_n[c]);
          if (idx >= off && idx < off + nc) {
            pos -= off;
          } else {
            int lo = 0, hi = nc;
            while (lo < hi) {
              const int mid = (lo + hi) / 2;
              if (local[off + mid] > e) lo = mid + 1; else hi = mid;
            }
            pos += lo;
          }
          off += nc;
        }
        if (pos < q.k) out[pos] = static_cast<int32_t>(last - static_cast<uint32_t>(e));
      }
      __syncthreads();  // every read of the list is done before the next row's appends
    }
    return true;
  } else {
    // CTA 0 pulls each peer's entries at or above that bound: a prefix of the sorted list, within `at`.
    if (rank == 0) {
      constexpr int kWarps = kThreads / 32;
      for (int c = threadIdx.x / 32; c < peers; c += kWarps) {
        const unsigned long long* list = cl.map_shared_rank(comp, c);
        const int at_c = static_cast<int>(sh.peer_at[c]);
        for (int i0 = 0; i0 < at_c; i0 += 32) {
          const int i = i0 + lane;
          const unsigned long long e = i < at_c ? list[i] : 0ull;
          const bool sel = i < at_c && static_cast<uint32_t>(e >> 32) >= t0;
          append_to_rank0(&sh.ncand, cand, kCand, sel, e);
          if (!__any_sync(~0u, sel)) break;
        }
      }
      __syncthreads();
      const uint32_t got = sh.ncand;
      __syncthreads();
      if (threadIdx.x == 0) {
        sh.stream_ok = got <= static_cast<uint32_t>(kCand);
        if (!sh.stream_ok) sh.ncand = 0;  // the general passes gather afresh
      }
    }
    cl.sync();  // the peers' lists are read; CTA 0's verdict is out
    if (!*cl.map_shared_rank(&sh.stream_ok, 0)) return false;
    if (rank == 0) {
      if (last_row) arrive_early(&sh.arrived);
      Gather g;
      g.fits = g.all = true;
      g.n = static_cast<int>(sh.ncand);
      const int t = resolve_candidates<true>(sh, cand, g, m, q, last, -INFINITY, 0x7fffffff);
      if (threadIdx.x == 0) *out = t;
    }
    return true;
  }
}

}  // namespace sampling
}  // namespace jaxnorm

// The sampler of rows whose kept set is known once the maximum is (no top-k or top-p: no filter,
// temperature, min-p; greedy rows too), with each thread's share of the row held in registers:
// one read of the row, two cluster exchanges (the maximum, then the masses or the argmax), and the
// picked CTA's scan of its own registers. It draws what draw_by_mass (inverse_draw.cuh) draws,
// token for token: the same fixed-point masses of the same s, in index order, and the same word.
// The general kernel (row_select.cuh) copies the row into shared memory and reads the copy twice,
// a row's cluster waiting out each pass; here nothing is copied and the chain after the read is
// two exchanges and one warp's scan.
// The exchanges push each CTA's value into its peers' shared memory by st.async onto their
// mbarriers (row_reduce.cuh's push_and_wait), so a CTA waits only for its peers' values to land:
// no cluster barrier, whose release and acquire at cluster scope put a MEMBAR.ALL.GPU and an
// emptied L1 on a batch-1 row's critical path. Against cluster barriers (H200, same-call A/B):
// 0.65-0.83x the time at 1-8 rows x 32000-128256, 1.00x at 64 rows (results/h200-exchange-a56879a).
#pragma once

#include "cuda/row_reduce.cuh"
#include "cuda/sampling/gather_select.cuh"

namespace jaxnorm {
namespace sampling {

constexpr int kMassThreads = 512;

template <int kThreads>
struct MassShared {
  static constexpr int kWarps = kThreads / 32;
  float wmax[kWarps];
  unsigned long long wsum[kWarps];  // this row's warp sums (masses), or warp minima (argmax index)
  // The cluster exchanges: each CTA's maximum (its float's bits), then its mass or argmax index.
  RowReduceSmem<unsigned long long, 1, true> cta;
};

__device__ __forceinline__ unsigned long long warp_min(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(~0u, v, o));
  return v;
}

// Thread t holds packs t * kPacks .. t * kPacks + kPacks - 1 of its CTA's chunk: index order is
// thread order, so the picked CTA finds the token by a scan of its warp sums, one of its picked
// warp's thread sums, and the picked thread's walk over its own registers.
// 16-bit rows without a bias are held as loaded (half the registers of floats). Up to 16 tokens a
// thread, 2 CTAs an SM (64 registers, no spills: ptxas); 32 tokens spilled 76-98 bytes at 64
// registers, so those instances take one CTA an SM.
template <class T, int kThreads, int kPacks, bool kBias>
__global__ void __launch_bounds__(kThreads, kPacks * kVecOf<T> > 16 ? 1 : 2) mass_rows(const SelectArgs<T> a) {
  constexpr int N = kVecOf<T>;
  constexpr bool kRaw = sizeof(T) == 2 && !kBias;
  constexpr int kWarps = kThreads / 32;
  __shared__ MassShared<kThreads> sh;
  const cg::cluster_group cl = cg::this_cluster();
  const int rank = static_cast<int>(cl.block_rank());
  const int peers = static_cast<int>(cl.num_blocks());
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t c0 = min(a.cols, rank * a.chunk);
  const int n = static_cast<int>(min(a.chunk, a.cols - c0));  // a multiple of N (rows of whole packs)
  auto col_of = [&](int j, int e) { return (static_cast<int>(threadIdx.x) * kPacks + j) * N + e; };
  // A cluster of one CTA is launched without clusters (launch_with_smem), where st.async cannot
  // run: its value goes through its own shared memory.
  if (peers > 1) cluster_reduce_init(sh.cta, peers);
  int ex = 0;  // the exchanges so far; push_and_wait alternates the two copies by it
  // v (valid in warp 0) to every CTA of the cluster: returns the copy in which peer r's value is
  // sh.cta.cta[copy][r]. Every thread calls it after the CTA barrier that published v's parts (the
  // reuse of the copies relies on it, row_reduce.cuh).
  auto exchange = [&](unsigned long long v) {
    const int copy = ex & 1;
    if (peers > 1) {
      push_and_wait(v, sh.cta, ex, static_cast<unsigned>(peers));
    } else {
      if (threadIdx.x == 0) sh.cta.cta[copy][0] = v;
      __syncthreads();
    }
    ++ex;
    return copy;
  };
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    int32_t* out = static_cast<int32_t*>(a.out) + r;
    int32_t forced;
    if (forced_token(r, a.rows, a.finished, a.n_fin, a.end_id, a.n_end, &forced)) {
      if (rank == 0 && threadIdx.x == 0) *out = forced;
      continue;
    }
    const T* grow = a.x + r * a.cols + c0;
    Pack<T, N> raw[kRaw ? kPacks : 1];
    float held[kRaw ? 1 : kPacks][N];
#pragma unroll
    for (int j = 0; j < kPacks; ++j) {
      const int col = col_of(j, 0);
      Pack<T, N> pk;
      if (col < n) {
        pk = load_raw_nc<T, N>(grow + col);
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e) pk.v[e] = from_float<T>(-INFINITY);
      }
      if constexpr (kRaw) {
        raw[j] = pk;
      } else {
        unpack(pk, held[j]);
        if constexpr (kBias) {
          if (col < n) {
            float b[N];
            load_pack<float, N>(a.bias + c0 + col, b);
#pragma unroll
            for (int e = 0; e < N; ++e) held[j][e] += b[e];
          }
        }
      }
    }
    // Token (j, e)'s logit (the bias added): every use of it reads the same float.
    auto x = [&](int j, int e) {
      if constexpr (kRaw) {
        return to_float(raw[j].v[e]);
      } else {
        return held[j][e];
      }
    };
    const RowParams q = row_params(r, a.rows, a.cols, a.temps, a.n_temps, a.top_k, a.n_k, a.top_p, a.n_p,
                                   a.log_min_p, a.n_m, a.keys, a.n_keys, a.key_width);
    const uint64_t word = pick_word(0, q.row_in_key, q.key0, q.key1);  // while the loads are in flight
    // The row's maximum: warp, block, then each warp reads its peers' (a lane a peer).
    float v = -INFINITY;
#pragma unroll
    for (int j = 0; j < kPacks; ++j) {
#pragma unroll
      for (int e = 0; e < N; ++e) v = fmaxf(v, sampling_value(x(j, e), false));
    }
    v = warp_max(v);
    if (lane == 0) sh.wmax[warp] = v;
    __syncthreads();
    float cm = -INFINITY;
    if (warp == 0) cm = warp_max(lane < kWarps ? sh.wmax[lane] : -INFINITY);
    const int bm = exchange(__float_as_uint(cm));
    float m = warp_max(lane < peers ? __uint_as_float(static_cast<uint32_t>(sh.cta.cta[bm][lane])) : -INFINITY);
    if (m == -INFINITY) {  // no token of positive probability
      if (rank == 0 && threadIdx.x == 0) *out = -1;
      continue;
    }
    const bool inf_row = m == INFINITY;
    if (inf_row) m = 0.0f;
    // Greedy: the lowest index of the maximum. Else this thread's kept masses (kept_mass, as
    // draw_by_mass weighs them).
    auto mass = [&](float xv) { return kept_mass(scaled(xv, m, inf_row, q), q); };
    unsigned long long mine = q.greedy ? ~0ull : 0ull;
#pragma unroll
    for (int j = kPacks - 1; j >= 0; --j) {
      if (q.greedy) {
#pragma unroll
        for (int e = N - 1; e >= 0; --e) {
          if (sampling_value(x(j, e), inf_row) == m) mine = static_cast<unsigned long long>(c0 + col_of(j, e));
        }
        continue;
      }
      bool any = false;  // a pack that min-p drops whole takes no exp
#pragma unroll
      for (int e = 0; e < N; ++e) any |= scaled(x(j, e), m, inf_row, q) >= q.log_min_p;
      if (any) {
#pragma unroll
        for (int e = 0; e < N; ++e) mine += mass(x(j, e));
      }
    }
    const unsigned long long wv = q.greedy ? warp_min(mine) : warp_sum(mine);
    if (lane == 0) sh.wsum[warp] = wv;
    __syncthreads();
    unsigned long long ct = 0;
    if (warp == 0) {
      ct = q.greedy ? warp_min(lane < kWarps ? sh.wsum[lane] : ~0ull) : warp_sum(lane < kWarps ? sh.wsum[lane] : 0ull);
    }
    const int bs = exchange(ct);
    const unsigned long long pv = lane < peers ? sh.cta.cta[bs][lane] : (q.greedy ? ~0ull : 0ull);
    if (q.greedy) {
      const unsigned long long t = warp_min(pv);
      if (rank == 0 && threadIdx.x == 0) *out = static_cast<int32_t>(t);
      continue;
    }
    // The draw: the CTA whose share of the total holds R, then its warp, its thread, its token.
    const unsigned long long incl = warp_inclusive_scan(pv);
    const unsigned long long rr = scale_word(word, __shfl_sync(~0u, incl, 31));
    const int at = __ffs(__ballot_sync(~0u, rr < incl)) - 1;
    if (rank != at) continue;
    unsigned long long pos = rr - __shfl_sync(~0u, incl - pv, at);
    const unsigned long long ws = lane < kWarps ? sh.wsum[lane] : 0ull;
    const unsigned long long wincl = warp_inclusive_scan(ws);
    const int w = __ffs(__ballot_sync(~0u, pos < wincl)) - 1;
    if (warp != w) continue;
    pos -= __shfl_sync(~0u, wincl - ws, w);
    const unsigned long long tincl = warp_inclusive_scan(mine);
    if (lane != __ffs(__ballot_sync(~0u, pos < tincl)) - 1) continue;
    unsigned long long acc = tincl - mine;
    int at_j = kPacks - 1, at_e = N - 1;
    bool found = false;
#pragma unroll
    for (int j = 0; j < kPacks; ++j) {
#pragma unroll
      for (int e = 0; e < N; ++e) {  // the first token whose running mass passes pos
        acc += mass(x(j, e));
        if (!found && pos < acc) found = true, at_j = j, at_e = e;
      }
    }
    *out = static_cast<int32_t>(c0 + col_of(at_j, at_e));
  }
  // No exit barrier: peers push into this CTA's shared memory only in exchanges it waits for. A
  // CTA all of whose rows were finished still completes the init's cluster barrier.
  if (peers > 1 && ex == 0) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}

}  // namespace sampling
}  // namespace jaxnorm

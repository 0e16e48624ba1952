// Kernels of the embedding family: the lookup + position encoding, and the table gradient as
// ordered sums over runs of sorted ids. Memory-bound: one warp per token row (forward) or per run
// (backward), lanes on 16-byte packs of N elements, many warps per CTA, grid-stride loops.
#pragma once

#include <cstdint>

#include "common/embedding_args.h"
#include "cuda/device_types.cuh"

namespace jaxnorm {
namespace embedding {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Products rounded on their own (never fused into an FMA), as the CPU handlers and the reference
// compute them: x * scale, then + the encoding (forward) or + the running sum (backward).
__device__ __forceinline__ float scaled(float x, float s) { return __fmul_rn(x, s); }

// Forward, the computed encoding: a lane takes pack u of the first half of the row and the same
// pack of the second half, which share their angles: one sincosf per pair (accurate, no fast
// math: positions can be large). N divides D / 2.
template <class T, int N>
__global__ void __launch_bounds__(kThreads) embed_sine_kernel(EmbedFwdArgs a) {
  const T* __restrict__ table = static_cast<const T*>(a.table);
  T* __restrict__ out = static_cast<T*>(a.out);
  const int lane = threadIdx.x & 31;
  const int64_t half = a.dim / 2, units = half / N;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; t < a.tokens;
       t += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t id = min(max(__ldg(a.ids + t), 0), static_cast<int32_t>(a.vocab - 1));
    const float pos = static_cast<float>(__ldg(a.positions + t));
    const T* row = table + id * a.dim;
    T* o = out + t * a.dim;
    for (int64_t u = lane; u < units; u += 32) {
      float lo[N], hi[N];
      load_pack<T, N>(row + u * N, lo);
      load_pack<T, N>(row + half + u * N, hi);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        float s, c;
        sincosf(pos * __ldg(a.inv_timescales + u * N + i), &s, &c);
        lo[i] = scaled(lo[i], a.scale) + s;
        hi[i] = scaled(hi[i], a.scale) + c;
      }
      store_pack<T, N>(o + u * N, lo);
      store_pack<T, N>(o + half + u * N, hi);
    }
  }
}

// Forward, the table form: pos_table's row added. N divides D.
template <class T, int N>
__global__ void __launch_bounds__(kThreads) embed_table_kernel(EmbedFwdArgs a) {
  const T* __restrict__ table = static_cast<const T*>(a.table);
  const T* __restrict__ pos_table = static_cast<const T*>(a.pos_table);
  T* __restrict__ out = static_cast<T*>(a.out);
  const int lane = threadIdx.x & 31;
  const int64_t units = a.dim / N;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; t < a.tokens;
       t += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t id = min(max(__ldg(a.ids + t), 0), static_cast<int32_t>(a.vocab - 1));
    const int64_t p = min(max(__ldg(a.positions + t), 0), static_cast<int32_t>(a.max_pos - 1));
    const T* row = table + id * a.dim;
    const T* pe = pos_table + p * a.dim;
    T* o = out + t * a.dim;
    for (int64_t u = lane; u < units; u += 32) {
      float x[N], e[N];
      load_pack<T, N>(row + u * N, x);
      load_pack<T, N>(pe + u * N, e);
#pragma unroll
      for (int i = 0; i < N; ++i) x[i] = scaled(x[i], a.scale) + e[i];
      store_pack<T, N>(o + u * N, x);
    }
  }
}

// Rows summed per step of a run: their loads are all issued before the (ordered) additions.
constexpr int kRunUnroll = 4;

// Backward: the gradient was zeroed; warp w takes sorted positions j = w, w + warps, ...; the
// warp whose j starts a run (sorted[j - 1] != sorted[j]) owns that run: it finds the run's end
// and writes row sorted[j] = the sum over the run, in sorted order, of dout[order[k]] * scale.
// Every element is one thread's ordered sum: the same bits on every run, no atomics.
template <class T, int N>
__global__ void __launch_bounds__(kThreads) embed_bwd_kernel(EmbedBwdArgs a) {
  const T* __restrict__ dout = static_cast<const T*>(a.dout);
  T* __restrict__ g = static_cast<T*>(a.dtable);
  const int lane = threadIdx.x & 31;
  const int64_t units = a.dim / N;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; j < a.tokens;
       j += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int32_t v = __ldg(a.sorted + j);
    if ((j > 0 && __ldg(a.sorted + j - 1) == v) || v < 0 || v >= a.rows) continue;  // warp-uniform
    // The run's end: the first k > j with sorted[k] != v, 32 entries a step.
    int64_t end = j + 1;
    for (;;) {
      const int64_t k = end + lane;
      const bool other = k >= a.tokens || __ldg(a.sorted + k) != v;
      const unsigned m = __ballot_sync(0xffffffffu, other);
      if (m != 0) {
        end += __ffs(m) - 1;
        break;
      }
      end += 32;
    }
    T* o = g + static_cast<int64_t>(v) * a.dim;
    for (int64_t u = lane; u < units; u += 32) {
      float acc[N];
#pragma unroll
      for (int i = 0; i < N; ++i) acc[i] = 0.0f;
      for (int64_t k = j; k < end; k += kRunUnroll) {
        float x[kRunUnroll][N];
#pragma unroll
        for (int r = 0; r < kRunUnroll; ++r) {
          if (k + r < end) {
            load_pack<T, N>(dout + static_cast<int64_t>(__ldg(a.order + k + r)) * a.dim + u * N, x[r]);
          }
        }
#pragma unroll
        for (int r = 0; r < kRunUnroll; ++r) {
          if (k + r < end) {
#pragma unroll
            for (int i = 0; i < N; ++i) acc[i] += scaled(x[r][i], a.scale);
          }
        }
      }
      store_pack<T, N>(o + u * N, acc);
    }
  }
}

}  // namespace embedding
}  // namespace jaxnorm

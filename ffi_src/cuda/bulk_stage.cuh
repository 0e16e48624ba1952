// A cluster CTA's slice of a row staged into its shared memory by bulk asynchronous copies
// (cp.async.bulk) counted on an mbarrier: the bytes of a row the CTA will read next are in
// flight while it works on the current one, without registers. The slice is the cluster tiles'
// layout: P segments of W columns, segment p of CTA `rank` at column (p * kCluster + rank) * W,
// staged at p * W. The staged norm forward (staged_fwd.cuh) and the norm backward's staged
// cluster tiles (row_tiles.cuh, tile_bwd_kernel) share it.
#pragma once

#include <cstdint>

#include "cuda/row_reduce.cuh"

namespace jaxnorm {

// The dynamic shared memory a staged CTA may take beside its kernel's static buffers (227 KB an SM).
constexpr size_t kStagedSmemCap = 224 * 1024;

// Thread 0, before any other thread waits: `n` mbarriers expecting one arrival (the expect_tx of
// stage_slices) a phase, visible to the async proxy that completes them.
__device__ __forceinline__ void init_stage_barriers(unsigned long long* bars, int n) {
  for (int b = 0; b < n; ++b) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bars[b])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// Bytes of segment p of a row's slice of a [rows, cols] array of T (empty past the row's end).
template <class T, int kCluster, int W>
__device__ __forceinline__ unsigned segment_bytes(int p, int64_t cols, unsigned rank) {
  const int64_t seg = (static_cast<int64_t>(p) * kCluster + rank) * W;
  return static_cast<unsigned>(min(max(cols - seg, int64_t{0}), int64_t{W})) * sizeof(T);
}

template <class T, int kCluster, int W, int P>
__device__ __forceinline__ unsigned slice_bytes(int64_t cols, unsigned rank) {
  unsigned total = 0;
#pragma unroll
  for (int p = 0; p < P; ++p) total += segment_bytes<T, kCluster, W>(p, cols, rank);
  return total;
}

// The copies of `row`'s slice of `src` into `dst`, counted on the mbarrier at `bar` (whose
// expect_tx the caller made). Rows of whole 16-byte packs only.
template <class T, int kCluster, int W, int P>
__device__ __forceinline__ void copy_slice(const T* src, int64_t row, int64_t cols, unsigned rank, T* dst,
                                           unsigned bar) {
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const unsigned bytes = segment_bytes<T, kCluster, W>(p, cols, rank);
    if (bytes > 0) {
      const int64_t seg = (static_cast<int64_t>(p) * kCluster + rank) * W;
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       smem_addr(dst + p * W)),
                   "l"(src + row * cols + seg), "r"(bytes), "r"(bar)
                   : "memory");
    }
  }
}

// Every thread of a kThreads CTA: the CTA's slice of a float32 parameter vector (the scale, the
// bias) into `dst`, by float4s; the caller syncs before reading it.
template <int kThreads, int kCluster, int W, int P>
__device__ __forceinline__ void load_param_slice(const float* src, float* dst, int64_t cols, unsigned rank) {
  for (int i = threadIdx.x * 4; i < P * W; i += kThreads * 4) {
    const int64_t col = (static_cast<int64_t>(i / W) * kCluster + rank) * W + i % W;
    if (col < cols) *reinterpret_cast<float4*>(dst + i) = *reinterpret_cast<const float4*>(src + col);
  }
}

// Thread 0: `row`'s slices of one array, or of two (x and dy), staged on the mbarrier at `bar`,
// one phase for all of them.
template <int kCluster, int W, int P, class T>
__device__ __forceinline__ void stage_slices(int64_t row, int64_t cols, unsigned rank, unsigned bar, const T* src,
                                             T* dst) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
               "r"(slice_bytes<T, kCluster, W, P>(cols, rank))
               : "memory");
  copy_slice<T, kCluster, W, P>(src, row, cols, rank, dst, bar);
}

template <int kCluster, int W, int P, class A, class T>
__device__ __forceinline__ void stage_slices(int64_t row, int64_t cols, unsigned rank, unsigned bar, const A* a,
                                             A* a_dst, const T* b, T* b_dst) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
               "r"(slice_bytes<A, kCluster, W, P>(cols, rank) + slice_bytes<T, kCluster, W, P>(cols, rank))
               : "memory");
  copy_slice<A, kCluster, W, P>(a, row, cols, rank, a_dst, bar);
  copy_slice<T, kCluster, W, P>(b, row, cols, rank, b_dst, bar);
}

}  // namespace jaxnorm

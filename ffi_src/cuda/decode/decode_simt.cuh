// One decoding step of attention over a KV cache on CUDA cores (flash-decoding): the kernel for
// float32 caches, and for 16-bit caches on GPUs without bf16 tensor cores (decode_mma.cuh).
//
// A CTA takes one (sequence, kv head, group of G query heads, split of the positions). It streams
// the split's K and V rows through a kStages-deep ring of shared-memory stages with cp.async, so
// DRAM reads stay in flight while the threads compute on earlier stages. The threads form slots of
// kLanes lanes; a slot takes one row at a time, a 16-byte piece per lane, and the G query heads
// sharing the kv head reuse each row (grouped-query attention reads the cache once). Each slot
// keeps an online softmax (max, sum, weighted V) per head over its rows; the slots are merged in
// shared memory (decode_common.cuh).
#pragma once

#include <cstdint>

#include "cuda/decode/decode_common.cuh"

namespace jaxnorm {
namespace decode {

template <class T, int D, int G>
struct Shape {
  static constexpr int kVec = kVecOf<T>;                         // elements per 16-byte piece
  static constexpr int kLanes = D / kVec < 32 ? D / kVec : 32;   // lanes sharing one row
  static constexpr int kChunks = D / (kVec * kLanes);            // pieces per lane per row
  static constexpr int kElems = kVec * kChunks;                  // elements per lane
  static constexpr int kSlots = kThreads / kLanes;               // rows taken at once by the CTA
  static constexpr int kRowsPerSlot = 4 / kChunks;               // rows per slot per stage
  static constexpr int kStageRows = kSlots * kRowsPerSlot;       // 16 KB of K and V per stage
  static constexpr int kStages = 4;
  static constexpr int kStageElems = 2 * kStageRows * D;         // K rows, then V rows
  static constexpr size_t kSmemBytes = size_t{kStages} * kStageElems * sizeof(T);
  static_assert(D % (kVec * kLanes) == 0 && kLanes >= 1, "head_dim must be a multiple of 16 bytes");
  static_assert(size_t{kSlots} * G * D * sizeof(float) <= kSmemBytes, "the slot merge reuses the stages");
};

// The lane's element e of a row: chunk c = e / kVec covers lanes' consecutive 16-byte pieces.
template <class S>
__device__ __forceinline__ int elem_offset(int lane, int c) {
  return (c * S::kLanes + lane) * S::kVec;
}

template <class T, int D, int G>
__global__ void __launch_bounds__(kThreads) decode_kernel(DecodeParams p) {
  using S = Shape<T, D, G>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* stages = reinterpret_cast<T*>(smem_raw);
  __shared__ float sm_max[S::kSlots][G], sm_sum[S::kSlots][G];

  Work w;
  const bool valid = work_of(p, G, S::kStageRows, &w);
  const int lane = threadIdx.x % S::kLanes, slot = threadIdx.x / S::kLanes;
  const Rows<T> src = rows_of<T, D>(p, w);
  if (valid) write_new_token<T, D>(p, w, src);

  float m[G], l[G], acc[G][S::kElems];
  float qf[G][S::kElems];
#pragma unroll
  for (int j = 0; j < G; ++j) {
    m[j] = -INFINITY;
    l[j] = 0.f;
#pragma unroll
    for (int c = 0; c < S::kChunks; ++c) {
      float tmp[S::kVec];
      if (valid && j < w.heads) {
        load_pack<T, S::kVec>(static_cast<const T*>(p.q) + (int64_t{w.b} * p.q_heads + w.h0 + j) * D +
                                  elem_offset<S>(lane, c),
                              tmp);
      } else {
#pragma unroll
        for (int e = 0; e < S::kVec; ++e) tmp[e] = 0.f;
      }
#pragma unroll
      for (int e = 0; e < S::kVec; ++e) {
        qf[j][c * S::kVec + e] = tmp[e] * p.scale_log2;
        acc[j][c * S::kVec + e] = 0.f;
      }
    }
  }

  const int n_stages = valid ? (w.end - w.start + S::kStageRows - 1) / S::kStageRows : 0;
#pragma unroll
  for (int st = 0; st < S::kStages - 1; ++st) {
    if (st < n_stages) {
      load_stage<S::kStageRows, D, false>(stages + st * S::kStageElems, src, p.pos_stride,
                                          w.start + st * S::kStageRows, w.end);
    }
    cp_async_commit();
  }
  for (int it = 0; it < n_stages; ++it) {
    const int next = it + S::kStages - 1;
    if (next < n_stages) {
      load_stage<S::kStageRows, D, false>(stages + (next % S::kStages) * S::kStageElems, src, p.pos_stride,
                                          w.start + next * S::kStageRows, w.end);
    }
    cp_async_commit();
    cp_async_wait<S::kStages - 1>();
    __syncthreads();
    const T* kbuf = stages + (it % S::kStages) * S::kStageElems;
    const T* vbuf = kbuf + S::kStageRows * D;
    const int row0 = w.start + it * S::kStageRows;

    float s[S::kRowsPerSlot][G];
#pragma unroll
    for (int t = 0; t < S::kRowsPerSlot; ++t) {
      const int r = t * S::kSlots + slot;
      float kf[S::kElems];
#pragma unroll
      for (int c = 0; c < S::kChunks; ++c) {
        const auto pk = load_raw<T, S::kVec>(kbuf + r * D + elem_offset<S>(lane, c));
#pragma unroll
        for (int e = 0; e < S::kVec; ++e) kf[c * S::kVec + e] = to_float(pk.v[e]);
      }
#pragma unroll
      for (int j = 0; j < G; ++j) {
        float dot = 0.f;
#pragma unroll
        for (int e = 0; e < S::kElems; ++e) dot = fmaf(qf[j][e], kf[e], dot);
        s[t][j] = dot;
      }
    }
#pragma unroll
    for (int off = S::kLanes / 2; off > 0; off /= 2) {
#pragma unroll
      for (int t = 0; t < S::kRowsPerSlot; ++t) {
#pragma unroll
        for (int j = 0; j < G; ++j) s[t][j] += __shfl_xor_sync(0xffffffffu, s[t][j], off);
      }
    }
#pragma unroll
    for (int t = 0; t < S::kRowsPerSlot; ++t) {
      if (row0 + t * S::kSlots + slot >= w.end) {
#pragma unroll
        for (int j = 0; j < G; ++j) s[t][j] = -INFINITY;
      }
    }

    float vf[S::kRowsPerSlot][S::kElems];
#pragma unroll
    for (int t = 0; t < S::kRowsPerSlot; ++t) {
      const int r = t * S::kSlots + slot;
#pragma unroll
      for (int c = 0; c < S::kChunks; ++c) {
        const auto pk = load_raw<T, S::kVec>(vbuf + r * D + elem_offset<S>(lane, c));
#pragma unroll
        for (int e = 0; e < S::kVec; ++e) vf[t][c * S::kVec + e] = to_float(pk.v[e]);
      }
    }
#pragma unroll
    for (int j = 0; j < G; ++j) {
      float mx = m[j];
#pragma unroll
      for (int t = 0; t < S::kRowsPerSlot; ++t) mx = fmaxf(mx, s[t][j]);
      if (mx == -INFINITY) continue;  // nothing seen yet by this slot
      const float corr = exp2f(m[j] - mx);
      l[j] *= corr;
#pragma unroll
      for (int e = 0; e < S::kElems; ++e) acc[j][e] *= corr;
#pragma unroll
      for (int t = 0; t < S::kRowsPerSlot; ++t) {
        const float pe = exp2f(s[t][j] - mx);
        l[j] += pe;
#pragma unroll
        for (int e = 0; e < S::kElems; ++e) acc[j][e] = fmaf(pe, vf[t][e], acc[j][e]);
      }
      m[j] = mx;
    }
    __syncthreads();  // the next iteration refills this stage
  }
  cp_async_wait<0>();
  __syncthreads();

  // Merge the slots in slot order (the stages' memory is free now).
  float* sm_acc = reinterpret_cast<float*>(smem_raw);
#pragma unroll
  for (int j = 0; j < G; ++j) {
    if (lane == 0) {
      sm_max[slot][j] = m[j];
      sm_sum[slot][j] = l[j];
    }
#pragma unroll
    for (int c = 0; c < S::kChunks; ++c) {
#pragma unroll
      for (int e = 0; e < S::kVec; ++e) sm_acc[(slot * G + j) * D + elem_offset<S>(lane, c) + e] = acc[j][c * S::kVec + e];
    }
  }
  __syncthreads();
  merge_and_store<T, D, S::kSlots, G>(p, w, valid, &sm_max[0][0], &sm_sum[0][0], sm_acc);
}

}  // namespace decode
}  // namespace jaxnorm

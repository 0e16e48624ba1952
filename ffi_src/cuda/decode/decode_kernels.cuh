// One decoding step of attention over a KV cache (flash-decoding on CUDA cores).
//
// A CTA takes one (sequence, kv head, group of G query heads, split of the positions). It streams
// the split's K and V rows through a kStages-deep ring of shared-memory stages with cp.async, so
// DRAM reads stay in flight while the threads compute on earlier stages. The threads form slots of
// kLanes lanes; a slot takes one row at a time, a 16-byte piece per lane, and the G query heads
// sharing the kv head reuse each row (grouped-query attention reads the cache once). Each slot
// keeps an online softmax (max, sum, weighted V) per head over its rows; the slots are merged in
// shared memory in slot order, and the splits by a second kernel in split order, both with the
// (max, sum) rescaling of the online softmax, so results never depend on timing.
//
// The new token (k_new, v_new) is position `length` of its sequence: its stage copies it from the
// operand, not the cache, and the CTA whose split holds it writes it into the cache. No CTA reads
// the cache at `length`, so the write never races a read.
#pragma once

#include <cstdint>

#include "cuda/device_types.cuh"

namespace jaxnorm {
namespace decode {

constexpr int kThreads = 128;
// A split takes at least this many positions: fewer costs more in merging than it saves.
constexpr int kMinChunk = 64;
constexpr float kLog2e = 1.4426950408889634f;

struct DecodeParams {
  const void* q;  // (B, Hq, D)
  const void* k;  // cache, strides below (in elements)
  const void* v;
  const void* k_new;  // (B, Hkv, D) or null
  const void* v_new;
  const int32_t* lengths;  // (B)
  void* out;  // (B, Hq, D)
  void* k_out;  // the caches as results (the same buffers when aliased)
  void* v_out;
  float* partials;  // (B, Hq, splits, 2 + D): max, sum, weighted V; splits > 1 only
  int64_t batch_stride, head_stride, pos_stride;
  int q_heads, kv_heads, group, max_len, splits;
  float scale_log2;  // softmax scale * log2(e): scores are taken in base 2
  bool has_new;
};

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
  static constexpr int kPieces = D / kVec;                       // 16-byte pieces per row
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

// The number of query heads of this CTA's group, its first head, and the positions [start, end)
// of its split; returns false when the sequence's length is invalid (the output is NaN).
struct Work {
  int b, kvh, h0, heads, split, length, start, end;
};

template <int G>
__device__ __forceinline__ bool work_of(const DecodeParams& p, Work* w) {
  const int groups = (p.group + G - 1) / G;
  w->b = blockIdx.z;
  w->kvh = blockIdx.y / groups;
  const int hg = blockIdx.y % groups;
  w->h0 = w->kvh * p.group + hg * G;
  w->heads = min(G, p.group - hg * G);
  w->split = blockIdx.x;
  w->length = p.lengths[w->b];
  if (w->length < 0 || w->length > p.max_len - (p.has_new ? 1 : 0)) return false;
  const int n = w->length + (p.has_new ? 1 : 0);
  const int chunk = max((n + p.splits - 1) / p.splits, kMinChunk);
  w->start = min(n, w->split * chunk);
  w->end = min(n, w->start + chunk);
  return true;
}

// Issues the cp.async copies of stage `stage` (rows [row0, row0 + kStageRows) of the split, those
// at or past `end` zero-filled) into `buf`.
template <class S, class T>
__device__ __forceinline__ void load_stage(T* buf, const T* kc, const T* vc, const T* kn, const T* vn,
                                           int64_t pos_stride, int row0, int end, int length) {
  constexpr int kUnits = 2 * S::kStageRows * S::kPieces;
#pragma unroll
  for (int u = threadIdx.x; u < kUnits; u += kThreads) {
    const int half = u / (S::kStageRows * S::kPieces);  // 0: K, 1: V
    const int r = (u / S::kPieces) % S::kStageRows, piece = u % S::kPieces;
    const int pos = row0 + r;
    const T* cache = half ? vc : kc;
    const T* src = pos == length ? (half ? vn : kn) : cache + pos * pos_stride;
    cp_async_16(buf + (half * S::kStageRows + r) * S::kPieces * S::kVec + piece * S::kVec,
                pos < end ? src + piece * S::kVec : cache, pos < end ? 16 : 0);
  }
}

template <class T, int D, int G>
__global__ void __launch_bounds__(kThreads) decode_kernel(DecodeParams p) {
  using S = Shape<T, D, G>;
  using P = Pack<T, S::kVec>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* stages = reinterpret_cast<T*>(smem_raw);
  __shared__ float sm_max[S::kSlots][G], sm_sum[S::kSlots][G];

  Work w;
  const bool valid = work_of<G>(p, &w);
  const int lane = threadIdx.x % S::kLanes, slot = threadIdx.x / S::kLanes;
  const int64_t base_off = w.b * p.batch_stride + int64_t{w.kvh} * p.head_stride;
  const T* kc = static_cast<const T*>(p.k) + base_off;
  const T* vc = static_cast<const T*>(p.v) + base_off;
  const int64_t new_off = (int64_t{w.b} * p.kv_heads + w.kvh) * D;
  const T* kn = p.has_new ? static_cast<const T*>(p.k_new) + new_off : kc;
  const T* vn = p.has_new ? static_cast<const T*>(p.v_new) + new_off : vc;
  const int length = p.has_new ? w.length : -1;  // the row read from k_new / v_new, if any

  // The split holding the new token writes it into the caches (the first head group only).
  if (valid && p.has_new && w.h0 == w.kvh * p.group && w.start <= w.length && w.length < w.end) {
    const int64_t off = base_off + w.length * p.pos_stride;
    for (int i = threadIdx.x; i < 2 * S::kPieces; i += kThreads) {
      const int piece = i % S::kPieces;
      T* dst = static_cast<T*>(i < S::kPieces ? p.k_out : p.v_out) + off + piece * S::kVec;
      *reinterpret_cast<P*>(dst) = load_raw<T, S::kVec>((i < S::kPieces ? kn : vn) + piece * S::kVec);
    }
  }

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
      load_stage<S>(stages + st * S::kStageElems, kc, vc, kn, vn, p.pos_stride, w.start + st * S::kStageRows, w.end,
                    length);
    }
    cp_async_commit();
  }
  for (int it = 0; it < n_stages; ++it) {
    const int next = it + S::kStages - 1;
    if (next < n_stages) {
      load_stage<S>(stages + (next % S::kStages) * S::kStageElems, kc, vc, kn, vn, p.pos_stride,
                    w.start + next * S::kStageRows, w.end, length);
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
        const P pk = load_raw<T, S::kVec>(kbuf + r * D + elem_offset<S>(lane, c));
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
        const P pk = load_raw<T, S::kVec>(vbuf + r * D + elem_offset<S>(lane, c));
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
  for (int i = threadIdx.x; i < w.heads * D; i += kThreads) {
    const int j = i / D, d = i % D;
    float mx = -INFINITY;
#pragma unroll
    for (int s = 0; s < S::kSlots; ++s) mx = fmaxf(mx, sm_max[s][j]);
    float sum = 0.f, o = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int s = 0; s < S::kSlots; ++s) {
        const float wgt = exp2f(sm_max[s][j] - mx);
        sum = fmaf(sm_sum[s][j], wgt, sum);
        o = fmaf(sm_acc[(s * G + j) * D + d], wgt, o);
      }
    }
    const int64_t row = int64_t{w.b} * p.q_heads + w.h0 + j;
    if (p.splits == 1) {
      const float r = !valid ? NAN : (sum > 0.f ? o / sum : 0.f);
      static_cast<T*>(p.out)[row * D + d] = from_float<T>(r);
    } else {
      float* part = p.partials + (row * p.splits + w.split) * (2 + D);
      part[2 + d] = o;
      if (d == 0) {
        part[0] = mx;
        part[1] = sum;
      }
    }
  }
}

// Merges the splits of one (sequence, query head) in split order; thread d writes element d.
template <class T, int D>
__global__ void __launch_bounds__(D) combine_kernel(DecodeParams p) {
  const int64_t row = blockIdx.x;
  const int d = threadIdx.x;
  const int b = static_cast<int>(row / p.q_heads);
  const int length = p.lengths[b];
  float r;
  if (length < 0 || length > p.max_len - (p.has_new ? 1 : 0)) {
    r = NAN;
  } else {
    const float* part = p.partials + row * p.splits * (2 + D);
    float mx = -INFINITY;
    for (int s = 0; s < p.splits; ++s) mx = fmaxf(mx, part[s * (2 + D)]);
    float sum = 0.f, o = 0.f;
    if (mx != -INFINITY) {
      for (int s = 0; s < p.splits; ++s) {
        const float* ps = part + s * (2 + D);
        const float wgt = exp2f(ps[0] - mx);
        sum = fmaf(ps[1], wgt, sum);
        o = fmaf(ps[2 + d], wgt, o);
      }
    }
    r = sum > 0.f ? o / sum : 0.f;
  }
  static_cast<T*>(p.out)[row * D + d] = from_float<T>(r);
}

}  // namespace decode
}  // namespace jaxnorm

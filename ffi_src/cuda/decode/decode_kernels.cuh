// One decoding step of attention over a KV cache (flash-decoding on CUDA cores).
//
// A CTA takes one (sequence, kv head, group of G query heads, split of the positions). Its
// threads form slots of kLanes lanes; a slot reads one cache row (head_dim elements) per step as
// one 16-byte load per lane, so a warp load covers whole rows and the G query heads sharing the
// kv head reuse every row from registers (grouped-query attention reads the cache once). Each
// slot keeps an online softmax (max, sum, weighted V) per head over its rows; the slots are
// merged in shared memory in slot order, and the splits by a second kernel in split order, both
// with the (max, sum) rescaling of the online softmax, so results never depend on timing.
//
// The new token (k_new, v_new) is position `length` of its sequence: the slot that reads it
// takes it from the operand, not the cache, and writes it into the cache. Every other read is of
// a position below `length`, so the write never races a read.
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
  static constexpr int kVec = kVecOf<T>;                         // elements per 16-byte load
  static constexpr int kLanes = D / kVec < 32 ? D / kVec : 32;   // lanes reading one row
  static constexpr int kChunks = D / (kVec * kLanes);            // 16-byte loads per lane per row
  static constexpr int kElems = kVec * kChunks;                  // elements per lane
  static constexpr int kSlots = kThreads / kLanes;               // rows read per step by the CTA
  static constexpr int kTile = (G <= 4 ? 8 : 4) / kChunks;       // rows per slot per step
  static_assert(D % (kVec * kLanes) == 0 && kLanes >= 1, "head_dim must be a multiple of 16 bytes");
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

template <class T, int D, int G>
__global__ void __launch_bounds__(kThreads) decode_kernel(DecodeParams p) {
  using S = Shape<T, D, G>;
  using P = Pack<T, S::kVec>;
  __shared__ float sm_max[S::kSlots][G], sm_sum[S::kSlots][G];
  __shared__ float sm_acc[S::kSlots * G * D];

  Work w;
  const bool valid = work_of<G>(p, &w);
  const int lane = threadIdx.x % S::kLanes, slot = threadIdx.x / S::kLanes;
  const int64_t base_off = w.b * p.batch_stride + int64_t{w.kvh} * p.head_stride;
  const T* kc = static_cast<const T*>(p.k) + base_off;
  const T* vc = static_cast<const T*>(p.v) + base_off;
  const int64_t new_off = (int64_t{w.b} * p.kv_heads + w.kvh) * D;
  const T* kn = p.has_new ? static_cast<const T*>(p.k_new) + new_off : nullptr;
  const T* vn = p.has_new ? static_cast<const T*>(p.v_new) + new_off : nullptr;
  const bool writes_new = p.has_new && w.h0 == w.kvh * p.group;  // the first head group writes

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

  for (int base = valid ? w.start : 0; valid && base < w.end; base += S::kSlots * S::kTile) {
    P kr[S::kTile][S::kChunks], vr[S::kTile][S::kChunks];
#pragma unroll
    for (int t = 0; t < S::kTile; ++t) {
      const int pos = base + t * S::kSlots + slot;
      const bool is_new = p.has_new && pos == w.length;
      const T* krow = is_new ? kn : kc + pos * p.pos_stride;
      const T* vrow = is_new ? vn : vc + pos * p.pos_stride;
#pragma unroll
      for (int c = 0; c < S::kChunks; ++c) {
        if (pos < w.end) {
          kr[t][c] = load_raw<T, S::kVec>(krow + elem_offset<S>(lane, c));
          vr[t][c] = load_raw<T, S::kVec>(vrow + elem_offset<S>(lane, c));
        } else {
#pragma unroll
          for (int e = 0; e < S::kVec; ++e) kr[t][c].v[e] = vr[t][c].v[e] = from_float<T>(0.f);
        }
      }
      if (is_new && writes_new) {
        const int64_t off = base_off + pos * p.pos_stride;
#pragma unroll
        for (int c = 0; c < S::kChunks; ++c) {
          *reinterpret_cast<P*>(static_cast<T*>(p.k_out) + off + elem_offset<S>(lane, c)) = kr[t][c];
          *reinterpret_cast<P*>(static_cast<T*>(p.v_out) + off + elem_offset<S>(lane, c)) = vr[t][c];
        }
      }
    }

    float s[S::kTile][G];
#pragma unroll
    for (int t = 0; t < S::kTile; ++t) {
      float kf[S::kElems];
#pragma unroll
      for (int c = 0; c < S::kChunks; ++c) {
#pragma unroll
        for (int e = 0; e < S::kVec; ++e) kf[c * S::kVec + e] = to_float(kr[t][c].v[e]);
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
      for (int t = 0; t < S::kTile; ++t) {
#pragma unroll
        for (int j = 0; j < G; ++j) s[t][j] += __shfl_xor_sync(0xffffffffu, s[t][j], off);
      }
    }
#pragma unroll
    for (int t = 0; t < S::kTile; ++t) {
      if (base + t * S::kSlots + slot >= w.end) {
#pragma unroll
        for (int j = 0; j < G; ++j) s[t][j] = -INFINITY;
      }
    }

#pragma unroll
    for (int j = 0; j < G; ++j) {
      float mx = m[j];
#pragma unroll
      for (int t = 0; t < S::kTile; ++t) mx = fmaxf(mx, s[t][j]);
      if (mx == -INFINITY) continue;  // nothing seen yet by this slot
      const float corr = exp2f(m[j] - mx);
      l[j] *= corr;
#pragma unroll
      for (int e = 0; e < S::kElems; ++e) acc[j][e] *= corr;
#pragma unroll
      for (int t = 0; t < S::kTile; ++t) {
        const float pe = exp2f(s[t][j] - mx);
        l[j] += pe;
#pragma unroll
        for (int c = 0; c < S::kChunks; ++c) {
#pragma unroll
          for (int e = 0; e < S::kVec; ++e) acc[j][c * S::kVec + e] = fmaf(pe, to_float(vr[t][c].v[e]), acc[j][c * S::kVec + e]);
        }
      }
      m[j] = mx;
    }
  }

  // Merge the slots in slot order.
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

// Pieces shared by the decode-attention kernels (decode_simt.cuh on CUDA cores, decode_mma.cuh
// on tensor cores): parameters, the split of the positions, the ring's cp.async stage loads, the
// write of the new token, the in-CTA merge of partial softmax states and the split combine.
//
// The new token (k_new, v_new) is position `length` of its sequence: stages copy it from the
// operand, not the cache, and the CTA whose split holds it writes it into the cache. No CTA reads
// the cache at `length`, so the write never races a read.
//
// Partial states are merged in a fixed order (warps or slots in index order, then splits in split
// order) with the (max, sum) rescaling of the online softmax, so results never depend on timing.
#pragma once

#include <cstdint>

#include "cuda/device_types.cuh"

namespace jaxnorm {
namespace decode {

constexpr int kThreads = 128;

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
  // The split states, splits > 1 only (a workspace of B * Hq * splits * (2 + D) floats): the
  // weighted V sums (B, Hq, splits, D) first, 16-byte aligned rows for the combine's float4
  // loads, then (max, sum) pairs (B, Hq, splits, 2) at `partial_stats`.
  float* partials;
  float* partial_stats;
  int64_t batch_stride, head_stride, pos_stride;
  int q_heads, kv_heads, group, max_len, splits;
  float scale_log2;  // softmax scale * log2(e): scores are taken in base 2
  bool has_new;
};

// A CTA's work: sequence b, kv head kvh, query heads [h0, h0 + heads), positions [start, end).
struct Work {
  int b, kvh, h0, heads, split, length, start, end;
};

__device__ __forceinline__ bool length_valid(const DecodeParams& p, int length) {
  return length >= 0 && length <= p.max_len - (p.has_new ? 1 : 0);
}

// Grid: x = split, y = kv head x head group (`per_cta` query heads each), z = sequence. Splits
// are whole multiples of `grain` positions (a kernel's stage). Returns false when the sequence's
// length is invalid (its output is NaN).
__device__ __forceinline__ bool work_of(const DecodeParams& p, int per_cta, int grain, Work* w) {
  const int groups = (p.group + per_cta - 1) / per_cta;
  w->b = blockIdx.z;
  w->kvh = blockIdx.y / groups;
  const int hg = blockIdx.y % groups;
  w->h0 = w->kvh * p.group + hg * per_cta;
  w->heads = min(per_cta, p.group - hg * per_cta);
  w->split = blockIdx.x;
  w->length = p.lengths[w->b];
  if (!length_valid(p, w->length)) return false;
  const int n = w->length + (p.has_new ? 1 : 0);
  const int chunk = ((n + p.splits - 1) / p.splits + grain - 1) / grain * grain;
  w->start = min(n, w->split * chunk);
  w->end = min(n, w->start + chunk);
  return true;
}

// The CTA's kv head in the caches and in k_new / v_new.
template <class T>
struct Rows {
  int64_t cache_off;
  const T* k;
  const T* v;
  const T* k_new;  // the caches' own rows when nothing is appended (never read then)
  const T* v_new;
  int new_pos;  // the position read from k_new / v_new, -1 if none
};

template <class T, int D>
__device__ __forceinline__ Rows<T> rows_of(const DecodeParams& p, const Work& w) {
  Rows<T> r;
  r.cache_off = w.b * p.batch_stride + int64_t{w.kvh} * p.head_stride;
  r.k = static_cast<const T*>(p.k) + r.cache_off;
  r.v = static_cast<const T*>(p.v) + r.cache_off;
  const int64_t new_off = (int64_t{w.b} * p.kv_heads + w.kvh) * D;
  r.k_new = p.has_new ? static_cast<const T*>(p.k_new) + new_off : r.k;
  r.v_new = p.has_new ? static_cast<const T*>(p.v_new) + new_off : r.v;
  r.new_pos = p.has_new ? w.length : -1;
  return r;
}

// The split holding the new token writes it into the caches (the kv head's first head group).
template <class T, int D>
__device__ __forceinline__ void write_new_token(const DecodeParams& p, const Work& w, const Rows<T>& r) {
  if (!p.has_new || w.h0 != w.kvh * p.group || w.length < w.start || w.length >= w.end) return;
  constexpr int kVec = kVecOf<T>, kPieces = D / kVec;
  const int64_t off = r.cache_off + w.length * p.pos_stride;
  for (int i = threadIdx.x; i < 2 * kPieces; i += kThreads) {
    const int piece = i % kPieces;
    T* dst = static_cast<T*>(i < kPieces ? p.k_out : p.v_out) + off + piece * kVec;
    *reinterpret_cast<Pack<T, kVec>*>(dst) = load_raw<T, kVec>((i < kPieces ? r.k_new : r.v_new) + piece * kVec);
  }
}

// Issues the cp.async copies of rows [row0, row0 + kRows) into a stage: the K rows, then the V
// rows, each D elements; rows at or past `end` are zero-filled (so masked rows hold no NaN).
// kSwizzle stores 16-byte piece c of row r at c ^ (r % 8), so that ldmatrix's eight rows of one
// piece fall in eight different bank groups.
template <int kRows, int D, bool kSwizzle, class T>
__device__ __forceinline__ void load_stage(T* buf, const Rows<T>& src, int64_t pos_stride, int row0, int end) {
  constexpr int kVec = kVecOf<T>, kPieces = D / kVec, kUnits = 2 * kRows * kPieces;
#pragma unroll
  for (int u = threadIdx.x; u < kUnits; u += kThreads) {
    const int half = u / (kRows * kPieces);  // 0: K, 1: V
    const int r = (u / kPieces) % kRows, piece = u % kPieces;
    const int pos = row0 + r;
    const T* cache = half ? src.v : src.k;
    const T* row = pos == src.new_pos ? (half ? src.v_new : src.k_new) : cache + pos * pos_stride;
    const int slot = kSwizzle ? piece ^ (r % 8) : piece;
    cp_async_16(buf + (half * kRows + r) * D + slot * kVec, pos < end ? row + piece * kVec : cache, pos < end ? 16 : 0);
  }
}

// Merges the CTA's kSlots partial states per head (max, sum in sm_max/sm_sum [kSlots][kHeads],
// weighted V in sm_acc [kSlots][kHeads][D]) in slot order, and writes the output (one split) or
// the split's partial state.
template <class T, int D, int kSlots, int kHeads>
__device__ __forceinline__ void merge_and_store(const DecodeParams& p, const Work& w, bool valid, const float* sm_max,
                                                const float* sm_sum, const float* sm_acc) {
  for (int i = threadIdx.x; i < w.heads * D; i += kThreads) {
    const int j = i / D, d = i % D;
    float mx = -INFINITY;
#pragma unroll
    for (int s = 0; s < kSlots; ++s) mx = fmaxf(mx, sm_max[s * kHeads + j]);
    float sum = 0.f, o = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int s = 0; s < kSlots; ++s) {
        const float wgt = exp2f(sm_max[s * kHeads + j] - mx);
        sum = fmaf(sm_sum[s * kHeads + j], wgt, sum);
        o = fmaf(sm_acc[(s * kHeads + j) * D + d], wgt, o);
      }
    }
    const int64_t row = int64_t{w.b} * p.q_heads + w.h0 + j;
    if (p.splits == 1) {
      const float r = !valid ? NAN : (sum > 0.f ? o / sum : 0.f);
      static_cast<T*>(p.out)[row * D + d] = from_float<T>(r);
    } else {
      const int64_t slot = row * p.splits + w.split;
      p.partials[slot * D + d] = o;
      if (d == 0) {
        p.partial_stats[2 * slot] = mx;
        p.partial_stats[2 * slot + 1] = sum;
      }
    }
  }
}

constexpr int kMaxSplits = 64;  // jaxnorm.decode's workspace bound; the handler enforces it too
constexpr int kCombineThreads = 256;

// Merges the splits of one (sequence, query head). Every load is issued before any is needed:
// warp 0 takes the (max, sum) of all splits at once (two a lane) and leaves each split's weight
// 2^(max_s - max) in shared memory; then thread group j of the CTA sums splits j, j + kGroups, ...
// of four output elements (float4 loads, fully unrolled), and the groups' sums are added in group
// order. The order is fixed, so the result does not depend on timing.
template <class T, int D>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(DecodeParams p) {
  constexpr int kVecs = D / 4, kGroups = kCombineThreads / kVecs, kPerGroup = kMaxSplits / kGroups;
  __shared__ float wgt[kMaxSplits];
  __shared__ float4 acc[kGroups][kVecs];
  __shared__ float total;
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x;
  if (tid < 32) {
    const float* st = p.partial_stats + row * p.splits * 2;
    const int s0 = tid, s1 = tid + 32;
    const float m0 = s0 < p.splits ? st[2 * s0] : -INFINITY, l0 = s0 < p.splits ? st[2 * s0 + 1] : 0.f;
    const float m1 = s1 < p.splits ? st[2 * s1] : -INFINITY, l1 = s1 < p.splits ? st[2 * s1 + 1] : 0.f;
    float mx = fmaxf(m0, m1);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const float base = mx == -INFINITY ? 0.f : mx;  // no state at all: weights 0, output 0
    const float w0 = exp2f(m0 - base), w1 = exp2f(m1 - base);
    if (s0 < p.splits) wgt[s0] = w0;
    if (s1 < p.splits) wgt[s1] = w1;
    float sum = fmaf(l1, w1, l0 * w0);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (tid == 0) total = sum;
  }
  __syncthreads();
  const int j = tid / kVecs, c = tid % kVecs;
  const float4* part = reinterpret_cast<const float4*>(p.partials + row * p.splits * D) + c;
  float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int i = 0; i < kPerGroup; ++i) {
    const int s = j + i * kGroups;
    if (s < p.splits) {
      const float4 v = part[int64_t{s} * kVecs];
      const float w = wgt[s];
      a.x = fmaf(v.x, w, a.x);
      a.y = fmaf(v.y, w, a.y);
      a.z = fmaf(v.z, w, a.z);
      a.w = fmaf(v.w, w, a.w);
    }
  }
  acc[j][c] = a;
  __syncthreads();
  if (tid >= kVecs) return;
  float4 r = acc[0][c];
#pragma unroll
  for (int g = 1; g < kGroups; ++g) {
    r.x += acc[g][c].x;
    r.y += acc[g][c].y;
    r.z += acc[g][c].z;
    r.w += acc[g][c].w;
  }
  const bool valid = length_valid(p, p.lengths[row / p.q_heads]);
  const float inv = total > 0.f ? 1.f / total : 0.f;
  T* out = static_cast<T*>(p.out) + row * D + 4 * c;
  out[0] = from_float<T>(valid ? r.x * inv : NAN);
  out[1] = from_float<T>(valid ? r.y * inv : NAN);
  out[2] = from_float<T>(valid ? r.z * inv : NAN);
  out[3] = from_float<T>(valid ? r.w * inv : NAN);
}

}  // namespace decode
}  // namespace jaxnorm

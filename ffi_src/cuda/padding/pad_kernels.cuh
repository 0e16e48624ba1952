// Padding removal kernels: the maps from the lengths (a prefix sum every CTA recomputes in shared
// memory, so one launch does everything), and the copies between the padded layout (B, H, L, D)
// and the packed rows (T, P * H * D).
//
// A copy moves head_dim segments in units of up to 16 bytes, one unit per thread: a padded
// segment is written as zeros by the same store (no memset), a packed row past the token count
// likewise. The copies read only what they write (no atomics), so results are exact.
#pragma once

#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "common/signatures.h"
#include "cuda/device_types.cuh"
#include "cuda/divisor.h"

namespace jaxnorm {
namespace padding {

constexpr int kThreads = 256;
constexpr int kOffsetsThreads = 1024;

// ---- the maps ----

// Every CTA scans the lengths into shared memory (batch + 1 unclamped prefix sums), then fills
// its share of position (B * L entries) and source (T entries).
__global__ void __launch_bounds__(kOffsetsThreads) offsets_kernel(PadOffsetsArgs a) {
  extern __shared__ int32_t s_start[];
  using Scan = cub::BlockScan<int32_t, kOffsetsThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  const int batch = static_cast<int>(a.batch), max_len = static_cast<int>(a.max_len);
  const int capacity = static_cast<int>(a.capacity);
  int32_t carry = 0;
  for (int base = 0; base < batch; base += kOffsetsThreads) {
    const int b = base + threadIdx.x;
    const int32_t len = b < batch ? min(max(a.lengths[b], 0), max_len) : 0;
    int32_t before, total;
    Scan(scan_tmp).ExclusiveSum(len, before, total);
    if (b < batch) s_start[b] = carry + before;
    carry += total;
    __syncthreads();  // scan_tmp is reused
  }
  if (threadIdx.x == 0) s_start[batch] = carry;
  __syncthreads();
  const int kept = min(carry, capacity);
  if (blockIdx.x == 0) {
    for (int b = threadIdx.x; b < batch; b += kOffsetsThreads) a.starts[b] = min(s_start[b], capacity);
    if (threadIdx.x == 0) {
      a.counts[0] = kept;
      a.counts[1] = carry - kept;
    }
  }
  const int stride = gridDim.x * kOffsetsThreads;
  const int first = blockIdx.x * kOffsetsThreads + threadIdx.x;
  for (int e = first; e < batch * max_len; e += stride) {
    const int b = e / max_len, t = e - b * max_len;
    const int row = s_start[b] + t;
    a.position[e] = t < s_start[b + 1] - s_start[b] && row < capacity ? row : -1;
  }
  for (int r = first; r < capacity; r += stride) {
    int src = -1;
    if (r < kept) {  // the last sequence starting at or before r (a non-empty one, since r < kept)
      int lo = 0, hi = batch;  // s_start[lo] <= r < s_start[hi]
      while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (s_start[mid] <= r) lo = mid; else hi = mid;
      }
      src = lo * max_len + (r - s_start[lo]);
    }
    a.source[r] = src;
  }
}

// ---- the copies ----

// The memory unit of a copy without arithmetic: `bytes` bytes in one access.
template <int kBytes>
struct Word;
template <> struct Word<16> { using type = uint4; };
template <> struct Word<8> { using type = uint2; };
template <> struct Word<4> { using type = uint32_t; };
template <> struct Word<2> { using type = uint16_t; };
template <> struct Word<1> { using type = uint8_t; };

// A copy's unit moved as is.
template <int kBytes>
struct Move {
  using Unit = typename Word<kBytes>::type;
  __device__ __forceinline__ static Unit apply(Unit v, const float*, int64_t) { return v; }
};

// A unit of N elements of T with the bias of its columns added in float. The bias columns of a
// unit start at a multiple of N floats, so for N % 4 == 0 they are read as float4s.
template <class T, int N>
struct AddBias {
  using Unit = Pack<T, N>;
  __device__ __forceinline__ static Unit apply(Unit v, const float* bias, int64_t unit_col) {
    float b[N];
    if constexpr (N % 4 == 0) {
      const float4* b4 = reinterpret_cast<const float4*>(bias + unit_col * N);
#pragma unroll
      for (int j = 0; j < N / 4; ++j) {
        const float4 f = __ldg(b4 + j);
        b[4 * j] = f.x, b[4 * j + 1] = f.y, b[4 * j + 2] = f.z, b[4 * j + 3] = f.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) b[i] = __ldg(bias + unit_col * N + i);
    }
    Unit out;
#pragma unroll
    for (int i = 0; i < N; ++i) out.v[i] = from_float<T>(to_float(v.v[i]) + b[i]);
    return out;
  }
};

// n = q * d + r.
template <class I>
__device__ __forceinline__ I divmod(const Divisor<I>& d, I n, I* r) {
  const I q = d.div(n);
  *r = n - q * d.d;
  return q;
}

// Dimensions of a copy counted in units; I is the index type (32-bit when the counts fit).
template <class I>
struct UnitLayout {
  Divisor<I> units;             // per head_dim segment
  Divisor<I> heads;             // H
  Divisor<I> max_len;           // L
  Divisor<I> segments_per_row;  // P * H: segments of a packed row
  // Map values at or past this (the packed rows T for position, B * L for source) are read as
  // padding, as negative ones are: a PaddingOffsets built by hand must not send a read out of
  // bounds.
  int64_t map_bound;
};

// Units a thread moves: all its loads are issued before its stores, so each thread keeps
// kUnroll * 16 bytes in flight.
constexpr int kUnroll = 4;

// This thread's kUnroll units from `first`, kThreads apart: load(i) each, then store(i, unit) each.
template <class Unit, class I, class Load, class Store>
__device__ __forceinline__ void move_units(I first, I total, Load load, Store store) {
  Unit v[kUnroll];
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    const I i = first + static_cast<I>(j * kThreads);
    v[j] = i < total ? load(i) : Unit{};
  }
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    const I i = first + static_cast<I>(j * kThreads);
    if (i < total) store(i, v[j]);
  }
}

// packed (T, P*H*D) -> P parts (B, H, L, D); part p = blockIdx.y.
template <class Op, class I>
__global__ void __launch_bounds__(kThreads)
unpack_kernel(const typename Op::Unit* __restrict__ packed, const float* __restrict__ bias,
              const int32_t* __restrict__ position, typename Op::Unit* out0, typename Op::Unit* out1,
              typename Op::Unit* out2, UnitLayout<I> d, I total) {
  using Unit = typename Op::Unit;
  const int p = blockIdx.y;
  Unit* out = p == 0 ? out0 : p == 1 ? out1 : out2;
  const I first = static_cast<I>(blockIdx.x) * (kThreads * kUnroll) + threadIdx.x;
  auto load = [&](I i) {
    I u, t, h;
    const I seg = divmod(d.units, i, &u);
    const I bh = divmod(d.max_len, seg, &t);
    const I b = divmod(d.heads, bh, &h);
    const int32_t row = __ldg(position + b * d.max_len.d + t);
    if (row < 0 || row >= d.map_bound) return Unit{};
    const int64_t col = (static_cast<int64_t>(p) * d.heads.d + h) * d.units.d + u;
    return Op::apply(packed[static_cast<int64_t>(row) * d.segments_per_row.d * d.units.d + col], bias, col);
  };
  move_units<Unit>(first, total, load, [&](I i, const Unit& v) { out[i] = v; });
}

// P parts (B, H, L, D) -> packed (T, P*H*D).
template <class Unit, class I>
__global__ void __launch_bounds__(kThreads)
pack_kernel(const Unit* __restrict__ in0, const Unit* __restrict__ in1, const Unit* __restrict__ in2,
            const int32_t* __restrict__ source, Unit* __restrict__ packed, UnitLayout<I> d, I total) {
  const I first = static_cast<I>(blockIdx.x) * (kThreads * kUnroll) + threadIdx.x;
  auto load = [&](I i) {
    I u, ph, h, t;
    const I seg = divmod(d.units, i, &u);
    const I row = divmod(d.segments_per_row, seg, &ph);
    const I p = divmod(d.heads, ph, &h);
    const int32_t src = __ldg(source + row);
    if (src < 0 || src >= d.map_bound) return Unit{};
    const I b = divmod(d.max_len, static_cast<I>(src), &t);
    const Unit* in = p == 0 ? in0 : p == 1 ? in1 : in2;
    return in[((static_cast<int64_t>(b) * d.heads.d + h) * d.max_len.d + t) * d.units.d + u];
  };
  move_units<Unit>(first, total, load, [&](I i, const Unit& v) { packed[i] = v; });
}

}  // namespace padding
}  // namespace jaxnorm

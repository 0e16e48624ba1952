// Device storage types, float conversions and 16-byte packs.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/smem_addr.cuh"

namespace jaxnorm {

struct CudaTypes {
  using f32 = float;
  using bf16 = __nv_bfloat16;
  using f16 = __half;
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

constexpr float kLog2e = 1.4426950408889634f;

// 2^a by the hardware's approximation: a few instructions where expf takes about ten, relative
// error ~2^-22, results below float's normal range flushed to 0. For exps whose results are
// rounded to 16 bits or summed against larger terms.
__device__ __forceinline__ float ex2_approx(float a) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(a));
  return e;
}

// log2(a) likewise (lg2.approx.ftz): for normal arguments the same result as __logf's lg2 without
// its subnormal fixup.
__device__ __forceinline__ float lg2_approx(float a) {
  float l;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(l) : "f"(a));
  return l;
}

// Elements of T per 16-byte access: the widest load a thread can issue.
template <class T>
constexpr int kVecOf = 16 / sizeof(T);

// N elements accessed together; aligned to their size up to 16 bytes (wider packs, such as 8
// floats of scale for a bfloat16 pack, become several 16-byte accesses).
template <class T, int N>
struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) Pack {
  T v[N];
};

template <class T, int N>
__device__ __forceinline__ void unpack(const Pack<T, N>& pk, float (&out)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_float(pk.v[i]);
}

// Element i of a row's pack, held as floats or as loaded; element_again() converts a held 16-bit
// element by other instructions than element() and unpack_again() (see there).
template <int N>
__device__ __forceinline__ float element(const float (&v)[N], int i) { return v[i]; }
template <class T, int N>
__device__ __forceinline__ float element(const Pack<T, N>& pk, int i) { return to_float(pk.v[i]); }
template <int N>
__device__ __forceinline__ float element_again(const float (&v)[N], int i) { return v[i]; }
template <class T, int N>
__device__ __forceinline__ float element_again(const Pack<T, N>& pk, int i) {
  if constexpr (std::is_same_v<T, __nv_bfloat16> && N % 2 == 0) {
    const uint32_t w = reinterpret_cast<const uint32_t*>(&pk)[i / 2];
    uint32_t f;
    if (i % 2 == 0) {
      asm("shl.b32 %0, %1, 16;" : "=r"(f) : "r"(w));
    } else {
      asm("and.b32 %0, %1, 0xffff0000;" : "=r"(f) : "r"(w));
    }
    return __uint_as_float(f);
  } else if constexpr (std::is_same_v<T, __half>) {
    float f;
    asm volatile("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(__half_as_ushort(pk.v[i])));
    return f;
  } else {
    return to_float(pk.v[i]);
  }
}

// The largest element of a thread's held packs (those p with in(p)), NaN skipped as fmaxf does
// (which zero is the max may differ; every use of it is a difference an exp or a sum absorbs):
// 16-bit pairs by one packed max (HMNMX2) before any conversion, a quarter of converting and
// comparing each element. On the pairs as 32-bit words: a __nv_bfloat162 accumulator was split
// into halves and repacked around each pack's check (four moves a pack).
template <class T, int N, int P, class In>
__device__ __forceinline__ float held_max(const Pack<T, N> (&raw)[P], In in) {
  if constexpr (sizeof(T) == 2 && N % 2 == 0) {
    constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
    uint32_t m = kBf16 ? 0xff80ff80u : 0xfc00fc00u;  // two -inf
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (in(p))
#pragma unroll
        for (int i = 0; i < N / 2; ++i) {
          const uint32_t w = reinterpret_cast<const uint32_t*>(&raw[p])[i];
          if constexpr (kBf16) asm("max.bf16x2 %0, %1, %2;" : "=r"(m) : "r"(m), "r"(w));
          else asm("max.f16x2 %0, %1, %2;" : "=r"(m) : "r"(m), "r"(w));
        }
    Pack<T, 2> pair;
    *reinterpret_cast<uint32_t*>(&pair) = m;
    return fmaxf(to_float(pair.v[0]), to_float(pair.v[1]));
  } else {
    float m = -INFINITY;
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (in(p))
#pragma unroll
        for (int i = 0; i < N; ++i) m = fmaxf(m, element_again(raw[p], i));
    return m;
  }
}

// N consecutive elements starting at p (aligned to N * sizeof(T)), as stored.
template <class T, int N>
__device__ __forceinline__ Pack<T, N> load_raw(const T* p) {
  return *reinterpret_cast<const Pack<T, N>*>(p);
}

// load_raw() through the read-only (non-coherent) data path, for data no thread of the kernel
// writes: the compiler may then issue it before earlier stores.
template <class T, int N>
__device__ __forceinline__ Pack<T, N> load_raw_nc(const T* p) {
  Pack<T, N> pk;
  if constexpr (sizeof(Pack<T, N>) % 16 == 0) {
    const uint4* src = reinterpret_cast<const uint4*>(p);
    uint4* dst = reinterpret_cast<uint4*>(&pk);
#pragma unroll
    for (int i = 0; i < static_cast<int>(sizeof(Pack<T, N>) / 16); ++i) dst[i] = __ldg(src + i);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) pk.v[i] = __ldg(p + i);
  }
  return pk;
}

// The same as floats.
template <class T, int N>
__device__ __forceinline__ void load_pack(const T* p, float (&out)[N]) {
  unpack(load_raw<T, N>(p), out);
}

// unpack() again, by instructions the compiler cannot match to unpack()'s: a kernel that holds a
// 16-bit row as loaded (half the registers of floats) and converts it twice would otherwise get
// the first floats kept live, which is what holding the pack is meant to save.
template <class T, int N>
__device__ __forceinline__ void unpack_again(const Pack<T, N>& pk, float (&out)[N]) {
  if constexpr (sizeof(T) == 2 && N % 2 == 0) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&pk);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        // A bfloat16 is the high half of its float: byte-permute each half into place.
        uint32_t lo, hi;
        asm("prmt.b32 %0, %1, 0, 0x1044;" : "=r"(lo) : "r"(w[i]));
        asm("prmt.b32 %0, %1, 0, 0x3244;" : "=r"(hi) : "r"(w[i]));
        out[2 * i] = __uint_as_float(lo);
        out[2 * i + 1] = __uint_as_float(hi);
      } else {
        uint16_t lo, hi;
        float flo, fhi;
        asm volatile("mov.b32 {%0, %1}, %2;" : "=h"(lo), "=h"(hi) : "r"(w[i]));
        asm volatile("cvt.f32.f16 %0, %1;" : "=f"(flo) : "h"(lo));
        asm volatile("cvt.f32.f16 %0, %1;" : "=f"(fhi) : "h"(hi));
        out[2 * i] = flo;
        out[2 * i + 1] = fhi;
      }
    }
  } else {
    unpack(pk, out);
  }
}

// N floats rounded to T as a pack, 16-bit pairs by one conversion into a 32-bit word: element
// by element, a pack built in registers was split into 16-bit halves and merged again.
template <class T, int N>
__device__ __forceinline__ Pack<T, N> pack_rounded(const float (&in)[N]) {
  Pack<T, N> pk;
  if constexpr (sizeof(T) == 2 && N % 2 == 0) {
    uint32_t* w = reinterpret_cast<uint32_t*>(&pk);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        const __nv_bfloat162 pair = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
        w[i] = *reinterpret_cast<const uint32_t*>(&pair);
      } else {
        const __half2 pair = __floats2half2_rn(in[2 * i], in[2 * i + 1]);
        w[i] = *reinterpret_cast<const uint32_t*>(&pair);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) pk.v[i] = from_float<T>(in[i]);
  }
  return pk;
}

template <class T, int N>
__device__ __forceinline__ void store_pack(T* p, const float (&in)[N]) {
  Pack<T, N> pk;
#pragma unroll
  for (int i = 0; i < N; ++i) pk.v[i] = from_float<T>(in[i]);
  *reinterpret_cast<Pack<T, N>*>(p) = pk;
}

// Split packs: a 16-bit pack of 8 columns read and written as two 4-column halves 128 columns
// apart. The packs of a warp covering 256 consecutive columns then hold columns 4l..4l+3 and
// 128+4l..128+4l+3 in lane l, so each half's float32 parameters (16 bytes a lane) are contiguous
// across the warp; whole packs put a lane's 32 bytes of parameters at a 32-byte stride, and each
// 16-byte load touches twice the sectors it uses. `col` below is the first half's column. Valid
// where every 256-column segment of the row is whole: the halves permute the segment's packs.
constexpr int kSplitGap = 128;

// Rows are split from this width: at 1024-4096 columns split packs measured no faster
// (results/h100-rows.md, v15).
constexpr long long kSplitPackCols = 16384;

template <class T, int N>
__device__ __forceinline__ Pack<T, N> load_raw_split(const T* p, bool split) {
  if constexpr (N % 2 == 0) {
    if (split) {
      const Pack<T, N / 2> a = load_raw<T, N / 2>(p), b = load_raw<T, N / 2>(p + kSplitGap);
      Pack<T, N> pk;
#pragma unroll
      for (int i = 0; i < N / 2; ++i) {
        pk.v[i] = a.v[i];
        pk.v[N / 2 + i] = b.v[i];
      }
      return pk;
    }
  }
  return load_raw<T, N>(p);
}

template <class T, int N>
__device__ __forceinline__ void load_pack_split(const T* p, bool split, float (&out)[N]) {
  unpack(load_raw_split<T, N>(p, split), out);
}

template <class T, int N>
__device__ __forceinline__ void store_pack_split(T* p, bool split, const float (&in)[N]) {
  if constexpr (N % 2 == 0) {
    if (split) {
      float a[N / 2], b[N / 2];
#pragma unroll
      for (int i = 0; i < N / 2; ++i) {
        a[i] = in[i];
        b[i] = in[N / 2 + i];
      }
      store_pack<T, N / 2>(p, a);
      store_pack<T, N / 2>(p + kSplitGap, b);
      return;
    }
  }
  store_pack<T, N>(p, in);
}

template <int N>
__device__ __forceinline__ void load_mask(const bool* p, bool (&out)[N]) {
  const Pack<bool, N> pk = *reinterpret_cast<const Pack<bool, N>*>(p);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = pk.v[i];
}

// Part `part` of `parts` of rows [row0, row0 + nrows) of a row-major (rows, cols) array, fetched
// into L2 by the bulk-copy engine while the caller works on other rows: no registers and no wait,
// so the next row's DRAM reads overlap this row's reduction and stores (Hopper). Only whole
// 16-byte units inside the range are requested, so any alignment is safe.
template <class T>
__device__ __forceinline__ void prefetch_l2_rows(const T* base, int64_t row0, int64_t nrows, int64_t cols, int part,
                                                 int parts) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (base == nullptr || nrows <= 0) return;
  const int64_t total = nrows * cols * static_cast<int64_t>(sizeof(T));
  const int64_t chunk = (total + parts - 1) / parts;
  const uintptr_t start = reinterpret_cast<uintptr_t>(base + row0 * cols);
  const uintptr_t lo = (start + min(total, part * chunk) + 15) & ~uintptr_t{15};
  const uintptr_t hi = (start + min(total, (part + 1) * chunk)) & ~uintptr_t{15};
  if (hi > lo) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(lo), "r"(static_cast<uint32_t>(hi - lo)));
#endif
}

// 16 bytes copied global -> shared without passing through registers (Ampere+): loads stay in
// flight while the thread works on earlier data. `bytes` < 16 zero-fills the rest (0: all zeros,
// nothing read). The memory clobbers keep the compiler from moving this thread's own shared-memory
// accesses across the copy or the wait: a thread may read what it copied with no barrier between.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace jaxnorm

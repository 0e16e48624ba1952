// Device storage types, float conversions and 16-byte packs.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

// Elements of T per 16-byte access: the widest load a thread can issue.
template <class T>
constexpr int kVecOf = 16 / sizeof(T);

// N elements accessed together; aligned to their size up to 16 bytes (wider packs, such as 8
// floats of scale for a bfloat16 pack, become several 16-byte accesses).
template <class T, int N>
struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) Pack {
  T v[N];
};

// N consecutive elements starting at p (aligned to N * sizeof(T)) as floats.
template <class T, int N>
__device__ __forceinline__ void load_pack(const T* p, float (&out)[N]) {
  const Pack<T, N> pk = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_float(pk.v[i]);
}

template <class T, int N>
__device__ __forceinline__ void store_pack(T* p, const float (&in)[N]) {
  Pack<T, N> pk;
#pragma unroll
  for (int i = 0; i < N; ++i) pk.v[i] = from_float<T>(in[i]);
  *reinterpret_cast<Pack<T, N>*>(p) = pk;
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

}  // namespace jaxnorm

// Device storage types, float conversions and 16-byte packs.
#pragma once

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

}  // namespace jaxnorm

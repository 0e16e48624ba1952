// bfloat16 / float16 storage types for the CPU handlers, with float conversions that round to
// nearest even like XLA's, so CPU results match jnp's casts bit for bit.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

// Always inlined: a call from a row function compiled for AVX2 (cpu/vec_math.h) would run
// baseline code.
#define JN_HOST_INLINE inline __attribute__((always_inline))

namespace jaxnorm {

struct HostBF16 {
  uint16_t bits;
};
struct HostF16 {
  uint16_t bits;
};

JN_HOST_INLINE float to_float(float v) { return v; }
JN_HOST_INLINE float to_float(HostBF16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
JN_HOST_INLINE float to_float(HostF16 v) {
  const uint32_t sign = (v.bits & 0x8000u) << 16;
  uint32_t exp = (v.bits >> 10) & 0x1f;
  uint32_t man = v.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);  // inf / nan
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else {  // subnormal: renormalize
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    u = sign | ((112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <class T>
JN_HOST_INLINE T from_float(float f);

template <>
JN_HOST_INLINE float from_float<float>(float f) { return f; }

// Rounded to nearest even; a NaN keeps its sign and top payload bits and is made quiet. Both
// cases are formed in 32 bits and selected by f != f before the one shift, which the vectorizer
// turns into a float compare and a blend ahead of a single pack (the NaN test on the integer
// bits, with its own shift, cost a second pack and a byte blend: twice the instructions).
template <>
JN_HOST_INLINE HostBF16 from_float<HostBF16>(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  const uint32_t v = f != f ? (u | 0x00400000u) : rounded;
  return {static_cast<uint16_t>(v >> 16)};
}

template <>
JN_HOST_INLINE HostF16 from_float<HostF16>(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return {static_cast<uint16_t>(sign | 0x7e00u)};  // NaN
  if (u >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (u < 0x38800000u) {  // subnormal or zero in half: round the value * 2^24 to nearest even
    float a;
    std::memcpy(&a, &u, 4);
    float scaled = a * 16777216.0f;  // exact: power of two
    uint32_t q = static_cast<uint32_t>(scaled);
    float rem = scaled - static_cast<float>(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
    return {static_cast<uint16_t>(sign | q)};
  }
  // normal: rebias the exponent and round the mantissa to 10 bits, nearest even
  uint32_t rounded = u + 0xfffu + ((u >> 13) & 1u);
  uint32_t h = ((rounded >> 13) - (112u << 10));
  return {static_cast<uint16_t>(sign | h)};
}

// A row's worth of floats in this thread's buffer `slot` (0 to 3; a row function's buffers take
// different slots), kept for the thread's later calls and grown when a longer row comes.
// Allocated per chunk, the buffers cost a zeroed malloc each time: for rows of 64K floats an
// mmap and 64 page faults per row.
inline float* row_scratch(int slot, int64_t n) {
  thread_local std::vector<float> bufs[4];
  std::vector<float>& b = bufs[slot];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}

// Rows of T read as floats: a float row as it is, a 16-bit row converted into a buffer first
// (row_scratch slot `slot`), so that the row loops and block sums read plain floats. Widening
// 16-bit loads inside them defeat the vectorizer (the bfloat16 softmax backward ran 4x slower
// than float32's).
template <class T>
class FloatRows {
 public:
  FloatRows(int64_t cols, int slot) : cols_(cols), buf_(std::is_same_v<T, float> ? nullptr : row_scratch(slot, cols)) {}
  JN_HOST_INLINE const float* operator()(const T* row) {
    if constexpr (std::is_same_v<T, float>) {
      return row;
    } else {
      float* b = buf_;
      for (int64_t c = 0; c < cols_; ++c) b[c] = to_float(row[c]);
      return b;
    }
  }

 private:
  int64_t cols_;
  float* buf_;
};

struct CpuTypes {
  using f32 = float;
  using bf16 = HostBF16;
  using f16 = HostF16;
};

}  // namespace jaxnorm

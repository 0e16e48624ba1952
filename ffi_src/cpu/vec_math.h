// Row math the compiler vectorizes: a branch-free exp, a lane-parallel max, and sums in float
// lanes whose blocks are added in double. JN_CPU_CLONES compiles a row function twice on x86-64,
// for AVX2 + FMA (x86-64-v3) and for the baseline, and the loader picks one for the machine
// (never -march=native: a distributed build must run on any x86-64). Linux/GCC only (ifunc). Everything a cloned function
// calls must be inlined into it (JN_VEC_INLINE): a call leaves the clone for baseline code.
// The selects vectorize only without trapping math (CMakeLists: -fno-trapping-math).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)  // ifunc: ELF
#define JN_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define JN_CPU_CLONES
#endif
#define JN_VEC_INLINE inline __attribute__((always_inline))

namespace jaxnorm {

JN_VEC_INLINE float bits_float(int32_t i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}

// exp(x) for every float x within 2 ulp (Cephes' degree-5 polynomial on [-ln2/2, ln2/2]); NaN
// stays NaN, -inf gives 0, +inf and overflow give inf, results below the normal range are
// subnormal (2^n is applied in two halves). No branches, so loops over it vectorize.
JN_VEC_INLINE float exp_vec(float x) {
  const float xc = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);
  // n = round(x / ln2) by the 1.5 * 2^23 trick (nearest even; no libm call, vectorizes).
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t half = ni / 2;
  const float y = p * bits_float((half + 127) << 23) * bits_float((ni - half + 127) << 23);
  const float big = x > 88.7228394f ? INFINITY : y;
  return x != x ? x : big;
}

// K sums at once, in one pass over [0, n): term(c) returns the K terms of position c as a
// std::array<float, K>. 16 float lanes per sum over blocks of 512 positions, each block's total
// added in double. Vectorizes; the order is fixed by n alone (reproducible); the error is that
// of ~32-term float sums plus a double sum of blocks, so float lanes stay as accurate as the
// suite needs while keeping the full SIMD width (a double accumulator halves it).
template <int K, class Term>
JN_VEC_INLINE std::array<double, K> block_sums(int64_t n, const Term& term) {
  constexpr int kLanes = 16, kBlock = 512;
  std::array<double, K> total{};
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = b + kBlock < n ? b + kBlock : n;
    float acc[K][kLanes] = {};
    int64_t c = b;
    for (; c + kLanes <= e; c += kLanes) {
      for (int j = 0; j < kLanes; ++j) {
        const std::array<float, K> t = term(c + j);
        for (int k = 0; k < K; ++k) acc[k][j] += t[k];
      }
    }
    for (; c < e; ++c) {
      const std::array<float, K> t = term(c);
      for (int k = 0; k < K; ++k) acc[k][0] += t[k];
    }
    for (int k = 0; k < K; ++k) {
      for (int w = kLanes / 2; w > 0; w /= 2) {
        for (int j = 0; j < w; ++j) acc[k][j] += acc[k][j + w];
      }
      total[k] += acc[k][0];
    }
  }
  return total;
}

template <class Term>
JN_VEC_INLINE double block_sum(int64_t n, const Term& term) {
  return block_sums<1>(n, [&](int64_t c) { return std::array<float, 1>{term(c)}; })[0];
}

// max of term(c) over [0, n) (-inf when n == 0), NaN when any term is NaN: two 8-float vector
// lanes (GCC/Clang vector extensions: max and NaN tests per lane, no serial compare chain).
template <class Term>
JN_VEC_INLINE float lane_max(int64_t n, const Term& term) {
  typedef float v8f __attribute__((vector_size(32)));
  typedef int32_t v8i __attribute__((vector_size(32)));
  v8f acc0 = {}, acc1 = {};
  acc0 -= INFINITY;
  acc1 -= INFINITY;
  v8i bad = {};
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    v8f a, b;
    for (int j = 0; j < 8; ++j) {
      a[j] = term(c + j);
      b[j] = term(c + 8 + j);
    }
    acc0 = a > acc0 ? a : acc0;
    acc1 = b > acc1 ? b : acc1;
    bad |= (a != a) | (b != b);
  }
  float m = -INFINITY;
  int32_t any = 0;
  for (int j = 0; j < 8; ++j) {
    m = acc0[j] > m ? acc0[j] : m;
    m = acc1[j] > m ? acc1[j] : m;
    any |= bad[j];
  }
  for (; c < n; ++c) {
    const float v = term(c);
    m = v > m ? v : m;
    any |= v != v;
  }
  return any ? NAN : m;
}

}  // namespace jaxnorm

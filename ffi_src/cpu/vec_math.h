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

// exp(xc) as p * 2^n: n = round(xc / ln2), p = exp(xc - n ln2) by Cephes' degree-5 polynomial
// on [-ln2/2, ln2/2]. For |xc| <= 104; a NaN xc gives a NaN p.
struct ExpParts {
  float p;
  int32_t n;
};
JN_VEC_INLINE ExpParts exp_parts(float xc) {
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
  return {p * r * r + r + 1.0f, static_cast<int32_t>(n)};
}

// 2^e for e in [-127, 128] from the exponent field (2^-127 reads as 0, 2^128 as inf).
JN_VEC_INLINE float pow2_field(int32_t e) { return bits_float(static_cast<int32_t>(static_cast<uint32_t>(e + 127) << 23)); }

// exp(x) for every float x within 2 ulp; NaN stays NaN, -inf gives 0, +inf and overflow give
// inf, results below the normal range are subnormal (2^n is applied in two halves). No
// branches, so loops over it vectorize.
JN_VEC_INLINE float exp_vec(float x) {
  const ExpParts e = exp_parts(x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x));
  const int32_t half = e.n / 2;
  const float y = e.p * pow2_field(half) * pow2_field(e.n - half);
  const float big = x > 88.7228394f ? INFINITY : y;
  return x != x ? x : big;
}

// exp(x) for x <= 0 or NaN (softmax's x - max; log-softmax's outputs), in about half
// exp_vec's instructions: no overflow handling, one power of two, and results below float's
// normal range (x < -87.3) flushed to 0 or rounded once, at most 2^-126 off where a softmax
// sum is at least 1. -inf gives 0 (x is clamped to -88, where n = -127 and 2^n reads as 0);
// NaN stays NaN through the polynomial. The same values as exp_vec wherever those are normal.
JN_VEC_INLINE float exp_nonpos(float x) {
  const ExpParts e = exp_parts(x < -88.0f ? -88.0f : x);
  return e.p * pow2_field(e.n);
}

typedef float v8f __attribute__((vector_size(32)));  // GCC/Clang vector extensions
typedef int32_t v8i __attribute__((vector_size(32)));

JN_VEC_INLINE v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

constexpr int kTermBlock = 512;

// Calls body(buf, b, w) for each block [b, b + w) of up to kTermBlock positions of [0, n), with
// buf[k][i] = term(b + i)[k] (term returns a std::array<float, K>). The terms are written by a
// plain loop, which the vectorizer handles whatever the term (exp included); the reductions
// then read the buffer in vector registers. Reducing inside the term loop left the lanes in
// memory (a store-to-load chain per iteration) or built vectors element by element.
template <int K, class Term, class Body>
JN_VEC_INLINE void for_each_term_block(int64_t n, const Term& term, const Body& body) {
  alignas(32) float buf[K][kTermBlock];
  for (int64_t b = 0; b < n; b += kTermBlock) {
    const int w = static_cast<int>(b + kTermBlock < n ? kTermBlock : n - b);
    for (int i = 0; i < w; ++i) {
      const std::array<float, K> t = term(b + i);
      for (int k = 0; k < K; ++k) buf[k][i] = t[k];
    }
    body(buf, w);
  }
}

// K sums at once, in one pass over [0, n): term(c) returns the K terms of position c as a
// std::array<float, K>. 16 float lanes per sum over blocks of 512 positions (lane j takes
// positions j, j + 16, ...; a tail shorter than 16 goes to lane 0), each block's lanes added
// pairwise and its total in double: the order is fixed by n alone (reproducible), the error that
// of ~32-term float sums plus a double sum of blocks, and the float lanes keep the full SIMD
// width (a double accumulator halves it).
template <int K, class Term>
JN_VEC_INLINE std::array<double, K> block_sums(int64_t n, const Term& term) {
  std::array<double, K> total{};
  for_each_term_block<K>(n, term, [&](const float (*buf)[kTermBlock], int w) {
    const int full = w / 16 * 16;
    for (int k = 0; k < K; ++k) {
      v8f a0 = {}, a1 = {};
      for (int i = 0; i < full; i += 16) {
        a0 += load8(&buf[k][i]);
        a1 += load8(&buf[k][i + 8]);
      }
      for (int i = full; i < w; ++i) a0[0] += buf[k][i];
      const v8f s = a0 + a1;  // lanes j + 8 into j, then j + 4, j + 2, j + 1
      const float s4[4] = {s[0] + s[4], s[1] + s[5], s[2] + s[6], s[3] + s[7]};
      total[k] += static_cast<double>((s4[0] + s4[2]) + (s4[1] + s4[3]));
    }
  });
  return total;
}

template <class Term>
JN_VEC_INLINE double block_sum(int64_t n, const Term& term) {
  return block_sums<1>(n, [&](int64_t c) { return std::array<float, 1>{term(c)}; })[0];
}

// Position c of rows of floats, read one position at a time (At1: floats) or eight (At8: v8f).
// A term written as a generic lambda over its reader, term(at) with at(p) = p[c] or the 8 floats
// from p + c, is then evaluated in vector registers as it is summed, with no terms buffer.
struct At1 {
  int64_t c;
  JN_VEC_INLINE float operator()(const float* p) const { return p[c]; }
};
struct At8 {
  int64_t c;
  JN_VEC_INLINE v8f operator()(const float* p) const { return load8(p + c); }
};

// block_sum's order and result for a term over rows of floats (see At1/At8): the same 16
// lanes, blocks and double block totals, the two 8-lane halves loaded and reduced in registers
// (the buffered form's term and sum passes cost about 40% of the norm forward).
template <class Term>
JN_VEC_INLINE double lane_sum(int64_t n, const Term& term) {
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kTermBlock) {
    const int64_t w = b + kTermBlock < n ? kTermBlock : n - b;
    const int64_t full = b + w / 16 * 16;
    v8f a0 = {}, a1 = {};
    for (int64_t i = b; i < full; i += 16) {
      a0 += term(At8{i});
      a1 += term(At8{i + 8});
    }
    for (int64_t i = full; i < b + w; ++i) a0[0] += term(At1{i});
    const v8f s = a0 + a1;
    const float s4[4] = {s[0] + s[4], s[1] + s[5], s[2] + s[6], s[3] + s[7]};
    total += static_cast<double>((s4[0] + s4[2]) + (s4[1] + s4[3]));
  }
  return total;
}

// max of term(c) over [0, n) (-inf when n == 0), NaN when any term is NaN: two 8-float vector
// lanes (max and NaN tests per lane, no serial compare chain).
template <class Term>
JN_VEC_INLINE float lane_max(int64_t n, const Term& term) {
  v8f acc0 = {}, acc1 = {};
  acc0 -= INFINITY;
  acc1 -= INFINITY;
  v8i bad = {};
  float m = -INFINITY;
  int32_t any = 0;
  for_each_term_block<1>(n, [&](int64_t c) { return std::array<float, 1>{term(c)}; },
                         [&](const float (*buf)[kTermBlock], int w) {
                           const int full = w / 16 * 16;
                           for (int i = 0; i < full; i += 16) {
                             const v8f a = load8(&buf[0][i]), b = load8(&buf[0][i + 8]);
                             acc0 = a > acc0 ? a : acc0;
                             acc1 = b > acc1 ? b : acc1;
                             bad |= (a != a) | (b != b);
                           }
                           for (int i = full; i < w; ++i) {
                             const float v = buf[0][i];
                             m = v > m ? v : m;
                             any |= v != v;
                           }
                         });
  for (int j = 0; j < 8; ++j) {
    m = acc0[j] > m ? acc0[j] : m;
    m = acc1[j] > m ? acc1[j] : m;
    any |= bad[j];
  }
  return any ? NAN : m;
}

}  // namespace jaxnorm

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
#include <type_traits>

#if defined(JN_CPU_CLONES)  // given on the command line (-DJN_CPU_CLONES= builds the baseline only)
#elif defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)  // ifunc: ELF
#define JN_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default"), flatten))
#else
#define JN_CPU_CLONES
#endif
#define JN_VEC_INLINE inline __attribute__((always_inline))

namespace jaxnorm {

typedef float v8f __attribute__((vector_size(32)));  // GCC/Clang vector extensions
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint8_t v8b __attribute__((vector_size(8)));

// The math below is written once for V = float (one position; loops over it are vectorized by
// the compiler) and V = v8f (eight positions in a vector; the baseline clone runs it as two SSE
// halves), with the same operations in the same order, so both give the same values.
template <class V>
JN_VEC_INLINE V lit(float c) {
  if constexpr (std::is_same_v<V, float>) {
    return c;
  } else {
    return V{} + c;
  }
}
JN_VEC_INLINE int32_t to_int(float n) { return static_cast<int32_t>(n); }
JN_VEC_INLINE v8i to_int(v8f n) { return __builtin_convertvector(n, v8i); }

// m ? a : b, per lane for vectors (m: a bool, or a v8i of 0 / -1).
template <class M, class V>
JN_VEC_INLINE V pick(M m, V a, V b) {
  return m ? a : b;
}

JN_VEC_INLINE float bits_float(int32_t i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}

JN_VEC_INLINE v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// exp(xc) as p * 2^n: n = round(xc / ln2), p = exp(xc - n ln2) by Cephes' degree-5 polynomial
// on [-ln2/2, ln2/2]. For |xc| <= 104; a NaN xc gives a NaN p.
template <class V>
struct ExpParts {
  V p;
  decltype(to_int(V{})) n;
};
template <class V>
JN_VEC_INLINE ExpParts<V> exp_parts(V xc) {
  // n = round(x / ln2) by the 1.5 * 2^23 trick (nearest even; no libm call, vectorizes).
  const V n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  V r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V p = lit<V>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return {p * r * r + r + 1.0f, to_int(n)};
}

// 2^e for e in [-127, 128] from the exponent field (2^-127 reads as 0, 2^128 as inf).
JN_VEC_INLINE float pow2_field(int32_t e) { return bits_float(static_cast<int32_t>(static_cast<uint32_t>(e + 127) << 23)); }
JN_VEC_INLINE v8f pow2_field(v8i e) { return (v8f)((v8u)(e + 127) << 23); }

// exp(x) for every float x within 2 ulp; NaN stays NaN, -inf gives 0, +inf and overflow give
// inf, results below the normal range are subnormal (2^n is applied in two halves). No
// branches, so loops over it vectorize.
template <class V>
JN_VEC_INLINE V exp_vec(V x) {
  const V lo = lit<V>(-104.0f), hi = lit<V>(89.0f);
  const ExpParts<V> e = exp_parts(pick(x < lo, lo, pick(x > hi, hi, x)));
  const auto half = e.n / 2;
  const V y = e.p * pow2_field(half) * pow2_field(e.n - half);
  const V big = pick(x > lit<V>(88.7228394f), lit<V>(INFINITY), y);
  return pick(x != x, x, big);
}

// exp(x) for x <= 0 or NaN (softmax's x - max; log-softmax's outputs), in about half
// exp_vec's instructions: no overflow handling, one power of two, and results below float's
// normal range (x < -87.3) flushed to 0 or rounded once, at most 2^-126 off where a softmax
// sum is at least 1. -inf gives 0 (x is clamped to -88, where n = -127 and 2^n reads as 0);
// NaN stays NaN through the polynomial. The same values as exp_vec wherever those are normal.
template <class V>
JN_VEC_INLINE V exp_nonpos(V x) {
  const V lo = lit<V>(-88.0f);
  const ExpParts<V> e = exp_parts(pick(x < lo, lo, x));
  return e.p * pow2_field(e.n);
}

// Position c of a row, read one position at a time (At1: a float, a bool) or eight (At8: a v8f,
// a v8i mask of 0 / -1). A term written as a generic lambda over its reader, term(at) with
// at(p) = p[c] or the 8 values from p + c, is evaluated in vector registers as it is reduced
// (lane_sum, lane_max), with no terms buffer; at.put(p, v) stores its value(s) at c.
struct At1 {
  using V = float;
  int64_t c;
  JN_VEC_INLINE float operator()(const float* p) const { return p[c]; }
  JN_VEC_INLINE bool operator()(const bool* p) const { return p[c]; }
  JN_VEC_INLINE void put(float* p, float v) const { p[c] = v; }
  static JN_VEC_INLINE bool all() { return true; }
};
struct At8 {
  using V = v8f;
  int64_t c;
  JN_VEC_INLINE v8f operator()(const float* p) const { return load8(p + c); }
  JN_VEC_INLINE v8i operator()(const bool* p) const {
    v8b b;
    std::memcpy(&b, p + c, sizeof b);
    return __builtin_convertvector(b, v8i) != 0;
  }
  JN_VEC_INLINE void put(float* p, v8f v) const { std::memcpy(p + c, &v, sizeof v); }
  static JN_VEC_INLINE v8i all() { return v8i{} == 0; }
};

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

// block_sum's order and result for a term over rows read through At1/At8: the same 16 lanes,
// blocks and double block totals, the two 8-lane halves computed and reduced in registers (the
// buffered form's term and sum passes cost about 40% of the norm forward).
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

// The next row's inputs, fetched into the cache while the current row's last pass runs
// (for_pieces). That pass reads the current row from L1 and writes the output; the hardware
// prefetchers run ahead of demand reads only, so the next row's reads started from memory:
// fetching it during the writes made 1 MiB row ops ~10% faster on 2 cores.
struct NextRow {
  const char* p[3] = {};
  int64_t size[3] = {};  // bytes per position
  int k = 0;
  template <class T>
  JN_VEC_INLINE void add(const T* row) {
    p[k] = reinterpret_cast<const char*>(row);
    size[k++] = sizeof(T);
  }
  JN_VEC_INLINE void fetch(int64_t c0, int64_t c1) const {
    for (int i = 0; i < k; ++i) {
      for (int64_t b = c0 * size[i]; b < c1 * size[i]; b += 64) __builtin_prefetch(p[i] + b);
    }
  }
};

constexpr int64_t kPiece = 64;  // positions of a row pass per group of fetches

// body(c0, w) over [0, n) in pieces [c0, c0 + w), each after fetching the next row's lines for
// the same positions; w is the constant kPiece (a std::integral_constant, so that the piece's
// loop is unrolled with no remainder) but for the last piece.
template <class Body>
JN_VEC_INLINE void for_pieces(int64_t n, const NextRow& next, const Body& body) {
  int64_t c0 = 0;
  for (; c0 + kPiece <= n; c0 += kPiece) {
    next.fetch(c0, c0 + kPiece);
    body(c0, std::integral_constant<int64_t, kPiece>{});
  }
  if (c0 < n) {
    next.fetch(c0, n);
    body(c0, n - c0);
  }
}

// The lanes' maxima merged into the scalar tail's: NaN if any term was.
JN_VEC_INLINE float merge_lane_max(v8f acc0, v8f acc1, v8i bad, float m, int32_t any) {
  for (int j = 0; j < 8; ++j) {
    m = acc0[j] > m ? acc0[j] : m;
    m = acc1[j] > m ? acc1[j] : m;
    any |= bad[j];
  }
  return any ? NAN : m;
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
  return merge_lane_max(acc0, acc1, bad, m, any);
}

// lane_max of a term over rows read through At1/At8 (see lane_sum), computed in registers: the
// buffered form copied a plain row into its buffer first.
template <class Term>
JN_VEC_INLINE float lane_max_at(int64_t n, const Term& term) {
  v8f acc0 = lit<v8f>(-INFINITY), acc1 = acc0;
  v8i bad = {};
  const int64_t full = n / 16 * 16;
  for (int64_t i = 0; i < full; i += 16) {
    const v8f a = term(At8{i}), b = term(At8{i + 8});
    acc0 = a > acc0 ? a : acc0;
    acc1 = b > acc1 ? b : acc1;
    bad |= (a != a) | (b != b);
  }
  float m = -INFINITY;
  int32_t any = 0;
  for (int64_t i = full; i < n; ++i) {
    const float v = term(At1{i});
    m = v > m ? v : m;
    any |= v != v;
  }
  return merge_lane_max(acc0, acc1, bad, m, any);
}

}  // namespace jaxnorm

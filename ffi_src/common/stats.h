// Row statistics and their associative merges, shared by the CPU and CUDA kernels.
//
// Every merge here is written symmetric in its two arguments (a op b == b op a bitwise), so a
// butterfly reduction leaves every lane with the identical value, and the result depends only
// on the fixed reduction tree, never on timing: kernels are bitwise reproducible run to run.
#pragma once

#include <cmath>

#include "common/hd.h"

namespace jaxnorm {

// Each statistic is templated on its accumulation type F: the CUDA kernels accumulate in float
// and merge in a tree; the CPU handlers walk a row sequentially, where a float running mean or
// sum would be rounded once per element, so they accumulate in double.

// ---- Welford / Chan: count, mean and sum of squared deviations (M2) of a set of values ----
template <class F>
struct WelfordT {
  F count;
  F mean;
  F m2;
};
using Welford = WelfordT<float>;

template <class F = float>
JN_HD WelfordT<F> welford_identity() { return {F(0), F(0), F(0)}; }

// The GPU merges these statistics at every level of a butterfly, in every lane of a row: with
// 32 elements a thread, a merge by IEEE division and two expf's (~35 instructions) at 9-10 levels
// were by count most of a bf16 forward's instructions (Nsight Compute: 26 an element at 16384
// columns). On the device the merges use the hardware's reciprocal (refined) and ex2 instead
// (ex2: relative error ~2^-22 a level, inside every result's float32 term tolerance; still
// symmetric, so still bitwise reproducible). The CPU keeps the library calls.
JN_HD float merge_rcp(float n) {
#ifdef __CUDA_ARCH__
  // One Newton step on the approximation: 1/n to within rounding for the counts merged (whole
  // numbers to 2^24), three instructions where the IEEE division takes ten and a slow path.
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(n));
  return fmaf(r, fmaf(-n, r, 1.0f), r);
#else
  return 1.0f / n;
#endif
}

// exp(d) for d <= 0, a rescale factor in (0, 1]; below 2^-126 it is flushed to zero on the
// device, a term under 2^-100 of the sum it joins.
JN_HD float merge_exp(float d) {
#ifdef __CUDA_ARCH__
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(d * 1.4426950408889634f));
  return e;
#else
  return std::exp(d);
#endif
}

// Welford's online update: one pass, no catastrophic cancellation for rows with a large mean.
template <class F>
JN_HD void welford_push(WelfordT<F>& s, F v) {
  s.count += F(1);
  const F delta = v - s.mean;
  s.mean += delta / s.count;
  s.m2 += delta * (v - s.mean);
}

// Chan et al.'s pairwise merge, with one reciprocal. Written symmetric in (a, b) (swapping them
// negates both factors of the correction term, which is exact), and exact when both means are
// equal: the mean is the average of the two means plus delta * (nb - na) / 2n, so a constant row
// keeps its mean exactly and x - mean is exactly zero.
JN_HD Welford welford_merge(Welford a, Welford b) {
  if (a.count == b.count) {
    // A butterfly's common case (threads of equal counts), checked first: n_a n_b / n = n_a / 2
    // exactly, so no reciprocal waits on the merged count. Two empty sets give the identity.
    const float delta = b.mean - a.mean;
    return {a.count + b.count, 0.5f * a.mean + 0.5f * b.mean, (a.m2 + b.m2) + delta * delta * (0.5f * a.count)};
  }
  if (a.count == 0.f) return b;
  if (b.count == 0.f) return a;
  const float n = a.count + b.count;
  const float inv_n = merge_rcp(n);
  const float delta = b.mean - a.mean;
  const float mean = (0.5f * a.mean + 0.5f * b.mean) + delta * ((b.count - a.count) * 0.5f * inv_n);
  const float m2 = (a.m2 + b.m2) + delta * delta * (a.count * b.count * inv_n);
  return {n, mean, m2};
}

// ---- Online softmax normalizer (Milakov & Gimelshein 2018): running max m, d = sum exp(x - m) ----
template <class F>
struct MaxSumT {
  F max;
  F sum;
};
using MaxSum = MaxSumT<float>;

template <class F = float>
JN_HD MaxSumT<F> maxsum_identity() { return {-F(INFINITY), F(0)}; }

// Max that propagates NaN like jnp.max (fmaxf would drop it).
template <class F>
JN_HD F nan_max(F a, F b) { return (a > b || a != a) ? a : b; }

// exp(from - to) rescale factor; a set with no elements (max == -inf) contributes nothing, and
// -inf - -inf must not turn its empty sum into NaN.
template <class F>
JN_HD F maxsum_rescale(F sum, F from_max, F to_max) {
  if constexpr (sizeof(F) == sizeof(float)) {
    return sum == F(0) ? F(0) : sum * merge_exp(from_max - to_max);
  } else {
    return sum == F(0) ? F(0) : sum * exp(from_max - to_max);
  }
}

template <class F>
JN_HD void maxsum_push(MaxSumT<F>& s, F v) {
  const F m = nan_max(s.max, v);
  const F add = (m == -F(INFINITY)) ? F(0) : exp(v - m);
  s.sum = maxsum_rescale(s.sum, s.max, m) + add;
  s.max = m;
}

template <class F>
JN_HD MaxSumT<F> maxsum_merge(MaxSumT<F> a, MaxSumT<F> b) {
  const F m = nan_max(a.max, b.max);
  return {m, maxsum_rescale(a.sum, a.max, m) + maxsum_rescale(b.sum, b.max, m)};
}

// ---- Plain sums (RMSNorm's mean square, the backward's row sums) ----
struct Sum2 {
  float a;
  float b;
};
JN_HD Sum2 sum2_merge(Sum2 x, Sum2 y) { return {x.a + y.a, x.b + y.b}; }
JN_HD float sum_merge(float x, float y) { return x + y; }

}  // namespace jaxnorm

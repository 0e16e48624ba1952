// Row statistics and their associative merges, shared by the CPU and CUDA kernels.
//
// Every merge here is written symmetric in its two arguments (a op b == b op a bitwise), so a
// butterfly reduction leaves every lane with the identical value, and the result depends only
// on the fixed reduction tree, never on timing: kernels are bitwise reproducible run to run.
#pragma once

#include <cmath>

#include "common/hd.h"

namespace jaxnorm {

// ---- Welford / Chan: count, mean and sum of squared deviations (M2) of a set of values ----
struct Welford {
  float count;
  float mean;
  float m2;
};

JN_HD Welford welford_identity() { return {0.f, 0.f, 0.f}; }

// Welford's online update: one pass, no catastrophic cancellation for rows with a large mean.
JN_HD void welford_push(Welford& s, float v) {
  s.count += 1.f;
  const float delta = v - s.mean;
  s.mean += delta / s.count;
  s.m2 += delta * (v - s.mean);
}

// Chan et al.'s pairwise merge. The mean is the count-weighted average (symmetric), and M2 adds
// the between-set term delta^2 * na * nb / n, which is symmetric because delta is squared.
JN_HD Welford welford_merge(Welford a, Welford b) {
  if (a.count == 0.f) return b;
  if (b.count == 0.f) return a;
  const float n = a.count + b.count;
  const float inv_n = 1.0f / n;  // one division per merge: merges dominate a short row's work
  const float delta = b.mean - a.mean;
  const float mean = (a.count * a.mean + b.count * b.mean) * inv_n;
  const float m2 = (a.m2 + b.m2) + delta * delta * (a.count * b.count * inv_n);
  return {n, mean, m2};
}

// ---- Online softmax normalizer (Milakov & Gimelshein 2018): running max m, d = sum exp(x - m) ----
struct MaxSum {
  float max;
  float sum;
};

JN_HD MaxSum maxsum_identity() { return {-INFINITY, 0.f}; }

// Max that propagates NaN like jnp.max (fmaxf would drop it).
JN_HD float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

// exp(from - to) rescale factor; a set with no elements (max == -inf) contributes nothing, and
// -inf - -inf must not turn its empty sum into NaN.
JN_HD float maxsum_rescale(float sum, float from_max, float to_max) {
  return sum == 0.f ? 0.f : sum * expf(from_max - to_max);
}

JN_HD void maxsum_push(MaxSum& s, float v) {
  const float m = nan_max(s.max, v);
  const float add = (m == -INFINITY) ? 0.f : expf(v - m);
  s.sum = maxsum_rescale(s.sum, s.max, m) + add;
  s.max = m;
}

JN_HD MaxSum maxsum_merge(MaxSum a, MaxSum b) {
  const float m = nan_max(a.max, b.max);
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

// Per-element formulas of softmax / log-softmax, shared by the CPU and CUDA kernels.
// Masked positions follow jax.nn: softmax gives 0, log_softmax gives -inf, gradients 0.
#pragma once

#include <cmath>

#include "common/hd.h"

namespace jaxnorm {

// Row constants from the merged (max, sum): for softmax the reciprocal of the sum, for
// log-softmax log(sum). A fully masked row has sum == 0.
struct SoftmaxRow {
  float max;
  float k;  // 1/sum (softmax) or log(sum) (log-softmax)
};

JN_HD SoftmaxRow softmax_row(float max, float sum, bool log) {
  return {max, log ? logf(sum) : 1.0f / sum};
}

JN_HD float softmax_apply(float x, bool keep, SoftmaxRow r, bool log) {
  if (log) return keep ? (x - r.max) - r.k : -INFINITY;
  return keep ? expf(x - r.max) * r.k : 0.f;
}

// Backward row sum term: softmax sums dy*y, log-softmax sums dy (unmasked only).
JN_HD float softmax_bwd_term(float y, float dy, bool keep, bool log) {
  if (!keep) return 0.f;
  return log ? dy : dy * y;
}

JN_HD float softmax_bwd_apply(float y, float dy, bool keep, float s, bool log) {
  if (!keep) return 0.f;
  return log ? dy - expf(y) * s : y * (dy - s);
}

}  // namespace jaxnorm

// Softmax cross-entropy with integer labels, shared by the CPU and CUDA kernels: the row's loss
// from its statistics, and the per-row coefficients of the gradient.
//
// Per row, with the kept classes K (all, or those `where` keeps), lse = log sum_{j in K} exp(x_j),
// n = |K|, y the label and eps the label smoothing:
//   loss = (1 - eps) (lse - x_y) + eps (lse - sum_{j in K} x_j / n) + z_loss lse^2
//   dloss/dx_j = [j in K] p_j (1 + 2 z_loss lse) - (1 - eps) [j = y] - eps [j in K] / n,
//   p_j = exp(x_j - lse).
// The label's logit counts whether or not `where` keeps it (as in optax). A row whose label is
// ignore_index, or with nothing kept, has loss 0 and gradient 0; a label outside [0, cols) gives
// a NaN loss and a NaN gradient row.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/hd.h"

namespace jaxnorm {

// The attributes both targets take.
struct CeOptions {
  float smoothing;
  float z_loss;
  int64_t ignore_index;  // no int32 label equals it when the caller ignores none
  bool has_mask;
};

// The online (max, sum exp(x - max)) pair, plus the sum and count of the kept logits (the
// smoothing term's mean). 32-bit words only: the CUDA reduction shuffles them.
struct CeStats {
  float max;
  float sum;
  float xsum;
  float n;
};

// sum * exp(from - to), where equal maxima (both +inf included) keep the sum as it is: a +inf
// logit gives lse = +inf, as jax.nn.logsumexp does, not NaN.
JN_HD float ce_rescale(float sum, float from, float to) {
  return (sum == 0.f || from == to) ? sum : sum * expf(from - to);
}

// Symmetric in (a, b) bitwise, so a butterfly leaves every lane the same value. The maxima never
// hold NaN (a NaN logit makes the sum NaN instead).
JN_HD CeStats ce_merge(CeStats a, CeStats b) {
  const float m = a.max > b.max ? a.max : b.max;
  return {m, ce_rescale(a.sum, a.max, m) + ce_rescale(b.sum, b.max, m), a.xsum + b.xsum, a.n + b.n};
}

JN_HD bool ce_label_ok(int64_t label, int64_t cols) { return label >= 0 && label < cols; }

// A row without loss and gradient: its label is ignored, or `where` keeps none of its classes.
JN_HD bool ce_row_off(int64_t label, float n, const CeOptions& o) {
  return label == o.ignore_index || (o.has_mask && n == 0.f);
}

// The row's loss from its statistics (n: the kept count) and its label's logit; writes the
// log-sum-exp the backward needs to *lse. lse - x_y is formed as (max - x_y) + log(sum), which
// keeps the loss's digits when the logits are large (|x| ~ 1e4 leaves float32 ~1e-3 absolute).
JN_HD float ce_row_loss(CeStats s, float n, float x_label, int64_t label, int64_t cols, const CeOptions& o,
                        float* lse) {
  const float log_sum = logf(s.sum);
  *lse = s.max + log_sum;
  if (ce_row_off(label, n, o)) return 0.f;
  if (!ce_label_ok(label, cols)) return NAN;
  float loss = log_sum + (1.f - o.smoothing) * (s.max - x_label);
  // Skipped when off, so an infinite term is not multiplied by 0 into NaN.
  if (o.smoothing != 0.f) loss += o.smoothing * (s.max - s.xsum / n);
  if (o.z_loss != 0.f) loss += o.z_loss * *lse * *lse;
  return loss;
}

// dx_j = off ? 0 : nan_row ? NaN : (kept_j ? a p_j - b : 0) - (j == label ? c : 0).
struct CeGradRow {
  float a, b, c, lse;
  int64_t label;
  bool off, nan_row;
};

JN_HD CeGradRow ce_grad_row(float g, float lse, float n, int64_t label, int64_t cols, const CeOptions& o) {
  CeGradRow r;
  r.a = o.z_loss != 0.f ? g * (1.f + 2.f * o.z_loss * lse) : g;
  r.b = o.smoothing != 0.f ? g * o.smoothing / n : 0.f;
  r.c = g * (1.f - o.smoothing);
  r.lse = lse;
  r.label = label;
  r.off = ce_row_off(label, n, o);
  r.nan_row = !r.off && !ce_label_ok(label, cols);
  return r;
}

// One element's gradient, p = exp(x - lse) (unused where not kept).
JN_HD float ce_grad(float p, bool keep, int64_t col, const CeGradRow& r) {
  if (r.off) return 0.f;
  if (r.nan_row) return NAN;
  const float v = keep ? r.a * p - r.b : 0.f;
  return col == r.label ? v - r.c : v;
}

}  // namespace jaxnorm

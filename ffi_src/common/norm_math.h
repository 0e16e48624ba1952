// Per-row and per-element formulas of LayerNorm / RMSNorm, shared by the CPU and CUDA kernels so
// that both backends compute the same function (see jaxnorm/reference.py for the spec).
#pragma once

#include <cmath>

#include "common/hd.h"

namespace jaxnorm {

// Flags of one norm call, passed as FFI attributes.
struct NormFlags {
  bool centered;          // LayerNorm (subtract the mean) or RMSNorm
  bool has_scale;
  bool has_bias;
  bool memory_efficient;  // backward recovers x_hat from the output y
};

// Reciprocal standard deviation from the population variance (or mean square). A NaN variance
// (a row holding inf or NaN) must stay NaN, as in jnp: fmaxf(var, 0) would turn it into 0.
JN_HD float norm_rstd(float var, float eps) { return 1.0f / sqrtf((var < 0.f ? 0.f : var) + eps); }

JN_HD float norm_apply(float x, float mean, float rstd, float gamma, float beta) {
  return (x - mean) * rstd * gamma + beta;
}

// apex's clamp_by_magnitude: keeps 1/gamma finite when recovering x_hat from y.
JN_HD float clamp_by_magnitude(float g, float eps) {
  if (g >= 0.f) return g < eps ? eps : g;
  return g > -eps ? -eps : g;
}

// Normalized input x_hat for the backward, from x (default) or from y (memory-efficient mode).
JN_HD float norm_xhat(float xin, float mean, float rstd, float gamma, float beta, float eps,
                      const NormFlags& f) {
  if (f.memory_efficient) {
    const float centered_y = f.has_bias ? xin - beta : xin;
    return f.has_scale ? centered_y / clamp_by_magnitude(gamma, eps) : centered_y;
  }
  return (xin - mean) * rstd;
}

// dx from g = dy * gamma and the row means c1 = mean(g), c2 = mean(g * x_hat).
JN_HD float norm_dx(float g, float xhat, float rstd, float c1, float c2, bool centered) {
  return centered ? rstd * (g - c1 - xhat * c2) : rstd * (g - xhat * c2);
}

}  // namespace jaxnorm

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
JN_HD float norm_rstd(float var, float eps) {
#ifdef __CUDA_ARCH__
  // rsqrt.approx (2 ulp): one instruction on a few-row launch's critical path after the row's
  // reduction, where the rounded sqrt and reciprocal took ~20 and two slow-path checks.
  return rsqrtf((var < 0.f ? 0.f : var) + eps);
#else
  return 1.0f / sqrtf((var < 0.f ? 0.f : var) + eps);
#endif
}

JN_HD float norm_apply(float x, float mean, float rstd, float gamma, float beta) {
  return (x - mean) * rstd * gamma + beta;
}

// apex's clamp_by_magnitude: keeps 1/gamma finite when recovering x_hat from y. Two instructions
// (max of |g| and eps, g's sign): apex's compares, and a NaN gamma kept as NaN, cost five a
// element, and a NaN gamma makes y, and so x_hat, NaN anyway. gamma = -0 becomes -eps, which
// recovers x_hat = 0 from y - beta = 0 as +eps does.
JN_HD float clamp_by_magnitude(float g, float eps) { return copysignf(fmaxf(fabsf(g), eps), g); }

// a / b within 2 ulp, for |b| >= eps (clamp_by_magnitude) above float's subnormals; a subnormal b
// (epsilon 0 and a subnormal scale) reads as 0. On the GPU the hardware reciprocal and a
// multiply: IEEE division (eight instructions and a branch) and __fdividef's subnormal scaling
// (three more) made the memory-efficient backward execute 42% more instructions than the
// default's (Nsight Compute, results/h100.md).
JN_HD float quotient(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
  return a * r;
#else
  return a / b;
#endif
}

// Normalized input x_hat for the backward, from x (default) or from y (memory-efficient mode).
// Callers pass gamma = 1 and beta = 0 for absent parameters, which recover y exactly.
JN_HD float norm_xhat(float xin, float mean, float rstd, float gamma, float beta, float eps,
                      const NormFlags& f) {
  if (f.memory_efficient) return quotient(xin - beta, clamp_by_magnitude(gamma, eps));
  return (xin - mean) * rstd;
}

// dx from g = dy * gamma and the row means c1 = mean(g), c2 = mean(g * x_hat).
JN_HD float norm_dx(float g, float xhat, float rstd, float c1, float c2, bool centered) {
  return centered ? rstd * (g - c1 - xhat * c2) : rstd * (g - xhat * c2);
}

}  // namespace jaxnorm

// The LayerNorm / RMSNorm forward for x of type JAXNORM_TYPED. Included only by the build's
// translation unit of that dtype.
#pragma once

#include "cuda/norm_fwd.cuh"
#include "cuda/norm_fwd_run.cuh"

namespace jaxnorm {

template <class T>
ffi::Error norm_fwd_typed(const NormFwdCall& c) {
  return with_centered(c.centered, [&](auto centered) {
    const auto op = norm_fwd_op<T, centered.value>(c.x, c.y, c.mean, c.rstd, c.scale, c.bias, c.s, c.eps, c.has_scale,
                                                   c.has_bias);
    return run_norm_fwd(op, c.s, true, c.stream, "norm forward");
  });
}

template ffi::Error norm_fwd_typed<JAXNORM_TYPED>(const NormFwdCall&);

}  // namespace jaxnorm

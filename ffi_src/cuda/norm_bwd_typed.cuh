// The LayerNorm / RMSNorm backward for dy of type JAXNORM_TYPED, with a bias gradient where
// JAXNORM_FLAG. Included only by the build's translation unit of that pair.
#pragma once

#include "cuda/norm_bwd.cuh"
#include "cuda/norm_bwd_run.cuh"

namespace jaxnorm {

template <class T, bool kBiasGrad>
ffi::Error norm_bwd_typed(const NormBwdCall& c) {
  const auto op = norm_bwd_op<T, T, kBiasGrad>(c.xin, c.dy, c.mean, c.rstd, c.scale, c.bias,
                                               StoreDx<T>{static_cast<T*>(c.dx->untyped_data())}, c.s, c.eps, c.flags);
  return run_norm_bwd(op, c.s, aligned16(op.dx.dx), c.dscale, c.dbias, c.workspace, c.stream, "norm backward");
}

template ffi::Error norm_bwd_typed<JAXNORM_TYPED, JAXNORM_FLAG>(const NormBwdCall&);

}  // namespace jaxnorm

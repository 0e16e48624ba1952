// The residual-add norm forward for x of type JAXNORM_TYPED: the norm forward's row kernels with
// AddNormFwdOp's hooks. Included only by the build's translation unit of that dtype.
#pragma once

#include "cuda/add_norm_fwd.cuh"
#include "cuda/norm_fwd_run.cuh"

namespace jaxnorm {

template <class T>
ffi::Error add_norm_fwd_typed(const AddNormFwdCall& c) {
  return dispatch_add_norm_fwd_for<CudaTypes, T>(c.x.element_type(), c.residual.element_type(), c.h->element_type(),
                                                 [&](auto, auto rt, auto ht) {
    using R = typename decltype(rt)::type;
    using H = typename decltype(ht)::type;
    return with_centered(c.centered, [&](auto centered) {
      const AddNormFwdOp<T, R, H, centered.value> op{
          norm_fwd_op<T, centered.value>(c.x, c.y, c.mean, c.rstd, c.scale, c.bias, c.s, c.eps, c.has_scale,
                                         c.has_bias),
          static_cast<const R*>(c.residual.untyped_data()), static_cast<H*>(c.h->untyped_data())};
      return run_norm_fwd(op, c.s, aligned16(op.residual) && aligned16(op.h), c.stream, "add_norm forward");
    });
  });
}

template ffi::Error add_norm_fwd_typed<JAXNORM_TYPED>(const AddNormFwdCall&);

}  // namespace jaxnorm

// The residual-add norm forward for x of type JAXNORM_TYPED: the norm forward's row kernels with
// AddNormFwdOp's hooks. Included only by the build's translation unit of that dtype.
#pragma once

#include "cuda/add_norm_fwd.cuh"
#include "cuda/norm_fwd_run.cuh"

namespace jaxnorm {

template <class T, bool kCentered>
ffi::Error add_norm_fwd_typed(const AddNormFwdCall& c) {
  const NormFwdCall& n = c.norm;
  return dispatch_add_norm_fwd_for<CudaTypes, T>(n.x.element_type(), c.residual.element_type(), c.h->element_type(),
                                                 [&](auto, auto rt, auto ht) {
    using R = typename decltype(rt)::type;
    using H = typename decltype(ht)::type;
    const AddNormFwdOp<T, R, H, kCentered> op{
        norm_fwd_op<T, kCentered>(n.x, n.y, n.mean, n.rstd, n.scale, n.bias, n.s, n.eps, n.has_scale, n.has_bias),
        static_cast<const R*>(c.residual.untyped_data()), static_cast<H*>(c.h->untyped_data())};
    return run_norm_fwd(op, n.s, aligned16(op.residual) && aligned16(op.h), n.stream, "add_norm forward");
  });
}

// JAXNORM_FLAG: kCentered (LayerNorm; a unit each, CMakeLists.txt).
template ffi::Error add_norm_fwd_typed<JAXNORM_TYPED, JAXNORM_FLAG>(const AddNormFwdCall&);

}  // namespace jaxnorm

// The residual-add norm backward for dy of type JAXNORM_TYPED: the norm backward's row kernels
// reading h (or y) and dy, storing dx + dh (h's cotangent) in one pass. Included only by the
// build's translation unit of that dtype.
#pragma once

#include "cuda/add_norm_bwd.cuh"
#include "cuda/norm_bwd_run.cuh"

namespace jaxnorm {

template <class T, bool kBiasGrad>
ffi::Error add_norm_bwd_typed(const AddNormBwdCall& c) {
  return dispatch_add_norm_bwd_for<CudaTypes, T>(c.dy.element_type(), c.hin.element_type(), c.dx->element_type(),
                                                 c.memory_efficient, [&](auto, auto at, auto ht) {
    using A = typename decltype(at)::type;
    using H = typename decltype(ht)::type;
    const StorePlusDh<H> out{static_cast<H*>(c.dx->untyped_data()),
                             c.has_dh ? static_cast<const H*>(c.dh.untyped_data()) : nullptr};
    const auto op = norm_bwd_op<T, A, kBiasGrad>(c.hin, c.dy, c.mean, c.rstd, c.scale, c.bias, out, c.s, c.eps,
                                                 NormFlags{c.centered, c.has_scale, c.has_bias, c.memory_efficient});
    return run_norm_bwd(op, c.s, aligned16(out.dx) && aligned16(out.dh), c.dscale, c.dbias, c.workspace, c.stream,
                        "add_norm backward");
  });
}

// JAXNORM_FLAG: kBiasGrad (has_bias; a unit each, CMakeLists.txt).
template ffi::Error add_norm_bwd_typed<JAXNORM_TYPED, JAXNORM_FLAG>(const AddNormBwdCall&);

}  // namespace jaxnorm

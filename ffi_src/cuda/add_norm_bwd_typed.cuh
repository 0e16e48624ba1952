// The residual-add norm backward for dy of type JAXNORM_TYPED: the norm backward's row kernels
// reading h (or y) and dy, storing dx + dh (h's cotangent) in one pass. Included only by the
// build's translation unit of that dtype.
#pragma once

#include "cuda/add_norm_bwd.cuh"
#include "cuda/norm_bwd_run.cuh"

namespace jaxnorm {

template <class T, bool kBiasGrad>
ffi::Error add_norm_bwd_typed(const AddNormBwdCall& c) {
  const NormBwdCall& n = c.norm;
  return dispatch_add_norm_bwd_for<CudaTypes, T>(n.dy.element_type(), n.xin.element_type(), n.dx->element_type(),
                                                 n.flags.memory_efficient, [&](auto, auto at, auto ht) {
    using A = typename decltype(at)::type;
    using H = typename decltype(ht)::type;
    const StorePlusDh<H> out{static_cast<H*>(n.dx->untyped_data()),
                             c.has_dh ? static_cast<const H*>(c.dh.untyped_data()) : nullptr};
    const auto op = norm_bwd_op<T, A, kBiasGrad>(n.xin, n.dy, n.mean, n.rstd, n.scale, n.bias, out, n.s, n.eps, n.flags);
    return run_norm_bwd(op, n.s, aligned16(out.dx) && aligned16(out.dh), n.dscale, n.dbias, n.workspace, n.stream,
                        "add_norm backward");
  });
}

// JAXNORM_FLAG: kBiasGrad (has_bias; a unit each, CMakeLists.txt).
template ffi::Error add_norm_bwd_typed<JAXNORM_TYPED, JAXNORM_FLAG>(const AddNormBwdCall&);

}  // namespace jaxnorm

// The residual-add norm forward's arguments and its launch for one x dtype T and norm (kCentered:
// LayerNorm), which add_norm_fwd_typed.cuh defines in a translation unit of its own per pair
// (CMakeLists.txt), so that the build compiles them in parallel.
#pragma once

#include "common/add_norm_args.h"
#include "cuda/norm_fwd.cuh"

namespace jaxnorm {

// The norm forward's operands (x, scale, bias; y, mean, rstd) and the residual and h.
struct AddNormFwdCall {
  NormFwdCall norm;
  const ffi::AnyBuffer& residual;
  ffi::Result<ffi::AnyBuffer>& h;
};

template <class T, bool kCentered>
ffi::Error add_norm_fwd_typed(const AddNormFwdCall& c);

}  // namespace jaxnorm

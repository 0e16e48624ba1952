// The residual-add norm forward's arguments and its launch for one x dtype T, which
// add_norm_fwd_typed.cuh defines in a translation unit of its own per dtype (CMakeLists.txt), so
// that the build compiles the dtypes' kernels in parallel.
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

template <class T>
ffi::Error add_norm_fwd_typed(const AddNormFwdCall& c);

}  // namespace jaxnorm

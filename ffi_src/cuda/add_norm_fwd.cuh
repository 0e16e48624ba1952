// The residual-add norm forward's arguments and its launch for one x dtype T, which
// add_norm_fwd_typed.cuh defines in a translation unit of its own per dtype (CMakeLists.txt), so
// that the build compiles the dtypes' kernels in parallel.
#pragma once

#include <cuda_runtime.h>

#include "common/add_norm_args.h"

namespace jaxnorm {

struct AddNormFwdCall {
  cudaStream_t stream;
  const ffi::AnyBuffer& x;
  const ffi::AnyBuffer& residual;
  const ffi::AnyBuffer& scale;
  const ffi::AnyBuffer& bias;
  ffi::Result<ffi::AnyBuffer>& y;
  ffi::Result<ffi::AnyBuffer>& h;
  ffi::Result<ffi::AnyBuffer>& mean;
  ffi::Result<ffi::AnyBuffer>& rstd;
  Rows s;
  float eps;
  bool centered, has_scale, has_bias;
};

template <class T>
ffi::Error add_norm_fwd_typed(const AddNormFwdCall& c);

}  // namespace jaxnorm

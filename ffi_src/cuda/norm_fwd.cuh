// The LayerNorm / RMSNorm forward's launch for one x dtype T, which norm_fwd_typed.cuh defines in
// a translation unit of its own per dtype (CMakeLists.txt), so that the build compiles the
// dtypes' kernels in parallel.
#pragma once

#include <cuda_runtime.h>

#include "common/signatures.h"

namespace jaxnorm {

struct NormFwdCall {
  cudaStream_t stream;
  const ffi::AnyBuffer& x;
  const ffi::AnyBuffer& scale;
  const ffi::AnyBuffer& bias;
  ffi::Result<ffi::AnyBuffer>& y;
  ffi::Result<ffi::AnyBuffer>& mean;
  ffi::Result<ffi::AnyBuffer>& rstd;
  Rows s;
  float eps;
  bool centered, has_scale, has_bias;
};

template <class T>
ffi::Error norm_fwd_typed(const NormFwdCall& c);

}  // namespace jaxnorm

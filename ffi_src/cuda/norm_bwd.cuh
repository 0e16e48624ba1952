// The LayerNorm / RMSNorm backward's arguments and its launch for one dy dtype T, with or without
// a bias gradient, which norm_bwd_typed.cuh defines in a translation unit of its own per pair
// (CMakeLists.txt), so that the build compiles them in parallel.
#pragma once

#include <cuda_runtime.h>

#include "common/norm_math.h"
#include "common/signatures.h"

namespace jaxnorm {

struct NormBwdCall {
  cudaStream_t stream;
  const ffi::AnyBuffer& xin;
  const ffi::AnyBuffer& dy;
  const ffi::AnyBuffer& mean;
  const ffi::AnyBuffer& rstd;
  const ffi::AnyBuffer& scale;
  const ffi::AnyBuffer& bias;
  ffi::Result<ffi::AnyBuffer>& dx;
  ffi::Result<ffi::AnyBuffer>& dscale;
  ffi::Result<ffi::AnyBuffer>& dbias;
  ffi::Result<ffi::AnyBuffer>& workspace;
  Rows s;
  float eps;
  NormFlags flags;
};

template <class T, bool kBiasGrad>
ffi::Error norm_bwd_typed(const NormBwdCall& c);

}  // namespace jaxnorm

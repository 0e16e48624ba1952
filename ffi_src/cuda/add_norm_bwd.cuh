// The residual-add norm backward's arguments and its launch for one dy dtype T, with or without a
// bias gradient, which add_norm_bwd_typed.cuh defines in a translation unit of its own per pair
// (CMakeLists.txt), so that the build compiles them in parallel.
#pragma once

#include <cuda_runtime.h>

#include "common/add_norm_args.h"

namespace jaxnorm {

struct AddNormBwdCall {
  cudaStream_t stream;
  const ffi::AnyBuffer& hin;
  const ffi::AnyBuffer& dy;
  const ffi::AnyBuffer& dh;
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
  bool centered, has_scale, has_bias, memory_efficient, has_dh;
};

template <class T, bool kBiasGrad>
ffi::Error add_norm_bwd_typed(const AddNormBwdCall& c);

}  // namespace jaxnorm

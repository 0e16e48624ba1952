// The residual-add norm backward's arguments and its launch for one dy dtype T, with or without a
// bias gradient, which add_norm_bwd_typed.cuh defines in a translation unit of its own per pair
// (CMakeLists.txt), so that the build compiles them in parallel.
#pragma once

#include "common/add_norm_args.h"
#include "cuda/norm_bwd.cuh"

namespace jaxnorm {

// The norm backward's operands (xin: h, or y in memory-efficient mode; dx: dx + dh) and h's
// cotangent dh.
struct AddNormBwdCall {
  NormBwdCall norm;
  const ffi::AnyBuffer& dh;
  bool has_dh;
};

template <class T, bool kBiasGrad>
ffi::Error add_norm_bwd_typed(const AddNormBwdCall& c);

}  // namespace jaxnorm

// The norm forward's op and launch, shared by the norm and residual-add norm handlers.
#pragma once

#include <type_traits>

#include "common/signatures.h"
#include "cuda/norm_ops.cuh"
#include "cuda/row_runners.cuh"

namespace jaxnorm {

// Calls f(std::bool_constant<centered>): LayerNorm and RMSNorm are separate kernels.
template <class F>
ffi::Error with_centered(bool centered, F&& f) {
  return centered ? f(std::true_type{}) : f(std::false_type{});
}

template <class T, bool kCentered>
NormFwdOp<T, kCentered> norm_fwd_op(const ffi::AnyBuffer& x, ffi::Result<ffi::AnyBuffer>& y,
                                    ffi::Result<ffi::AnyBuffer>& mean, ffi::Result<ffi::AnyBuffer>& rstd,
                                    const ffi::AnyBuffer& scale, const ffi::AnyBuffer& bias, Rows s, float eps,
                                    bool has_scale, bool has_bias) {
  return {static_cast<const T*>(x.untyped_data()),
          static_cast<T*>(y->untyped_data()),
          static_cast<float*>(mean->untyped_data()),
          static_cast<float*>(rstd->untyped_data()),
          has_scale ? static_cast<const float*>(scale.untyped_data()) : nullptr,
          has_bias ? static_cast<const float*>(bias.untyped_data()) : nullptr,
          s.cols,
          eps,
          1.0f / static_cast<float>(s.cols),
          has_scale,
          has_bias};
}

// `aligned`: whether the op's other rows (the residual-add's r and h) are 16-byte aligned too.
template <class Op>
ffi::Error run_norm_fwd(Op op, Rows s, bool aligned, cudaStream_t stream, const char* what) {
  using T = typename Op::Type;
  const bool vec = aligned && s.cols % kVecOf<T> == 0 && aligned16(op.x) && aligned16(op.y) &&
                   aligned16(op.gamma) && aligned16(op.beta);
  if constexpr (SplitsPacks<Op>::value)
    op.split = vec && s.cols % 256 == 0 && s.cols >= kSplitPackCols && (op.gamma || op.beta);
  return run_fwd(op, s.rows, s.cols, vec, stream, what);
}

}  // namespace jaxnorm

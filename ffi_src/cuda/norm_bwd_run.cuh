// The norm backward's launch, shared by the norm and residual-add norm handlers: the checks of
// the gradient and workspace results, then the row kernel and the fixed-order reduction of the
// scale/bias gradient partials.
#pragma once

#include "common/signatures.h"
#include "cuda/norm_ops.cuh"
#include "cuda/row_runners.cuh"

namespace jaxnorm {

// T: dy's type, A: the row read's (xin), Dx: where dx goes (norm_ops.cuh).
template <class T, class A, bool kBiasGrad, class Dx>
NormBwdOp<T, A, Dx, kBiasGrad> norm_bwd_op(const ffi::AnyBuffer& xin, const ffi::AnyBuffer& dy, const ffi::AnyBuffer& mean,
                                const ffi::AnyBuffer& rstd, const ffi::AnyBuffer& scale, const ffi::AnyBuffer& bias,
                                Dx dx, Rows s, float eps, NormFlags f) {
  return {static_cast<const A*>(xin.untyped_data()),
          static_cast<const T*>(dy.untyped_data()),
          static_cast<const float*>(mean.untyped_data()),
          static_cast<const float*>(rstd.untyped_data()),
          f.has_scale ? static_cast<const float*>(scale.untyped_data()) : nullptr,
          f.has_bias ? static_cast<const float*>(bias.untyped_data()) : nullptr,
          dx,
          s.cols,
          1.0f / static_cast<float>(s.cols),
          eps,
          f};
}

// `aligned`: whether the op's other rows (dx's, dh) are 16-byte aligned.
template <class Op>
ffi::Error run_norm_bwd(const Op& op, Rows s, bool aligned, ffi::Result<ffi::AnyBuffer>& dscale,
                        ffi::Result<ffi::AnyBuffer>& dbias, ffi::Result<ffi::AnyBuffer>& workspace,
                        cudaStream_t stream, const char* what) {
  const auto gd = dscale->dimensions();
  const auto wd = workspace->dimensions();
  if (gd.size() != 2 || wd.size() != 4 || gd[0] <= 0 || wd[0] != gd[0] || wd[2] != 2 || wd[3] != s.cols ||
      s.rows % gd[0] != 0) {
    return ffi::Error::InvalidArgument(std::string("jaxnorm: ") + what + " got inconsistent group/workspace shapes");
  }
  const int64_t groups = gd[0];
  if (groups > 65535) return ffi::Error::InvalidArgument("jaxnorm: norm backward supports at most 65535 vmapped groups");
  if (s.rows == 0) {
    const size_t bytes = static_cast<size_t>(groups * s.cols) * sizeof(float);
    cudaMemsetAsync(dscale->untyped_data(), 0, bytes, stream);
    cudaMemsetAsync(dbias->untyped_data(), 0, bytes, stream);
    return last_launch_error(what);
  }
  const bool vec = aligned && s.cols % kVecOf<typename Op::Type> == 0 && aligned16(op.xin) && aligned16(op.dy) &&
                   aligned16(op.gamma) && aligned16(op.beta);
  TileChoice c = choose_tile_for<Op>(s.cols, vec, device_facts().clusters);
  if (op.one_pack_rows()) c = one_pack_rows(c, Op::kBudget);
  // As measured: RMSNorm's default mode (LayerNorm's bias-free backward and the memory-efficient
  // mode share the op and were not measured).
  if (!op.f.centered && !op.f.memory_efficient)
    c = warp_rows(c, s.cols, kVecOf<typename Op::Type>, s.rows, device_facts().sms, Op::kBudget);
  c = half_wide_rows(c, s.cols, kVecOf<typename Op::Type>, s.rows, device_facts().sms, Op::kColumnSums + 1,
                     Op::kBudget);
  const auto runner_of = [&](const auto& o) {
    return BwdRunner<std::decay_t<decltype(o)>>{o,
                                                s.rows / groups,
                                                groups,
                                                s.cols,
                                                static_cast<float*>(workspace->untyped_data()),
                                                wd[1],
                                                static_cast<float*>(dscale->untyped_data()),
                                                static_cast<float*>(dbias->untyped_data()),
                                                stream,
                                                what};
  };
  // The 256-thread tiles of 2 packs in the default mode take the fixed-flag op (norm_ops.cuh says
  // what it gained); the other modes keep the op with runtime flags, two CTAs an SM for LayerNorm.
  // Its three tiles are named here, not reached through run_choice, so that only they compile.
  if constexpr (Op::kFixable) {
    if (op.in_default_mode() && c.loop_tpr == 0 && c.cluster == 1 && c.block == 256 && c.packs == 2) {
      auto fixed = runner_of(op.fixed());
      if (c.tpr == 64) return fixed.template tile<64, 256, 2, 1>();
      if (c.tpr == 128) return fixed.template tile<128, 256, 2, 1>();
      if (c.tpr == 256) return fixed.template tile<256, 256, 2, 1>();
    }
  }
  auto runner = runner_of(op);
  return run_choice<Op>(c, runner);
}

}  // namespace jaxnorm

// LayerNorm / RMSNorm forward CUDA handler.
#include "common/signatures.h"
#include "cuda/norm_ops.cuh"
#include "cuda/row_runners.cuh"

namespace jaxnorm {
namespace {

ffi::Error NormFwdCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                       ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> mean,
                       ffi::Result<ffi::AnyBuffer> rstd, float eps, bool centered, bool has_scale, bool has_bias) {
  Rows s;
  JN_RETURN_IF_ERROR(check_norm_operands(x, scale, bias, has_scale, has_bias, &s));
  if (s.rows == 0 || s.cols == 0) return ffi::Error::Success();
  return dispatch_float<CudaTypes>(x.element_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Op = NormFwdOp<T>;
    Op op{static_cast<const T*>(x.untyped_data()),
          static_cast<T*>(y->untyped_data()),
          static_cast<float*>(mean->untyped_data()),
          static_cast<float*>(rstd->untyped_data()),
          has_scale ? static_cast<const float*>(scale.untyped_data()) : nullptr,
          has_bias ? static_cast<const float*>(bias.untyped_data()) : nullptr,
          s.cols,
          eps,
          centered,
          has_scale,
          has_bias};
    const bool vec = s.cols % kVecOf<T> == 0 && aligned16(op.x) && aligned16(op.y) && aligned16(op.gamma) &&
                     aligned16(op.beta);
    const TileChoice c = choose_tile_for<Op>(s.cols, vec, device_facts().clusters);
    FwdRunner<Op> runner{op, s.rows, s.cols, stream, "norm forward"};
    return run_choice<Op>(c, runner);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormNormFwdCuda, NormFwdCuda,
                              norm_fwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxnorm

// LayerNorm / RMSNorm forward CUDA handler.
#include "common/signatures.h"
#include "cuda/norm_fwd_run.cuh"

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
    return with_centered(centered, [&](auto c) {
      const auto op = norm_fwd_op<T, c.value>(x, y, mean, rstd, scale, bias, s, eps, has_scale, has_bias);
      return run_norm_fwd(op, s, true, stream, "norm forward");
    });
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormNormFwdCuda, NormFwdCuda,
                              norm_fwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxnorm

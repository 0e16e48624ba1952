// LayerNorm / RMSNorm forward CUDA handler, launched per x dtype by norm_fwd_typed.cuh.
#include "cuda/device_types.cuh"
#include "cuda/norm_fwd.cuh"

namespace jaxnorm {
namespace {

ffi::Error NormFwdCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                       ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> mean,
                       ffi::Result<ffi::AnyBuffer> rstd, float eps, bool centered, bool has_scale, bool has_bias) {
  Rows s;
  JN_RETURN_IF_ERROR(check_norm_operands(x, scale, bias, has_scale, has_bias, &s));
  if (s.rows == 0 || s.cols == 0) return ffi::Error::Success();
  const NormFwdCall c{stream, x, scale, bias, y, mean, rstd, s, eps, centered, has_scale, has_bias};
  return dispatch_float<CudaTypes>(x.element_type(), "x", [&](auto tag) {
    return norm_fwd_typed<typename decltype(tag)::type>(c);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormNormFwdCuda, NormFwdCuda,
                              norm_fwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxnorm

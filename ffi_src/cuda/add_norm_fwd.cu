// Residual-add + LayerNorm / RMSNorm forward CUDA handler: the norm forward's row kernels with
// AddNormFwdOp's hooks (one read of x and r, one write of y and h), launched per x dtype and norm
// by add_norm_fwd_typed.cuh.
#include "cuda/add_norm_fwd.cuh"
#include "cuda/device_types.cuh"

namespace jaxnorm {
namespace {

ffi::Error AddNormFwdCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer residual, ffi::AnyBuffer scale,
                          ffi::AnyBuffer bias, ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> h,
                          ffi::Result<ffi::AnyBuffer> mean, ffi::Result<ffi::AnyBuffer> rstd, float eps,
                          bool centered, bool has_scale, bool has_bias) {
  Rows s;
  JN_RETURN_IF_ERROR(check_add_norm_fwd(x, residual, scale, bias, has_scale, has_bias, &s));
  if (s.rows == 0 || s.cols == 0) return ffi::Error::Success();
  const AddNormFwdCall c{{stream, x, scale, bias, y, mean, rstd, s, eps, centered, has_scale, has_bias}, residual, h};
  return dispatch_float<CudaTypes>(x.element_type(), "x", [&](auto t) {
    using T = typename decltype(t)::type;
    return centered ? add_norm_fwd_typed<T, true>(c) : add_norm_fwd_typed<T, false>(c);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormAddNormFwdCuda, AddNormFwdCuda,
                              add_norm_fwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxnorm

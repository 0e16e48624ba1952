// Residual-add + LayerNorm / RMSNorm forward CUDA handler: the norm forward's row kernels with
// AddNormFwdOp's hooks (one read of x and r, one write of y and h).
#include "common/add_norm_args.h"
#include "cuda/norm_fwd_run.cuh"

namespace jaxnorm {
namespace {

ffi::Error AddNormFwdCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer residual, ffi::AnyBuffer scale,
                          ffi::AnyBuffer bias, ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> h,
                          ffi::Result<ffi::AnyBuffer> mean, ffi::Result<ffi::AnyBuffer> rstd, float eps,
                          bool centered, bool has_scale, bool has_bias) {
  Rows s;
  JN_RETURN_IF_ERROR(check_add_norm_fwd(x, residual, scale, bias, has_scale, has_bias, &s));
  if (s.rows == 0 || s.cols == 0) return ffi::Error::Success();
  return dispatch_add_norm_fwd<CudaTypes>(x, residual, *h, [&](auto xt, auto rt, auto ht) {
    using T = typename decltype(xt)::type;
    using R = typename decltype(rt)::type;
    using H = typename decltype(ht)::type;
    return with_centered(centered, [&](auto c) {
      const AddNormFwdOp<T, R, H, c.value> op{
          norm_fwd_op<T, c.value>(x, y, mean, rstd, scale, bias, s, eps, has_scale, has_bias),
          static_cast<const R*>(residual.untyped_data()), static_cast<H*>(h->untyped_data())};
      return run_norm_fwd(op, s, aligned16(op.residual) && aligned16(op.h), stream, "add_norm forward");
    });
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormAddNormFwdCuda, AddNormFwdCuda,
                              add_norm_fwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxnorm

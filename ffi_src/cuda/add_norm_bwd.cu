// Residual-add + LayerNorm / RMSNorm backward CUDA handler: the norm backward's row kernels
// reading h (or y) and dy, storing dx + dh (h's cotangent) in one pass.
#include "common/add_norm_args.h"
#include "cuda/norm_bwd_run.cuh"

namespace jaxnorm {
namespace {

ffi::Error AddNormBwdCuda(cudaStream_t stream, ffi::AnyBuffer hin, ffi::AnyBuffer dy, ffi::AnyBuffer dh,
                          ffi::AnyBuffer mean, ffi::AnyBuffer rstd, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                          ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dscale,
                          ffi::Result<ffi::AnyBuffer> dbias, ffi::Result<ffi::AnyBuffer> workspace, float eps,
                          bool centered, bool has_scale, bool has_bias, bool memory_efficient, bool has_dh) {
  Rows s;
  JN_RETURN_IF_ERROR(check_add_norm_bwd(hin, dy, dh, *dx, scale, bias, has_scale, has_bias, has_dh, &s));
  return dispatch_add_norm_bwd<CudaTypes>(dy, hin, *dx, memory_efficient, [&](auto yt, auto at, auto ht) {
    using T = typename decltype(yt)::type;
    using A = typename decltype(at)::type;
    using H = typename decltype(ht)::type;
    const StorePlusDh<H> out{static_cast<H*>(dx->untyped_data()),
                             has_dh ? static_cast<const H*>(dh.untyped_data()) : nullptr};
    return with_bias_grad(has_bias, [&](auto bias_grad) {
      const auto op = norm_bwd_op<T, A, decltype(bias_grad)::value>(
          hin, dy, mean, rstd, scale, bias, out, s, eps, NormFlags{centered, has_scale, has_bias, memory_efficient});
      return run_norm_bwd(op, s, aligned16(out.dx) && aligned16(out.dh), dscale, dbias, workspace, stream,
                          "add_norm backward");
    });
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormAddNormBwdCuda, AddNormBwdCuda,
                              add_norm_bwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxnorm

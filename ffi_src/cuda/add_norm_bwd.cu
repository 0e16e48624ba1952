// Residual-add + LayerNorm / RMSNorm backward CUDA handler: the norm backward's row kernels
// reading h (or y) and dy, storing dx + dh (h's cotangent) in one pass.
#include "common/add_norm_args.h"
#include "cuda/norm_bwd_run.cuh"
#include "cuda/norm_ops.cuh"

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
    using Op = AddNormBwdOp<T, A, H>;
    Op op{static_cast<const A*>(hin.untyped_data()),
          static_cast<const T*>(dy.untyped_data()),
          static_cast<const float*>(mean.untyped_data()),
          static_cast<const float*>(rstd.untyped_data()),
          has_scale ? static_cast<const float*>(scale.untyped_data()) : nullptr,
          has_bias ? static_cast<const float*>(bias.untyped_data()) : nullptr,
          {static_cast<H*>(dx->untyped_data()), has_dh ? static_cast<const H*>(dh.untyped_data()) : nullptr},
          s.cols,
          1.0f / static_cast<float>(s.cols),
          eps,
          NormFlags{centered, has_scale, has_bias, memory_efficient}};
    const bool vec = s.cols % kVecOf<T> == 0 && aligned16(op.xin) && aligned16(op.dy) && aligned16(op.dx.dx) &&
                     aligned16(op.dx.dh) && aligned16(op.gamma) && aligned16(op.beta);
    return run_norm_bwd(op, s, vec, dscale, dbias, workspace, stream, "add_norm backward");
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormAddNormBwdCuda, AddNormBwdCuda,
                              add_norm_bwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxnorm

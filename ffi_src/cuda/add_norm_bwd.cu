// Residual-add + LayerNorm / RMSNorm backward CUDA handler: the norm backward's row kernels
// reading h (or y) and dy, storing dx + dh (h's cotangent) in one pass, launched per dy dtype and bias
// gradient by add_norm_bwd_typed.cuh.
#include "cuda/add_norm_bwd.cuh"
#include "cuda/device_types.cuh"

namespace jaxnorm {
namespace {

ffi::Error AddNormBwdCuda(cudaStream_t stream, ffi::AnyBuffer hin, ffi::AnyBuffer dy, ffi::AnyBuffer dh,
                          ffi::AnyBuffer mean, ffi::AnyBuffer rstd, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                          ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dscale,
                          ffi::Result<ffi::AnyBuffer> dbias, ffi::Result<ffi::AnyBuffer> workspace, float eps,
                          bool centered, bool has_scale, bool has_bias, bool memory_efficient, bool has_dh) {
  Rows s;
  JN_RETURN_IF_ERROR(check_add_norm_bwd(hin, dy, dh, *dx, scale, bias, has_scale, has_bias, has_dh, &s));
  const AddNormBwdCall c{{stream, hin, dy, mean, rstd, scale, bias, dx, dscale, dbias, workspace, s, eps,
                          NormFlags{centered, has_scale, has_bias, memory_efficient}},
                         dh,
                         has_dh};
  return dispatch_float<CudaTypes>(dy.element_type(), "dy", [&](auto t) {
    using T = typename decltype(t)::type;
    return has_bias ? add_norm_bwd_typed<T, true>(c) : add_norm_bwd_typed<T, false>(c);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormAddNormBwdCuda, AddNormBwdCuda,
                              add_norm_bwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxnorm

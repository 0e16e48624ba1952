// Softmax / log-softmax forward and backward CUDA handlers, launched per dtype by
// softmax_typed.cuh.
#include "cuda/device_types.cuh"
#include "cuda/softmax.cuh"

namespace jaxnorm {
namespace {

ffi::Error SoftmaxFwdCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer mask, ffi::Result<ffi::AnyBuffer> y,
                          bool log, bool has_mask) {
  Rows s;
  JN_RETURN_IF_ERROR(rows_of(x, "x", &s));
  JN_RETURN_IF_ERROR(check_mask(mask, has_mask, s));
  if (s.size() == 0) return ffi::Error::Success();
  return dispatch_float<CudaTypes>(x.element_type(), "x", [&](auto tag) {
    return softmax_fwd_typed<typename decltype(tag)::type>(stream, x, mask, y, log, has_mask, s);
  });
}

ffi::Error SoftmaxBwdCuda(cudaStream_t stream, ffi::AnyBuffer y, ffi::AnyBuffer dy, ffi::AnyBuffer mask,
                          ffi::Result<ffi::AnyBuffer> dx, bool log, bool has_mask) {
  Rows s;
  JN_RETURN_IF_ERROR(rows_of(y, "y", &s));
  JN_RETURN_IF_ERROR(check_same_rows(dy, y, s, "dy"));
  JN_RETURN_IF_ERROR(check_mask(mask, has_mask, s));
  if (s.size() == 0) return ffi::Error::Success();
  return dispatch_float<CudaTypes>(y.element_type(), "y", [&](auto tag) {
    return softmax_bwd_typed<typename decltype(tag)::type>(stream, y, dy, mask, dx, log, has_mask, s);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormSoftmaxFwdCuda, SoftmaxFwdCuda,
                              softmax_fwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormSoftmaxBwdCuda, SoftmaxBwdCuda,
                              softmax_bwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxnorm

// Softmax / log-softmax forward and backward CUDA handlers.
#include "common/signatures.h"
#include "cuda/row_runners.cuh"
#include "cuda/softmax_ops.cuh"

namespace jaxnorm {
namespace {

ffi::Error SoftmaxFwdCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer mask, ffi::Result<ffi::AnyBuffer> y,
                          bool log, bool has_mask) {
  Rows s;
  JN_RETURN_IF_ERROR(rows_of(x, "x", &s));
  JN_RETURN_IF_ERROR(check_mask(mask, has_mask, s));
  if (s.size() == 0) return ffi::Error::Success();
  return dispatch_float<CudaTypes>(x.element_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Op = SoftmaxFwdOp<T>;
    Op op{{static_cast<const T*>(x.untyped_data()),
           has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr, s.cols},
          static_cast<T*>(y->untyped_data()), log};
    const bool vec = s.cols % kVecOf<T> == 0 && aligned16(op.x) && aligned16(op.y) && aligned16(op.mask);
    const TileChoice c = choose_tile_for<Op>(s.cols, vec, device_facts().clusters);
    FwdRunner<Op> runner{op, s.rows, s.cols, stream, "softmax forward"};
    return run_choice<Op>(c, runner);
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
    using T = typename decltype(tag)::type;
    auto run = [&](auto masked) {
      using Op = SoftmaxBwdOp<T, decltype(masked)::value>;
      Op op{static_cast<const T*>(y.untyped_data()), static_cast<const T*>(dy.untyped_data()),
            has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr, static_cast<T*>(dx->untyped_data()),
            s.cols, log};
      const bool vec = s.cols % kVecOf<T> == 0 && aligned16(op.y) && aligned16(op.dy) && aligned16(op.dx) &&
                       aligned16(op.mask_in);
      const TileChoice c = choose_tile_for<Op>(s.cols, vec, device_facts().clusters);
      BwdRunner<Op> runner{op, s.rows, 1, s.cols, nullptr, 0, nullptr, nullptr, stream, "softmax backward"};
      return run_choice<Op>(c, runner);
    };
    return has_mask ? run(std::true_type{}) : run(std::false_type{});
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

// Softmax cross-entropy forward and backward CUDA handlers; kernels in cross_entropy_ops.cuh.
#include "common/signatures.h"
#include "cuda/cross_entropy_ops.cuh"
#include "cuda/row_runners.cuh"

namespace jaxnorm {
namespace {

ffi::Error CrossEntropyFwdCuda(cudaStream_t stream, ffi::AnyBuffer logits, ffi::AnyBuffer labels, ffi::AnyBuffer mask,
                               ffi::Result<ffi::AnyBuffer> loss, ffi::Result<ffi::AnyBuffer> stats, float smoothing,
                               float z_loss, int64_t ignore_index, bool has_mask) {
  Rows s;
  JN_RETURN_IF_ERROR(check_cross_entropy(logits, labels, mask, has_mask, nullptr, nullptr, &s));
  if (s.rows == 0) return ffi::Error::Success();
  return dispatch_float<CudaTypes>(logits.element_type(), "logits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Op = CrossEntropyFwdOp<T>;
    Op op{{static_cast<const T*>(logits.untyped_data()),
           has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr, s.cols},
          static_cast<const int32_t*>(labels.untyped_data()),
          static_cast<float*>(loss->untyped_data()),
          static_cast<float*>(stats->untyped_data()),
          {smoothing, z_loss, ignore_index, has_mask}};
    const bool vec = s.cols % kVecOf<T> == 0 && aligned16(op.x) && aligned16(op.mask);
    const TileChoice c = choose_tile_for<Op>(s.cols, vec, device_facts().clusters);
    FwdRunner<Op> runner{op, s.rows, s.cols, stream, "cross-entropy forward"};
    return run_choice<Op>(c, runner);
  });
}

template <class T, int N>
ffi::Error launch_bwd(const ce::BwdArgs<T>& a, int64_t rows, cudaStream_t stream) {
  const int64_t per_row = a.cols / N, total = rows * per_row;
  const dim3 grid(static_cast<unsigned>(ceil_div(total, ce::kThreads * ce::kUnroll)));
  auto go = [&](auto index) {
    using I = decltype(index);
    return launch(ce::bwd_kernel<T, N, I>, grid, dim3(ce::kThreads), 1, stream, "cross-entropy backward", a,
                  Divisor<I>(static_cast<I>(per_row)), static_cast<I>(total));
  };
  return total < (int64_t{1} << 32) ? go(uint32_t{}) : go(uint64_t{});
}

ffi::Error CrossEntropyBwdCuda(cudaStream_t stream, ffi::AnyBuffer logits, ffi::AnyBuffer labels, ffi::AnyBuffer stats,
                               ffi::AnyBuffer dloss, ffi::AnyBuffer mask, ffi::Result<ffi::AnyBuffer> dlogits,
                               float smoothing, float z_loss, int64_t ignore_index, bool has_mask) {
  Rows s;
  JN_RETURN_IF_ERROR(check_cross_entropy(logits, labels, mask, has_mask, &stats, &dloss, &s));
  if (s.size() == 0) return ffi::Error::Success();
  return dispatch_float<CudaTypes>(logits.element_type(), "logits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const ce::BwdArgs<T> a{static_cast<const T*>(logits.untyped_data()),
                           static_cast<const int32_t*>(labels.untyped_data()),
                           static_cast<const float*>(stats.untyped_data()),
                           static_cast<const float*>(dloss.untyped_data()),
                           has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr,
                           static_cast<T*>(dlogits->untyped_data()),
                           s.cols,
                           {smoothing, z_loss, ignore_index, has_mask}};
    constexpr int V = kVecOf<T>;
    const bool vec = s.cols % V == 0 && aligned16(a.x) && aligned16(a.dx) && aligned16(a.mask);
    return vec ? launch_bwd<T, V>(a, s.rows, stream) : launch_bwd<T, 1>(a, s.rows, stream);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormCrossEntropyFwdCuda, CrossEntropyFwdCuda,
                              cross_entropy_fwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormCrossEntropyBwdCuda, CrossEntropyBwdCuda,
                              cross_entropy_bwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxnorm

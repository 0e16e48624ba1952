// The softmax / log-softmax forward and backward for rows of type JAXNORM_TYPED. Included only by
// the build's translation unit of that dtype.
#pragma once

#include <type_traits>

#include "cuda/row_runners.cuh"
#include "cuda/softmax.cuh"
#include "cuda/softmax_ops.cuh"

namespace jaxnorm {

template <class T>
ffi::Error softmax_fwd_typed(cudaStream_t stream, const ffi::AnyBuffer& x, const ffi::AnyBuffer& mask,
                             ffi::Result<ffi::AnyBuffer>& y, bool log, bool has_mask, Rows s) {
  using Op = SoftmaxFwdOp<T>;
  Op op{{static_cast<const T*>(x.untyped_data()), has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr,
         s.cols},
        static_cast<T*>(y->untyped_data()), log};
  const bool vec = s.cols % kVecOf<T> == 0 && aligned16(op.x) && aligned16(op.y) && aligned16(op.mask);
  return run_fwd(op, s.rows, s.cols, vec, stream, "softmax forward");
}

template <class T>
ffi::Error softmax_bwd_typed(cudaStream_t stream, const ffi::AnyBuffer& y, const ffi::AnyBuffer& dy,
                             const ffi::AnyBuffer& mask, ffi::Result<ffi::AnyBuffer>& dx, bool log, bool has_mask,
                             Rows s) {
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
}

template ffi::Error softmax_fwd_typed<JAXNORM_TYPED>(cudaStream_t, const ffi::AnyBuffer&, const ffi::AnyBuffer&,
                                                     ffi::Result<ffi::AnyBuffer>&, bool, bool, Rows);
template ffi::Error softmax_bwd_typed<JAXNORM_TYPED>(cudaStream_t, const ffi::AnyBuffer&, const ffi::AnyBuffer&,
                                                     const ffi::AnyBuffer&, ffi::Result<ffi::AnyBuffer>&, bool, bool,
                                                     Rows);

}  // namespace jaxnorm

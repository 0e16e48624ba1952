// Softmax / log-softmax CPU handlers: the online (max, sum) normalizer in one pass per row, then
// the output pass. Same formulas as the CUDA kernels (common/softmax_math.h).
#include "common/signatures.h"
#include "common/softmax_math.h"
#include "common/stats.h"
#include "cpu/host_float.h"

namespace jaxnorm {
namespace {

template <class T>
void softmax_fwd_rows(const T* x, const bool* mask, T* y, Rows s, bool log) {
  for (int64_t r = 0; r < s.rows; ++r) {
    const T* xr = x + r * s.cols;
    const bool* mr = mask ? mask + r * s.cols : nullptr;
    MaxSumT<double> st = maxsum_identity<double>();
    for (int64_t c = 0; c < s.cols; ++c) {
      if (!mr || mr[c]) maxsum_push(st, static_cast<double>(to_float(xr[c])));
    }
    const SoftmaxRow row = softmax_row(static_cast<float>(st.max), static_cast<float>(st.sum), log);
    T* yr = y + r * s.cols;
    for (int64_t c = 0; c < s.cols; ++c) {
      yr[c] = from_float<T>(softmax_apply(to_float(xr[c]), !mr || mr[c], row, log));
    }
  }
}

template <class T>
void softmax_bwd_rows(const T* y, const T* dy, const bool* mask, T* dx, Rows s, bool log) {
  for (int64_t r = 0; r < s.rows; ++r) {
    const int64_t o = r * s.cols;
    double sum = 0.0;
    for (int64_t c = 0; c < s.cols; ++c) {
      sum += softmax_bwd_term(to_float(y[o + c]), to_float(dy[o + c]), !mask || mask[o + c], log);
    }
    const float sf = static_cast<float>(sum);
    for (int64_t c = 0; c < s.cols; ++c) {
      dx[o + c] = from_float<T>(
          softmax_bwd_apply(to_float(y[o + c]), to_float(dy[o + c]), !mask || mask[o + c], sf, log));
    }
  }
}

ffi::Error SoftmaxFwdCpu(ffi::AnyBuffer x, ffi::AnyBuffer mask, ffi::Result<ffi::AnyBuffer> y, bool log,
                         bool has_mask) {
  Rows s;
  JN_RETURN_IF_ERROR(rows_of(x, "x", &s));
  JN_RETURN_IF_ERROR(check_mask(mask, has_mask, s));
  const bool* m = has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr;
  return dispatch_float<CpuTypes>(x.element_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_fwd_rows<T>(static_cast<const T*>(x.untyped_data()), m, static_cast<T*>(y->untyped_data()), s, log);
    return ffi::Error::Success();
  });
}

ffi::Error SoftmaxBwdCpu(ffi::AnyBuffer y, ffi::AnyBuffer dy, ffi::AnyBuffer mask, ffi::Result<ffi::AnyBuffer> dx,
                         bool log, bool has_mask) {
  Rows s;
  JN_RETURN_IF_ERROR(rows_of(y, "y", &s));
  JN_RETURN_IF_ERROR(check_same_rows(dy, y, s, "dy"));
  JN_RETURN_IF_ERROR(check_mask(mask, has_mask, s));
  const bool* m = has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr;
  return dispatch_float<CpuTypes>(y.element_type(), "y", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_bwd_rows<T>(static_cast<const T*>(y.untyped_data()), static_cast<const T*>(dy.untyped_data()), m,
                        static_cast<T*>(dx->untyped_data()), s, log);
    return ffi::Error::Success();
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormSoftmaxFwdCpu, SoftmaxFwdCpu, softmax_fwd_signature(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormSoftmaxBwdCpu, SoftmaxBwdCpu, softmax_bwd_signature(ffi::Ffi::Bind()));

}  // namespace jaxnorm

// Softmax / log-softmax CPU handlers: chunks of rows on XLA's intra-op thread pool; per row the
// max, the sum of exps (in double), then the output pass. Same formulas as the CUDA kernels (common/softmax_math.h).
#include <cmath>

#include "common/signatures.h"
#include "common/softmax_math.h"
#include "common/stats.h"
#include "cpu/host_float.h"
#include "cpu/parallel_chunks.h"
#include "cpu/row_sum.h"

namespace jaxnorm {
namespace {

template <class T>
void softmax_fwd_rows(const T* x, const bool* mask, T* y, Rows s, bool log, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * s.cols;
    const bool* mr = mask ? mask + r * s.cols : nullptr;
    // Two passes over the row (the max, then the sum of exps), summed in double.
    float m = -INFINITY;
    for (int64_t c = 0; c < s.cols; ++c) {
      if (!mr || mr[c]) m = nan_max(m, to_float(xr[c]));
    }
    const double sum = m == -INFINITY ? 0.0 : row_sum(s.cols, [&](int64_t c) {
      return (!mr || mr[c]) ? double(expf(to_float(xr[c]) - m)) : 0.0;
    });
    const SoftmaxRow row = softmax_row(m, static_cast<float>(sum), log);
    T* yr = y + r * s.cols;
    for (int64_t c = 0; c < s.cols; ++c) {
      yr[c] = from_float<T>(softmax_apply(to_float(xr[c]), !mr || mr[c], row, log));
    }
  }
}

template <class T>
void softmax_bwd_rows(const T* y, const T* dy, const bool* mask, T* dx, Rows s, bool log, int64_t begin,
                      int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const int64_t o = r * s.cols;
    const float sf = static_cast<float>(row_sum(s.cols, [&](int64_t c) {
      return double(softmax_bwd_term(to_float(y[o + c]), to_float(dy[o + c]), !mask || mask[o + c], log));
    }));
    for (int64_t c = 0; c < s.cols; ++c) {
      dx[o + c] = from_float<T>(
          softmax_bwd_apply(to_float(y[o + c]), to_float(dy[o + c]), !mask || mask[o + c], sf, log));
    }
  }
}

ffi::Error SoftmaxFwdCpu(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer mask, ffi::Result<ffi::AnyBuffer> y, bool log,
                         bool has_mask) {
  Rows s;
  JN_RETURN_IF_ERROR(rows_of(x, "x", &s));
  JN_RETURN_IF_ERROR(check_mask(mask, has_mask, s));
  const bool* m = has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr;
  return dispatch_float<CpuTypes>(x.element_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_chunks(pool, s.rows, chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
      softmax_fwd_rows<T>(static_cast<const T*>(x.untyped_data()), m, static_cast<T*>(y->untyped_data()), s, log,
                          begin, end);
    });
    return ffi::Error::Success();
  });
}

ffi::Error SoftmaxBwdCpu(ffi::ThreadPool pool, ffi::AnyBuffer y, ffi::AnyBuffer dy, ffi::AnyBuffer mask, ffi::Result<ffi::AnyBuffer> dx,
                         bool log, bool has_mask) {
  Rows s;
  JN_RETURN_IF_ERROR(rows_of(y, "y", &s));
  JN_RETURN_IF_ERROR(check_same_rows(dy, y, s, "dy"));
  JN_RETURN_IF_ERROR(check_mask(mask, has_mask, s));
  const bool* m = has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr;
  return dispatch_float<CpuTypes>(y.element_type(), "y", [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_chunks(pool, s.rows, chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
      softmax_bwd_rows<T>(static_cast<const T*>(y.untyped_data()), static_cast<const T*>(dy.untyped_data()), m,
                          static_cast<T*>(dx->untyped_data()), s, log, begin, end);
    });
    return ffi::Error::Success();
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormSoftmaxFwdCpu, SoftmaxFwdCpu, softmax_fwd_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormSoftmaxBwdCpu, SoftmaxBwdCpu, softmax_bwd_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

}  // namespace jaxnorm

// Softmax / log-softmax CPU handlers: chunks of rows on XLA's intra-op thread pool; per row the
// max, the exps and their sum (float lanes, blocks added in double), then the output pass. Same
// formulas as the CUDA kernels (common/softmax_math.h).
#include <cmath>
#include <vector>

#include "common/signatures.h"
#include "common/softmax_math.h"
#include "cpu/host_float.h"
#include "cpu/keep.h"
#include "cpu/parallel_chunks.h"
#include "cpu/prefault.h"
#include "cpu/vec_math.h"

namespace jaxnorm {
namespace {

// One pass for the max (NaN kept), one for exp(x - max) and its sum, one for the outputs: one
// exp per element, the max and the sum computed in vector registers as they are reduced
// (vec_math.h lane_max_at, lane_sum), the output loops vectorized by the compiler. Softmax
// keeps the exps in `e` for its output pass; log-softmax needs only their sum.
template <class T, class Keep>
JN_VEC_INLINE void softmax_fwd_row(const float* xr, Keep keep, T* yr, float* e, int64_t cols, bool log,
                                   const NextRow& next) {
  const float m = lane_max_at(cols, [&](auto at) {
    using V = typename decltype(at)::V;
    return pick(keep.mask(at), at(xr), lit<V>(-INFINITY));
  });
  if (m == -INFINITY) {  // every kept logit is -inf, or none is kept: jax.nn's NaN / 0 / -inf
    const SoftmaxRow row = softmax_row(m, 0.f, log);
    for (int64_t c = 0; c < cols; ++c) yr[c] = from_float<T>(softmax_apply(xr[c], keep(c), row, log));
    return;
  }
  const auto exp_kept = [&](auto at) {
    using V = typename decltype(at)::V;
    return pick(keep.mask(at), exp_nonpos(at(xr) - m), lit<V>(0.f));
  };
  if (log) {
    const SoftmaxRow row = softmax_row(m, static_cast<float>(lane_sum(cols, exp_kept)), log);
    for_pieces(cols, next, [&](int64_t c0, auto w) {
      for (int64_t c = c0; c < c0 + w; ++c) {
        const float v = (xr[c] - row.max) - row.k;
        yr[c] = from_float<T>(keep(c) ? v : -INFINITY);
      }
    });
    return;
  }
  const SoftmaxRow row = softmax_row(m, static_cast<float>(lane_sum(cols, [&](auto at) {
                                       const auto ev = exp_kept(at);
                                       at.put(e, ev);
                                       return ev;
                                     })),
                                     log);
  if (!std::isfinite(row.k)) {  // a NaN or +inf kept: NaN where kept, and 0 where masked (jax.nn)
    for (int64_t c = 0; c < cols; ++c) yr[c] = from_float<T>(keep(c) ? e[c] * row.k : 0.f);
    return;
  }
  for_pieces(cols, next, [&](int64_t c0, auto w) {
    for (int64_t c = c0; c < c0 + w; ++c) yr[c] = from_float<T>(e[c] * row.k);
  });
}

template <class T>
JN_CPU_CLONES void softmax_fwd_rows(const T* x, const bool* mask, T* y, Rows s, bool log, int64_t begin, int64_t end) {
  float* e = log ? nullptr : row_scratch(2, s.cols);  // softmax's exps
  FloatRows<T> xf(s.cols, 0);
  for (int64_t r = begin; r < end; ++r) {
    NextRow next;
    if (r + 1 < end) {
      next.add(x + (r + 1) * s.cols);
      if (mask) next.add(mask + (r + 1) * s.cols);
    }
    if (mask) {
      softmax_fwd_row(xf(x + r * s.cols), KeepMask{mask + r * s.cols}, y + r * s.cols, e, s.cols, log, next);
    } else {
      softmax_fwd_row(xf(x + r * s.cols), KeepAll{}, y + r * s.cols, e, s.cols, log, next);
    }
  }
}

template <class T, class Keep>
JN_VEC_INLINE void softmax_bwd_row(const float* y, const float* dy, Keep keep, T* dx, int64_t cols, bool log,
                                   const NextRow& next) {
  // softmax_bwd_term's sum (dy, or dy * y, where kept), in vector registers.
  const float sf = static_cast<float>(lane_sum(cols, [&](auto at) {
    using V = typename decltype(at)::V;
    return pick(keep.mask(at), log ? at(dy) : at(dy) * at(y), lit<V>(0.f));
  }));
  if (log) {
    for_pieces(cols, next, [&](int64_t c0, auto w) {
      for (int64_t c = c0; c < c0 + w; ++c) {
        const float v = dy[c] - exp_nonpos(y[c]) * sf;
        dx[c] = from_float<T>(keep(c) ? v : 0.f);
      }
    });
  } else {
    for_pieces(cols, next, [&](int64_t c0, auto w) {
      for (int64_t c = c0; c < c0 + w; ++c) {
        const float yv = y[c], v = yv * (dy[c] - sf);
        dx[c] = from_float<T>(keep(c) ? v : 0.f);
      }
    });
  }
}

template <class T>
JN_CPU_CLONES void softmax_bwd_rows(const T* y, const T* dy, const bool* mask, T* dx, Rows s, bool log,
                                    int64_t begin, int64_t end) {
  FloatRows<T> yf(s.cols, 0), dyf(s.cols, 1);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t o = r * s.cols;
    NextRow next;
    if (r + 1 < end) {
      next.add(y + o + s.cols);
      next.add(dy + o + s.cols);
      if (mask) next.add(mask + o + s.cols);
    }
    if (mask) {
      softmax_bwd_row(yf(y + o), dyf(dy + o), KeepMask{mask + o}, dx + o, s.cols, log, next);
    } else {
      softmax_bwd_row(yf(y + o), dyf(dy + o), KeepAll{}, dx + o, s.cols, log, next);
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
    T* out = static_cast<T*>(y->untyped_data());
    const OutputPrefault prefault(out, s.size() * sizeof(T));
    parallel_chunks(pool, s.rows, row_chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
      prefault.chunk(out + begin * s.cols, (end - begin) * s.cols * sizeof(T));
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
    T* out = static_cast<T*>(dx->untyped_data());
    const OutputPrefault prefault(out, s.size() * sizeof(T));
    parallel_chunks(pool, s.rows, row_chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
      prefault.chunk(out + begin * s.cols, (end - begin) * s.cols * sizeof(T));
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

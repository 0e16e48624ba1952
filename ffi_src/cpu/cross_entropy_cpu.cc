// Softmax cross-entropy CPU handlers: chunks of rows on XLA's intra-op thread pool. Forward: per
// row the max, the sum of exps and (with smoothing) of the logits, float lanes added in double;
// backward: one pass writing dlogits. The arithmetic is common/cross_entropy_math.h's, as on GPU.
#include <cmath>

#include "common/cross_entropy_math.h"
#include "common/signatures.h"
#include "cpu/host_float.h"
#include "cpu/keep.h"
#include "cpu/parallel_chunks.h"
#include "cpu/prefault.h"
#include "cpu/vec_math.h"

namespace jaxnorm {
namespace {

// The row's statistics over its kept logits: the max, the sum of exp(x - max), with smoothing the
// sum of x, and with a mask their count; each reduced in vector registers as it is computed
// (vec_math.h lane_max_at, lane_sum) from the row as floats.
template <class Keep>
JN_VEC_INLINE CeStats ce_row_stats(const float* xr, Keep keep, int64_t cols, const CeOptions& o) {
  CeStats s{lane_max_at(cols, [&](auto at) {
              using V = typename decltype(at)::V;
              return pick(keep.mask(at), at(xr), lit<V>(-INFINITY));
            }),
            0.f, 0.f, 0.f};
  auto sum = [&](auto term) { return static_cast<float>(lane_sum(cols, term)); };
  if (s.max != s.max) {
    s.sum = NAN;
  } else if (s.max == INFINITY) {  // lse = +inf, as jax.nn.logsumexp gives
    s.sum = sum([&](auto at) {
      using V = typename decltype(at)::V;
      return pick(keep.mask(at) & (at(xr) == lit<V>(INFINITY)), lit<V>(1.f), lit<V>(0.f));
    });
  } else if (s.max > -INFINITY) {
    // x - max <= 0: exp_nonpos, whose results below 2^-126 are at most 2^-126 off, in a sum >= 1.
    s.sum = sum([&](auto at) {
      using V = typename decltype(at)::V;
      return pick(keep.mask(at), exp_nonpos(at(xr) - s.max), lit<V>(0.f));
    });
  }
  if (o.smoothing != 0.f) {
    s.xsum = sum([&](auto at) {
      using V = typename decltype(at)::V;
      return pick(keep.mask(at), at(xr), lit<V>(0.f));
    });
  }
  s.n = o.has_mask ? sum([&](auto at) {
    using V = typename decltype(at)::V;
    return pick(keep.mask(at), lit<V>(1.f), lit<V>(0.f));
  })
                   : static_cast<float>(cols);
  return s;
}

template <class T>
JN_CPU_CLONES void ce_fwd_rows(const T* x, const int32_t* labels, const bool* mask, float* loss, float* stats,
                               Rows s, CeOptions o, int64_t begin, int64_t end) {
  FloatRows<T> xf(s.cols, 0);
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = xf(x + r * s.cols);
    const CeStats st = mask ? ce_row_stats(xr, KeepMask{mask + r * s.cols}, s.cols, o)
                            : ce_row_stats(xr, KeepAll{}, s.cols, o);
    const int64_t y = labels[r];
    const float xl = ce_label_ok(y, s.cols) ? xr[y] : NAN;
    loss[r] = ce_row_loss(st, st.n, xl, y, s.cols, o, &stats[2 * r]);
    stats[2 * r + 1] = st.n;
  }
}

template <class T, class Keep>
JN_VEC_INLINE void ce_bwd_row(const float* xr, Keep keep, T* dr, int64_t cols, const CeGradRow& g,
                              const NextRow& next) {
  if (g.off || g.nan_row) {
    const T fill = from_float<T>(g.off ? 0.f : NAN);
    for (int64_t c = 0; c < cols; ++c) dr[c] = fill;
    return;
  }
  // The label's column is redone after the loop, which stays free of the comparison. x - lse <= 0.
  for_pieces(cols, next, [&](int64_t c0, auto w) {
    for (int64_t c = c0; c < c0 + w; ++c) {
      const float p = exp_nonpos(xr[c] - g.lse);
      dr[c] = from_float<T>(keep(c) ? g.a * p - g.b : 0.f);
    }
  });
  const int64_t y = g.label;
  dr[y] = from_float<T>(ce_grad(exp_nonpos(xr[y] - g.lse), keep(y), y, g));
}

template <class T>
JN_CPU_CLONES void ce_bwd_rows(const T* x, const int32_t* labels, const float* stats, const float* dloss,
                               const bool* mask, T* dx, Rows s, CeOptions o, int64_t begin, int64_t end) {
  FloatRows<T> xf(s.cols, 0);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t off = r * s.cols;
    const CeGradRow g = ce_grad_row(dloss[r], stats[2 * r], stats[2 * r + 1], labels[r], s.cols, o);
    NextRow next;
    if (r + 1 < end) {
      next.add(x + off + s.cols);
      if (mask) next.add(mask + off + s.cols);
    }
    const float* xr = g.off || g.nan_row ? nullptr : xf(x + off);
    if (mask) {
      ce_bwd_row(xr, KeepMask{mask + off}, dx + off, s.cols, g, next);
    } else {
      ce_bwd_row(xr, KeepAll{}, dx + off, s.cols, g, next);
    }
  }
}

ffi::Error CrossEntropyFwdCpu(ffi::ThreadPool pool, ffi::AnyBuffer logits, ffi::AnyBuffer labels, ffi::AnyBuffer mask,
                              ffi::Result<ffi::AnyBuffer> loss, ffi::Result<ffi::AnyBuffer> stats, float smoothing,
                              float z_loss, int64_t ignore_index, bool has_mask) {
  Rows s;
  JN_RETURN_IF_ERROR(check_cross_entropy(logits, labels, mask, has_mask, nullptr, nullptr, &s));
  const CeOptions o{smoothing, z_loss, ignore_index, has_mask};
  const bool* m = has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr;
  return dispatch_float<CpuTypes>(logits.element_type(), "logits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_chunks(pool, s.rows, row_chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
      ce_fwd_rows<T>(static_cast<const T*>(logits.untyped_data()), static_cast<const int32_t*>(labels.untyped_data()),
                     m, static_cast<float*>(loss->untyped_data()), static_cast<float*>(stats->untyped_data()), s, o,
                     begin, end);
    });
    return ffi::Error::Success();
  });
}

// The version-2 target's partials are the CUDA kernels' workspace; rows here are never split,
// and the lowering gives the CPU none (zero chunks).
ffi::Error CrossEntropyFwdV2Cpu(ffi::ThreadPool pool, ffi::AnyBuffer logits, ffi::AnyBuffer labels,
                                ffi::AnyBuffer mask, ffi::Result<ffi::AnyBuffer> loss,
                                ffi::Result<ffi::AnyBuffer> stats, ffi::Result<ffi::AnyBuffer>, float smoothing,
                                float z_loss, int64_t ignore_index, bool has_mask) {
  return CrossEntropyFwdCpu(pool, logits, labels, mask, loss, stats, smoothing, z_loss, ignore_index, has_mask);
}

ffi::Error CrossEntropyBwdCpu(ffi::ThreadPool pool, ffi::AnyBuffer logits, ffi::AnyBuffer labels, ffi::AnyBuffer stats,
                              ffi::AnyBuffer dloss, ffi::AnyBuffer mask, ffi::Result<ffi::AnyBuffer> dlogits,
                              float smoothing, float z_loss, int64_t ignore_index, bool has_mask) {
  Rows s;
  JN_RETURN_IF_ERROR(check_cross_entropy(logits, labels, mask, has_mask, &stats, &dloss, &s));
  const CeOptions o{smoothing, z_loss, ignore_index, has_mask};
  const bool* m = has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr;
  return dispatch_float<CpuTypes>(logits.element_type(), "logits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = static_cast<T*>(dlogits->untyped_data());
    const OutputPrefault prefault(out, s.size() * sizeof(T));
    parallel_chunks(pool, s.rows, row_chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
      prefault.chunk(out + begin * s.cols, (end - begin) * s.cols * sizeof(T));
      ce_bwd_rows<T>(static_cast<const T*>(logits.untyped_data()), static_cast<const int32_t*>(labels.untyped_data()),
                     static_cast<const float*>(stats.untyped_data()), static_cast<const float*>(dloss.untyped_data()),
                     m, static_cast<T*>(dlogits->untyped_data()), s, o, begin, end);
    });
    return ffi::Error::Success();
  });
}

// The forward and dlogits = weight * d loss / d logits: each chunk of rows runs the forward,
// then the backward with dloss = weight, while its rows are still in cache. `partials` is the
// CUDA kernels' workspace (none here).
ffi::Error CrossEntropyFwdGradCpu(ffi::ThreadPool pool, ffi::AnyBuffer logits, ffi::AnyBuffer labels,
                                  ffi::AnyBuffer mask, ffi::AnyBuffer weight, ffi::Result<ffi::AnyBuffer> loss,
                                  ffi::Result<ffi::AnyBuffer> dlogits, ffi::Result<ffi::AnyBuffer> stats,
                                  ffi::Result<ffi::AnyBuffer>, float smoothing, float z_loss, int64_t ignore_index,
                                  bool has_mask) {
  Rows s;
  ffi::AnyBuffer st = *stats;
  JN_RETURN_IF_ERROR(check_cross_entropy(logits, labels, mask, has_mask, &st, nullptr, &s));
  JN_RETURN_IF_ERROR(check_dtype(weight, ffi::DataType::F32, "weight"));
  JN_RETURN_IF_ERROR(check_size(weight, s.rows, "weight"));
  const CeOptions o{smoothing, z_loss, ignore_index, has_mask};
  const bool* m = has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr;
  return dispatch_float<CpuTypes>(logits.element_type(), "logits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = static_cast<const T*>(logits.untyped_data());
    const int32_t* y = static_cast<const int32_t*>(labels.untyped_data());
    float* sp = static_cast<float*>(stats->untyped_data());
    T* out = static_cast<T*>(dlogits->untyped_data());
    const OutputPrefault prefault(out, s.size() * sizeof(T));
    parallel_chunks(pool, s.rows, row_chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
      ce_fwd_rows<T>(x, y, m, static_cast<float*>(loss->untyped_data()), sp, s, o, begin, end);
      prefault.chunk(out + begin * s.cols, (end - begin) * s.cols * sizeof(T));
      ce_bwd_rows<T>(x, y, sp, static_cast<const float*>(weight.untyped_data()), m, out, s, o, begin, end);
    });
    return ffi::Error::Success();
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormCrossEntropyFwdCpu, CrossEntropyFwdCpu,
                              cross_entropy_fwd_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormCrossEntropyFwdV2Cpu, CrossEntropyFwdV2Cpu,
                              cross_entropy_fwd_v2_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormCrossEntropyBwdCpu, CrossEntropyBwdCpu,
                              cross_entropy_bwd_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormCrossEntropyFwdGradCpu, CrossEntropyFwdGradCpu,
                              cross_entropy_fwd_grad_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

}  // namespace jaxnorm

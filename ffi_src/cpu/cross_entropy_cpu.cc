// Softmax cross-entropy CPU handlers: chunks of rows on XLA's intra-op thread pool. Forward: per
// row the max, the sum of exps and (with smoothing) of the logits, float lanes added in double;
// backward: one pass writing dlogits. The arithmetic is common/cross_entropy_math.h's, as on GPU.
#include <cmath>

#include "common/cross_entropy_math.h"
#include "common/signatures.h"
#include "cpu/host_float.h"
#include "cpu/keep.h"
#include "cpu/parallel_chunks.h"
#include "cpu/vec_math.h"

namespace jaxnorm {
namespace {

template <class T, class Keep>
JN_VEC_INLINE CeStats ce_row_stats(const T* xr, Keep keep, int64_t cols, const CeOptions& o) {
  CeStats s{lane_max(cols, [&](int64_t c) { return keep(c) ? to_float(xr[c]) : -INFINITY; }), 0.f, 0.f, 0.f};
  auto sum = [&](auto term) { return static_cast<float>(block_sum(cols, term)); };
  if (s.max != s.max) {
    s.sum = NAN;
  } else if (s.max == INFINITY) {  // lse = +inf, as jax.nn.logsumexp gives
    s.sum = sum([&](int64_t c) { return keep(c) && to_float(xr[c]) == INFINITY ? 1.f : 0.f; });
  } else if (s.max > -INFINITY) {
    s.sum = sum([&](int64_t c) { return keep(c) ? exp_vec(to_float(xr[c]) - s.max) : 0.f; });
  }
  if (o.smoothing != 0.f) s.xsum = sum([&](int64_t c) { return keep(c) ? to_float(xr[c]) : 0.f; });
  s.n = o.has_mask ? sum([&](int64_t c) { return keep(c) ? 1.f : 0.f; }) : static_cast<float>(cols);
  return s;
}

template <class T>
JN_CPU_CLONES void ce_fwd_rows(const T* x, const int32_t* labels, const bool* mask, float* loss, float* stats,
                               Rows s, CeOptions o, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * s.cols;
    const CeStats st = mask ? ce_row_stats(xr, KeepMask{mask + r * s.cols}, s.cols, o)
                            : ce_row_stats(xr, KeepAll{}, s.cols, o);
    const int64_t y = labels[r];
    const float xl = ce_label_ok(y, s.cols) ? to_float(xr[y]) : NAN;
    loss[r] = ce_row_loss(st, st.n, xl, y, s.cols, o, &stats[2 * r]);
    stats[2 * r + 1] = st.n;
  }
}

template <class T, class Keep>
JN_VEC_INLINE void ce_bwd_row(const T* xr, Keep keep, T* dr, int64_t cols, const CeGradRow& g) {
  if (g.off || g.nan_row) {
    const T fill = from_float<T>(g.off ? 0.f : NAN);
    for (int64_t c = 0; c < cols; ++c) dr[c] = fill;
    return;
  }
  // The label's column is redone after the loop, which stays free of the comparison.
  for (int64_t c = 0; c < cols; ++c) {
    const float p = exp_vec(to_float(xr[c]) - g.lse);
    dr[c] = from_float<T>(keep(c) ? g.a * p - g.b : 0.f);
  }
  const int64_t y = g.label;
  dr[y] = from_float<T>(ce_grad(exp_vec(to_float(xr[y]) - g.lse), keep(y), y, g));
}

template <class T>
JN_CPU_CLONES void ce_bwd_rows(const T* x, const int32_t* labels, const float* stats, const float* dloss,
                               const bool* mask, T* dx, Rows s, CeOptions o, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const int64_t off = r * s.cols;
    const CeGradRow g = ce_grad_row(dloss[r], stats[2 * r], stats[2 * r + 1], labels[r], s.cols, o);
    if (mask) {
      ce_bwd_row(x + off, KeepMask{mask + off}, dx + off, s.cols, g);
    } else {
      ce_bwd_row(x + off, KeepAll{}, dx + off, s.cols, g);
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
    parallel_chunks(pool, s.rows, chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
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
    parallel_chunks(pool, s.rows, chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
      ce_bwd_rows<T>(static_cast<const T*>(logits.untyped_data()), static_cast<const int32_t*>(labels.untyped_data()),
                     static_cast<const float*>(stats.untyped_data()), static_cast<const float*>(dloss.untyped_data()),
                     m, static_cast<T*>(dlogits->untyped_data()), s, o, begin, end);
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

}  // namespace jaxnorm

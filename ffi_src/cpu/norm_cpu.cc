// LayerNorm / RMSNorm CPU handlers, and the residual-add variants: chunks of rows on XLA's
// intra-op thread pool, two-pass statistics and the backward's row sums in float lanes
// (vec_math.h's block sums), the scale/bias gradients summed in double. Same per-element
// formulas as the CUDA kernels (common/norm_math.h). The residual-add forward normalizes rows
// of h = x + r as it writes them; its backward adds h's cotangent as it writes dx.
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <vector>

#include "common/add_norm_args.h"
#include "common/norm_math.h"
#include "common/signatures.h"
#include "cpu/host_float.h"
#include "cpu/parallel_chunks.h"
#include "cpu/prefault.h"
#include "cpu/vec_math.h"

namespace jaxnorm {
namespace {

// scale and bias as full rows, ones and zeros where absent, so the row loops load them
// unconditionally (a conditional load is control flow, which stops vectorization).
struct FullParams {
  std::vector<float> storage;
  const float* scale;
  const float* bias;
  FullParams(const float* s, const float* b, const NormFlags& f, int64_t cols) {
    if (!f.has_scale || !f.has_bias) storage.resize(static_cast<size_t>(2 * cols));
    std::fill(storage.begin(), storage.begin() + (storage.empty() ? 0 : cols), 1.f);
    scale = f.has_scale ? s : storage.data();
    bias = f.has_bias ? b : storage.data() + cols;
  }
};

// Rows [begin, end): row(r) gives row r as floats (x, or h = x + r written as it goes), next(r)
// adds row r's inputs to a NextRow.
template <class T, class RowOf, class NextOf>
JN_CPU_CLONES void norm_fwd_rows(RowOf row, NextOf next, const float* scale, const float* bias, T* y, float* mean_out,
                   float* rstd_out, Rows s, float eps, const NormFlags& f, int64_t begin, int64_t end) {
  const double n = static_cast<double>(s.cols);
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = row(r);
    T* yr = y + r * s.cols;
    // Two passes in float lanes (the mean, then squared deviations from it): as stable as
    // Welford for rows with a large mean. The mean's terms are taken relative to the row's first
    // element, so they are deviations too: a mean of 1e4 costs no float digits, and a constant
    // row's mean is exact.
    const float x0 = f.centered && s.cols > 0 ? xr[0] : 0.f;
    const float mean =
        f.centered ? static_cast<float>(x0 + lane_sum(s.cols, [&](auto at) { return at(xr) - x0; }) / n) : 0.f;
    const float var = static_cast<float>(lane_sum(s.cols, [&](auto at) {
                                           const auto d = at(xr) - mean;
                                           return d * d;
                                         }) / n);
    const float rstd = norm_rstd(var, eps);
    mean_out[r] = mean;
    rstd_out[r] = rstd;
    NextRow nr;  // fetched during the output pass
    if (r + 1 < end) next(r + 1, nr);
    // RMSNorm without a bias: y = x * rstd * scale, without norm_apply's - 0 and + 0 (5-9% of the
    // forward; the one difference is y = -0 rather than +0 at x = -0, as the reference gives).
    if (!f.centered && !f.has_bias) {
      for_pieces(s.cols, nr, [&](int64_t c0, auto w) {
        for (int64_t c = c0; c < c0 + w; ++c) yr[c] = from_float<T>(xr[c] * rstd * scale[c]);
      });
    } else {
      for_pieces(s.cols, nr, [&](int64_t c0, auto w) {
        for (int64_t c = c0; c < c0 + w; ++c) yr[c] = from_float<T>(norm_apply(xr[c], mean, rstd, scale[c], bias[c]));
      });
    }
  }
}

// Rows [begin, end) of the backward's dx: per row one pass for mean(g) and mean(g * x_hat) (two
// float-lane sums), one for dx, x_hat recomputed rather than stored. With kAccumulate, that pass
// also adds the rows' scale/bias gradient terms to acc_scale/acc_bias (cols doubles each).
// A: the type of the row read (x, h, or y), T: dy's, D: dx's; dh (h's cotangent, D) is added to dx
// where given.
template <bool kAccumulate, class A, class T, class D>
JN_CPU_CLONES void norm_bwd_rows(const A* xin, const T* dy, const D* dh, const float* mean, const float* rstd,
                   const float* scale, const float* bias, D* dx, double* acc_scale, double* acc_bias, Rows s,
                   float eps, const NormFlags& f, int64_t begin, int64_t end) {
  if (kAccumulate) {
    std::fill(acc_scale, acc_scale + s.cols, 0.0);
    std::fill(acc_bias, acc_bias + s.cols, 0.0);
  }
  FloatRows<A> xf(s.cols, 0);
  FloatRows<T> dyf(s.cols, 1);
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = xf(xin + r * s.cols);
    const float* dyr = dyf(dy + r * s.cols);
    D* dxr = dx + r * s.cols;
    const float m = f.centered && !f.memory_efficient ? mean[r] : 0.f, rs = rstd[r];
    const auto xhat = [&](int64_t c) { return norm_xhat(xr[c], m, rs, scale[c], bias[c], eps, f); };
    const std::array<double, 2> sums = block_sums<2>(s.cols, [&](int64_t c) {
      const float g = dyr[c] * scale[c];
      return std::array<float, 2>{g, g * xhat(c)};
    });
    const float c1 = static_cast<float>(sums[0] / s.cols), c2 = static_cast<float>(sums[1] / s.cols);
    const auto dx_of = [&](int64_t c) { return norm_dx(dyr[c] * scale[c], xhat(c), rs, c1, c2, f.centered); };
    NextRow next;
    if (r + 1 < end) {
      next.add(xin + (r + 1) * s.cols);
      next.add(dy + (r + 1) * s.cols);
      if (dh != nullptr) next.add(dh + (r + 1) * s.cols);
    }
    if (dh == nullptr) {
      for_pieces(s.cols, next, [&](int64_t c0, auto w) {
        for (int64_t c = c0; c < c0 + w; ++c) dxr[c] = from_float<D>(dx_of(c));
      });
    } else {
      const D* dhr = dh + r * s.cols;
      for_pieces(s.cols, next, [&](int64_t c0, auto w) {
        for (int64_t c = c0; c < c0 + w; ++c) dxr[c] = from_float<D>(dx_of(c) + to_float(dhr[c]));
      });
    }
    // A loop of its own: mixing the 16-bit dx stores with the double sums stops vectorization.
    if (kAccumulate) {
      for (int64_t c = 0; c < s.cols; ++c) {
        acc_scale[c] += static_cast<double>(dyr[c] * xhat(c));
        acc_bias[c] += static_cast<double>(dyr[c]);
      }
    }
  }
}

constexpr int64_t kTile = 512;  // columns: two tiles of double sums take 8 KiB of L1

// Columns [c0, c1) (at most kTile) of the scale/bias gradients over rows [begin, end) (one group): double sums
// down the columns, in row order, in a tile that stays in L1. For wide rows, where a per-chunk
// row of partial sums would not fit in cache.
template <class A, class T>
JN_CPU_CLONES void norm_param_grad_cols(const A* xin, const T* dy, const float* mean, const float* rstd,
                                        const float* scale, const float* bias, float* dscale, float* dbias,
                                        Rows s, float eps, const NormFlags& f, int64_t begin, int64_t end,
                                        int64_t c0, int64_t c1) {
  double acc_s[kTile] = {}, acc_b[kTile] = {};
  const int64_t w = c1 - c0;
  for (int64_t r = begin; r < end; ++r) {
    const A* xr = xin + r * s.cols + c0;
    const T* dyr = dy + r * s.cols + c0;
    const float m = f.centered && !f.memory_efficient ? mean[r] : 0.f, rs = rstd[r];
    for (int64_t c = 0; c < w; ++c) {
      const float d = to_float(dyr[c]);
      const float xh = norm_xhat(to_float(xr[c]), m, rs, scale[c0 + c], bias[c0 + c], eps, f);
      acc_s[c] += static_cast<double>(d * xh);
      acc_b[c] += static_cast<double>(d);
    }
  }
  for (int64_t c = 0; c < w; ++c) {
    dscale[c0 + c] = static_cast<float>(acc_s[c]);
    dbias[c0 + c] = static_cast<float>(acc_b[c]);
  }
}

// Adds `parts` chunks' partials (rows of 2 * cols doubles: the scale gradient's, then the
// bias gradient's) in chunk order into the first, and writes the totals.
JN_CPU_CLONES void add_partials(double* p, int64_t parts, int64_t cols, float* dscale, float* dbias) {
  for (int64_t k = 1; k < parts; ++k) {
    const double* q = p + k * 2 * cols;
    for (int64_t c = 0; c < 2 * cols; ++c) p[c] += q[c];
  }
  for (int64_t c = 0; c < cols; ++c) {
    dscale[c] = static_cast<float>(p[c]);
    dbias[c] = static_cast<float>(p[cols + c]);
  }
}

// Above this width a row of double partial sums (16 bytes a column) no longer fits in L2, and
// the scale/bias gradients are summed down column tiles in a second pass instead.
constexpr int64_t kFusedGradMaxCols = 8192;

// The backward of `groups` row groups (each with its own scale/bias gradient row). Narrow rows:
// each group's rows split into `parts` chunks (fewer when the partials would pass 64 MiB) whose
// partial sums are added in chunk order. Wide rows: dx by row chunks, then the gradients by
// column tiles down all of a group's rows. Either way the order of every sum is fixed by the
// shape, so the gradients do not depend on the thread count.
template <class A, class T, class D>
void norm_bwd_groups(ffi::ThreadPool& pool, const A* xin, const T* dy, const D* dh, const float* mean,
                     const float* rstd, const float* scale, const float* bias, D* dx, float* dscale, float* dbias,
                     Rows s, int64_t groups, float eps, const NormFlags& f) {
  const int64_t per_group = s.rows / groups;
  const OutputPrefault prefault(dx, s.size() * sizeof(D));
  if (s.cols > kFusedGradMaxCols) {
    parallel_chunks(pool, s.rows, row_chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
      prefault.chunk(dx + begin * s.cols, (end - begin) * s.cols * sizeof(D));
      norm_bwd_rows<false>(xin, dy, dh, mean, rstd, scale, bias, dx, nullptr, nullptr, s, eps, f, begin, end);
    });
    const int64_t tiles = (s.cols + kTile - 1) / kTile;
    parallel_chunks(pool, groups * tiles, 1, [&](int64_t unit, int64_t, int64_t) {
      const int64_t grp = unit / tiles, c0 = unit % tiles * kTile;
      norm_param_grad_cols(xin, dy, mean, rstd, scale, bias, dscale + grp * s.cols, dbias + grp * s.cols, s,
                              eps, f, grp * per_group, (grp + 1) * per_group, c0, std::min(s.cols, c0 + kTile));
    });
    return;
  }
  const int64_t max_parts = std::max<int64_t>(1, (int64_t{1} << 22) / (groups * s.cols));
  const int64_t parts = std::clamp<int64_t>((per_group + chunk_rows(s.cols) - 1) / chunk_rows(s.cols), 1, max_parts);
  const int64_t grain = std::max<int64_t>(1, (per_group + parts - 1) / parts);
  // Uninitialized: each chunk zeroes its own partials, on its own thread.
  std::unique_ptr<double[]> acc(new double[static_cast<size_t>(groups * parts * 2 * s.cols)]);
  parallel_chunks(pool, groups * parts, 1, [&](int64_t unit, int64_t, int64_t) {
    const int64_t grp = unit / parts, k = unit % parts;
    const int64_t begin = grp * per_group + std::min(per_group, k * grain);
    const int64_t end = grp * per_group + std::min(per_group, (k + 1) * grain);
    double* a = acc.get() + unit * 2 * s.cols;
    prefault.chunk(dx + begin * s.cols, (end - begin) * s.cols * sizeof(D));
    norm_bwd_rows<true>(xin, dy, dh, mean, rstd, scale, bias, dx, a, a + s.cols, s, eps, f, begin, end);
  });
  for (int64_t grp = 0; grp < groups; ++grp) {
    add_partials(acc.get() + grp * parts * 2 * s.cols, parts, s.cols, dscale + grp * s.cols, dbias + grp * s.cols);
  }
}

// The forward over all rows on the pool: each chunk reads its rows as floats through the row
// source `source(begin, end)` makes for it (with buffers of the chunk's own); next(r, nr) adds
// row r's inputs to nr.
template <class T, class Source, class NextOf>
void norm_fwd_chunks(ffi::ThreadPool& pool, Source source, NextOf next, const FullParams& p, ffi::Result<ffi::AnyBuffer>& y,
                     ffi::Result<ffi::AnyBuffer>& mean, ffi::Result<ffi::AnyBuffer>& rstd, Rows s, float eps,
                     const NormFlags& f) {
  T* out = static_cast<T*>(y->untyped_data());
  const OutputPrefault prefault(out, s.size() * sizeof(T));
  parallel_chunks(pool, s.rows, row_chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
    prefault.chunk(out + begin * s.cols, (end - begin) * s.cols * sizeof(T));
    norm_fwd_rows<T>(source(begin, end), next, p.scale, p.bias, out, static_cast<float*>(mean->untyped_data()),
                     static_cast<float*>(rstd->untyped_data()), s, eps, f, begin, end);
  });
}

// The scale/bias gradients' row groups (vmap folds a batch into them), from dscale's shape.
ffi::Error param_grad_groups(ffi::Result<ffi::AnyBuffer>& dscale, Rows s, int64_t* groups) {
  const auto gdims = dscale->dimensions();
  *groups = gdims.size() == 2 ? gdims[0] : 0;
  if (*groups <= 0 || s.rows % *groups != 0) {
    return ffi::Error::InvalidArgument("jaxnorm: norm backward groups must divide the rows");
  }
  return ffi::Error::Success();
}

FullParams full_params(const ffi::AnyBuffer& scale, const ffi::AnyBuffer& bias, const NormFlags& f, Rows s) {
  return FullParams(static_cast<const float*>(scale.untyped_data()), static_cast<const float*>(bias.untyped_data()),
                    f, s.cols);
}

ffi::Error NormFwdCpu(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                      ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> mean,
                      ffi::Result<ffi::AnyBuffer> rstd, float eps, bool centered, bool has_scale,
                      bool has_bias) {
  Rows s;
  JN_RETURN_IF_ERROR(check_norm_operands(x, scale, bias, has_scale, has_bias, &s));
  const NormFlags f{centered, has_scale, has_bias, false};
  const FullParams p = full_params(scale, bias, f, s);
  return dispatch_float<CpuTypes>(x.element_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.untyped_data());
    const auto source = [&](int64_t, int64_t) {
      return [&, xf = FloatRows<T>(s.cols, 0)](int64_t r) mutable { return xf(xp + r * s.cols); };
    };
    const auto next = [&](int64_t r, NextRow& nr) { nr.add(xp + r * s.cols); };
    norm_fwd_chunks<T>(pool, source, next, p, y, mean, rstd, s, eps, f);
    return ffi::Error::Success();
  });
}

ffi::Error AddNormFwdCpu(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer residual, ffi::AnyBuffer scale,
                         ffi::AnyBuffer bias, ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> h,
                         ffi::Result<ffi::AnyBuffer> mean, ffi::Result<ffi::AnyBuffer> rstd, float eps,
                         bool centered, bool has_scale, bool has_bias) {
  Rows s;
  JN_RETURN_IF_ERROR(check_add_norm_fwd(x, residual, scale, bias, has_scale, has_bias, &s));
  const NormFlags f{centered, has_scale, has_bias, false};
  const FullParams p = full_params(scale, bias, f, s);
  return dispatch_add_norm_fwd<CpuTypes>(x, residual, *h, [&](auto xt, auto rt, auto ht) {
    using T = typename decltype(xt)::type;
    using R = typename decltype(rt)::type;
    using H = typename decltype(ht)::type;
    const T* xp = static_cast<const T*>(x.untyped_data());
    const R* rp = static_cast<const R*>(residual.untyped_data());
    H* hp = static_cast<H*>(h->untyped_data());
    const OutputPrefault prefault(hp, s.size() * sizeof(H));
    // Row r of h = x + r, summed in float32 and rounded to H (as jnp's x + r), written to h and
    // normalized as rounded: the backward reads h back.
    const auto source = [&](int64_t begin, int64_t end) {
      prefault.chunk(hp + begin * s.cols, (end - begin) * s.cols * sizeof(H));
      return [&, buf = row_scratch(0, s.cols)](int64_t r) mutable {
        const T* xr = xp + r * s.cols;
        const R* rr = rp + r * s.cols;
        H* hr = hp + r * s.cols;
        for (int64_t c = 0; c < s.cols; ++c) hr[c] = from_float<H>(to_float(xr[c]) + to_float(rr[c]));
        for (int64_t c = 0; c < s.cols; ++c) buf[c] = to_float(hr[c]);
        return static_cast<const float*>(buf);
      };
    };
    const auto next = [&](int64_t r, NextRow& nr) {
      nr.add(xp + r * s.cols);
      nr.add(rp + r * s.cols);
    };
    norm_fwd_chunks<T>(pool, source, next, p, y, mean, rstd, s, eps, f);
    return ffi::Error::Success();
  });
}

ffi::Error NormBwdCpu(ffi::ThreadPool pool, ffi::AnyBuffer xin, ffi::AnyBuffer dy, ffi::AnyBuffer mean, ffi::AnyBuffer rstd,
                      ffi::AnyBuffer scale, ffi::AnyBuffer bias, ffi::Result<ffi::AnyBuffer> dx,
                      ffi::Result<ffi::AnyBuffer> dscale, ffi::Result<ffi::AnyBuffer> dbias,
                      ffi::Result<ffi::AnyBuffer> /*workspace: the CUDA kernels' partials*/, float eps,
                      bool centered, bool has_scale, bool has_bias, bool memory_efficient) {
  Rows s;
  int64_t groups;
  JN_RETURN_IF_ERROR(check_norm_operands(xin, scale, bias, has_scale, has_bias, &s));
  JN_RETURN_IF_ERROR(check_same_rows(dy, xin, s, "dy"));
  JN_RETURN_IF_ERROR(param_grad_groups(dscale, s, &groups));
  const NormFlags f{centered, has_scale, has_bias, memory_efficient};
  const FullParams p = full_params(scale, bias, f, s);
  return dispatch_float<CpuTypes>(xin.element_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    norm_bwd_groups<T, T, T>(pool, static_cast<const T*>(xin.untyped_data()), static_cast<const T*>(dy.untyped_data()),
                             nullptr, static_cast<const float*>(mean.untyped_data()),
                             static_cast<const float*>(rstd.untyped_data()), p.scale, p.bias,
                             static_cast<T*>(dx->untyped_data()), static_cast<float*>(dscale->untyped_data()),
                             static_cast<float*>(dbias->untyped_data()), s, groups, eps, f);
    return ffi::Error::Success();
  });
}

ffi::Error AddNormBwdCpu(ffi::ThreadPool pool, ffi::AnyBuffer hin, ffi::AnyBuffer dy, ffi::AnyBuffer dh,
                         ffi::AnyBuffer mean, ffi::AnyBuffer rstd, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                         ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dscale,
                         ffi::Result<ffi::AnyBuffer> dbias, ffi::Result<ffi::AnyBuffer> /*workspace*/, float eps,
                         bool centered, bool has_scale, bool has_bias, bool memory_efficient, bool has_dh) {
  Rows s;
  int64_t groups;
  JN_RETURN_IF_ERROR(check_add_norm_bwd(hin, dy, dh, *dx, scale, bias, has_scale, has_bias, has_dh, &s));
  JN_RETURN_IF_ERROR(param_grad_groups(dscale, s, &groups));
  const NormFlags f{centered, has_scale, has_bias, memory_efficient};
  const FullParams p = full_params(scale, bias, f, s);
  return dispatch_add_norm_bwd<CpuTypes>(dy, hin, *dx, memory_efficient, [&](auto yt, auto at, auto ht) {
    using T = typename decltype(yt)::type;
    using A = typename decltype(at)::type;
    using H = typename decltype(ht)::type;
    norm_bwd_groups<A, T, H>(pool, static_cast<const A*>(hin.untyped_data()), static_cast<const T*>(dy.untyped_data()),
                             has_dh ? static_cast<const H*>(dh.untyped_data()) : nullptr,
                             static_cast<const float*>(mean.untyped_data()),
                             static_cast<const float*>(rstd.untyped_data()), p.scale, p.bias,
                             static_cast<H*>(dx->untyped_data()), static_cast<float*>(dscale->untyped_data()),
                             static_cast<float*>(dbias->untyped_data()), s, groups, eps, f);
    return ffi::Error::Success();
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormNormFwdCpu, NormFwdCpu, norm_fwd_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormNormBwdCpu, NormBwdCpu, norm_bwd_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormAddNormFwdCpu, AddNormFwdCpu,
                              add_norm_fwd_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormAddNormBwdCpu, AddNormBwdCpu,
                              add_norm_bwd_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

}  // namespace jaxnorm

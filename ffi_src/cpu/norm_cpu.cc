// LayerNorm / RMSNorm CPU handlers: chunks of rows on XLA's intra-op thread pool, two-pass
// double-precision statistics and backward sums. Same per-element formulas as the CUDA kernels
// (common/norm_math.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/norm_math.h"
#include "common/signatures.h"
#include "cpu/host_float.h"
#include "cpu/parallel_chunks.h"
#include "cpu/row_sum.h"
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

template <class T>
JN_CPU_CLONES void norm_fwd_rows(const T* x, const float* scale, const float* bias, T* y, float* mean_out,
                   float* rstd_out, Rows s, float eps, const NormFlags& f, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * s.cols;
    T* yr = y + r * s.cols;
    // Two passes in double (the mean, then squared deviations from it): as stable as Welford
    // for rows with a large mean, without a division per element.
    const double n = static_cast<double>(s.cols);
    const double mean_d = f.centered ? row_sum(s.cols, [&](int64_t c) { return double(to_float(xr[c])); }) / n : 0.0;
    const double var_d = row_sum(s.cols, [&](int64_t c) {
                           const double d = double(to_float(xr[c])) - mean_d;
                           return d * d;
                         }) / n;
    const float mean = static_cast<float>(mean_d), var = static_cast<float>(var_d);
    const float rstd = norm_rstd(var, eps);
    mean_out[r] = mean;
    rstd_out[r] = rstd;
    for (int64_t c = 0; c < s.cols; ++c) yr[c] = from_float<T>(norm_apply(to_float(xr[c]), mean, rstd, scale[c], bias[c]));
  }
}

// Rows [begin, end) of the backward: dx, and the rows' scale/bias gradient sums added to
// acc_scale/acc_bias (cols doubles each).
template <class T>
JN_CPU_CLONES void norm_bwd_rows(const T* xin, const T* dy, const float* mean, const float* rstd, const float* scale,
                   const float* bias, T* dx, double* acc_scale, double* acc_bias, Rows s, float eps,
                   const NormFlags& f, int64_t begin, int64_t end) {
  std::vector<float> xhat(s.cols), g(s.cols);
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = xin + r * s.cols;
    const T* dyr = dy + r * s.cols;
    const float m = f.centered && !f.memory_efficient ? mean[r] : 0.f;
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t c = 0; c < s.cols; ++c) {
      const float gamma = scale[c], beta = bias[c];
      const float d = to_float(dyr[c]);
      xhat[c] = norm_xhat(to_float(xr[c]), m, rstd[r], gamma, beta, eps, f);
      g[c] = d * gamma;
      sum_g += g[c];
      sum_gx += static_cast<double>(g[c]) * xhat[c];
      acc_scale[c] += static_cast<double>(d) * xhat[c];
      acc_bias[c] += d;
    }
    const float c1 = static_cast<float>(sum_g / s.cols);
    const float c2 = static_cast<float>(sum_gx / s.cols);
    T* dxr = dx + r * s.cols;
    for (int64_t c = 0; c < s.cols; ++c) {
      dxr[c] = from_float<T>(norm_dx(g[c], xhat[c], rstd[r], c1, c2, f.centered));
    }
  }
}

// Each group's rows split into `parts` chunks (fewer when the per-chunk sums would pass 64 MiB);
// chunk sums are added in chunk order, so the gradients do not depend on the thread count.
template <class T>
void norm_bwd_groups(ffi::ThreadPool& pool, const T* xin, const T* dy, const float* mean, const float* rstd,
                     const float* scale, const float* bias, T* dx, float* dscale, float* dbias, Rows s,
                     int64_t groups, float eps, const NormFlags& f) {
  const int64_t per_group = s.rows / groups;
  const int64_t max_parts = std::max<int64_t>(1, (int64_t{1} << 22) / (groups * s.cols));
  const int64_t parts = std::clamp<int64_t>((per_group + chunk_rows(s.cols) - 1) / chunk_rows(s.cols), 1, max_parts);
  const int64_t grain = std::max<int64_t>(1, (per_group + parts - 1) / parts);
  std::vector<double> acc(static_cast<size_t>(groups * parts * 2 * s.cols), 0.0);
  parallel_chunks(pool, groups * parts, 1, [&](int64_t unit, int64_t, int64_t) {
    const int64_t grp = unit / parts, k = unit % parts;
    const int64_t begin = grp * per_group + std::min(per_group, k * grain);
    const int64_t end = grp * per_group + std::min(per_group, (k + 1) * grain);
    double* a = acc.data() + unit * 2 * s.cols;
    norm_bwd_rows<T>(xin, dy, mean, rstd, scale, bias, dx, a, a + s.cols, s, eps, f, begin, end);
  });
  for (int64_t grp = 0; grp < groups; ++grp) {
    for (int64_t c = 0; c < s.cols; ++c) {
      double sg = 0.0, sb = 0.0;
      for (int64_t k = 0; k < parts; ++k) {
        const double* a = acc.data() + (grp * parts + k) * 2 * s.cols;
        sg += a[c];
        sb += a[s.cols + c];
      }
      dscale[grp * s.cols + c] = static_cast<float>(sg);
      dbias[grp * s.cols + c] = static_cast<float>(sb);
    }
  }
}

ffi::Error NormFwdCpu(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                      ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> mean,
                      ffi::Result<ffi::AnyBuffer> rstd, float eps, bool centered, bool has_scale,
                      bool has_bias) {
  Rows s;
  JN_RETURN_IF_ERROR(check_norm_operands(x, scale, bias, has_scale, has_bias, &s));
  const NormFlags f{centered, has_scale, has_bias, false};
  const FullParams p(static_cast<const float*>(scale.untyped_data()), static_cast<const float*>(bias.untyped_data()),
                     f, s.cols);
  return dispatch_float<CpuTypes>(x.element_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_chunks(pool, s.rows, chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
      norm_fwd_rows<T>(static_cast<const T*>(x.untyped_data()), p.scale, p.bias, static_cast<T*>(y->untyped_data()),
                       static_cast<float*>(mean->untyped_data()), static_cast<float*>(rstd->untyped_data()), s,
                       eps, f, begin, end);
    });
    return ffi::Error::Success();
  });
}

ffi::Error NormBwdCpu(ffi::ThreadPool pool, ffi::AnyBuffer xin, ffi::AnyBuffer dy, ffi::AnyBuffer mean, ffi::AnyBuffer rstd,
                      ffi::AnyBuffer scale, ffi::AnyBuffer bias, ffi::Result<ffi::AnyBuffer> dx,
                      ffi::Result<ffi::AnyBuffer> dscale, ffi::Result<ffi::AnyBuffer> dbias,
                      ffi::Result<ffi::AnyBuffer> /*workspace: the CUDA kernels' partials*/, float eps,
                      bool centered, bool has_scale, bool has_bias, bool memory_efficient) {
  Rows s;
  JN_RETURN_IF_ERROR(check_norm_operands(xin, scale, bias, has_scale, has_bias, &s));
  JN_RETURN_IF_ERROR(check_same_rows(dy, xin, s, "dy"));
  const auto gdims = dscale->dimensions();
  const int64_t groups = gdims.size() == 2 ? gdims[0] : 0;
  if (groups <= 0 || s.rows % groups != 0) {
    return ffi::Error::InvalidArgument("jaxnorm: norm_bwd groups must divide the rows");
  }
  const NormFlags f{centered, has_scale, has_bias, memory_efficient};
  const FullParams p(static_cast<const float*>(scale.untyped_data()), static_cast<const float*>(bias.untyped_data()),
                     f, s.cols);
  return dispatch_float<CpuTypes>(xin.element_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    norm_bwd_groups<T>(pool, static_cast<const T*>(xin.untyped_data()), static_cast<const T*>(dy.untyped_data()),
                     static_cast<const float*>(mean.untyped_data()), static_cast<const float*>(rstd.untyped_data()),
                     p.scale, p.bias,
                     static_cast<T*>(dx->untyped_data()), static_cast<float*>(dscale->untyped_data()),
                     static_cast<float*>(dbias->untyped_data()), s, groups, eps, f);
    return ffi::Error::Success();
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormNormFwdCpu, NormFwdCpu, norm_fwd_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormNormBwdCpu, NormBwdCpu, norm_bwd_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

}  // namespace jaxnorm

// LayerNorm / RMSNorm CPU handlers: one row at a time, Welford statistics, double-precision
// accumulation of the backward sums. Same formulas as the CUDA kernels (common/norm_math.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/norm_math.h"
#include "common/signatures.h"
#include "common/stats.h"
#include "cpu/host_float.h"

namespace jaxnorm {
namespace {

template <class T>
void norm_fwd_rows(const T* x, const float* scale, const float* bias, T* y, float* mean_out,
                   float* rstd_out, Rows s, float eps, const NormFlags& f) {
  for (int64_t r = 0; r < s.rows; ++r) {
    const T* xr = x + r * s.cols;
    T* yr = y + r * s.cols;
    float mean = 0.f, var;
    if (f.centered) {
      WelfordT<double> w = welford_identity<double>();
      for (int64_t c = 0; c < s.cols; ++c) welford_push(w, static_cast<double>(to_float(xr[c])));
      mean = static_cast<float>(w.mean);
      var = static_cast<float>(w.m2 / w.count);
    } else {
      double ss = 0.0;
      for (int64_t c = 0; c < s.cols; ++c) {
        const double v = to_float(xr[c]);
        ss += v * v;
      }
      var = static_cast<float>(ss / static_cast<double>(s.cols));
    }
    const float rstd = norm_rstd(var, eps);
    mean_out[r] = mean;
    rstd_out[r] = rstd;
    for (int64_t c = 0; c < s.cols; ++c) {
      const float g = f.has_scale ? scale[c] : 1.f;
      const float b = f.has_bias ? bias[c] : 0.f;
      yr[c] = from_float<T>(norm_apply(to_float(xr[c]), mean, rstd, g, b));
    }
  }
}

template <class T>
void norm_bwd_rows(const T* xin, const T* dy, const float* mean, const float* rstd, const float* scale,
                   const float* bias, T* dx, float* dscale, float* dbias, Rows s, int64_t groups,
                   float eps, const NormFlags& f) {
  const int64_t rows_per_group = groups > 0 ? s.rows / groups : 0;
  std::vector<double> acc_scale(s.cols), acc_bias(s.cols);
  std::vector<float> xhat(s.cols), g(s.cols);
  for (int64_t grp = 0; grp < groups; ++grp) {
    std::fill(acc_scale.begin(), acc_scale.end(), 0.0);
    std::fill(acc_bias.begin(), acc_bias.end(), 0.0);
    for (int64_t r = grp * rows_per_group; r < (grp + 1) * rows_per_group; ++r) {
      const T* xr = xin + r * s.cols;
      const T* dyr = dy + r * s.cols;
      const float m = f.centered && !f.memory_efficient ? mean[r] : 0.f;
      double sum_g = 0.0, sum_gx = 0.0;
      for (int64_t c = 0; c < s.cols; ++c) {
        const float gamma = f.has_scale ? scale[c] : 1.f;
        const float beta = f.has_bias ? bias[c] : 0.f;
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
    for (int64_t c = 0; c < s.cols; ++c) {
      dscale[grp * s.cols + c] = static_cast<float>(acc_scale[c]);
      dbias[grp * s.cols + c] = static_cast<float>(acc_bias[c]);
    }
  }
}

ffi::Error NormFwdCpu(ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                      ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> mean,
                      ffi::Result<ffi::AnyBuffer> rstd, float eps, bool centered, bool has_scale,
                      bool has_bias) {
  Rows s;
  JN_RETURN_IF_ERROR(check_norm_operands(x, scale, bias, has_scale, has_bias, &s));
  const NormFlags f{centered, has_scale, has_bias, false};
  return dispatch_float<CpuTypes>(x.element_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    norm_fwd_rows<T>(static_cast<const T*>(x.untyped_data()), static_cast<const float*>(scale.untyped_data()),
                     static_cast<const float*>(bias.untyped_data()), static_cast<T*>(y->untyped_data()),
                     static_cast<float*>(mean->untyped_data()), static_cast<float*>(rstd->untyped_data()), s,
                     eps, f);
    return ffi::Error::Success();
  });
}

ffi::Error NormBwdCpu(ffi::AnyBuffer xin, ffi::AnyBuffer dy, ffi::AnyBuffer mean, ffi::AnyBuffer rstd,
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
  return dispatch_float<CpuTypes>(xin.element_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    norm_bwd_rows<T>(static_cast<const T*>(xin.untyped_data()), static_cast<const T*>(dy.untyped_data()),
                     static_cast<const float*>(mean.untyped_data()), static_cast<const float*>(rstd.untyped_data()),
                     static_cast<const float*>(scale.untyped_data()), static_cast<const float*>(bias.untyped_data()),
                     static_cast<T*>(dx->untyped_data()), static_cast<float*>(dscale->untyped_data()),
                     static_cast<float*>(dbias->untyped_data()), s, groups, eps, f);
    return ffi::Error::Success();
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormNormFwdCpu, NormFwdCpu, norm_fwd_signature(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormNormBwdCpu, NormBwdCpu, norm_bwd_signature(ffi::Ffi::Bind()));

}  // namespace jaxnorm

// Linear attention CPU handler: the recurrence itself, per row (batch x head) in float: at each
// position (in order, or backwards when `reverse`) the state S += b_j^T c_j and z += b_j (with
// the rank-1 term also w += beta_j c_j and u += beta_j), then num_i = a_i S + alpha_i w and
// den_i = a_i . z + alpha_i u. Rows spread over XLA's intra-op thread pool; each writes only its
// own outputs, so results do not depend on the threads.
#include <algorithm>
#include <vector>

#include "common/linear_attention_args.h"
#include "common/signatures.h"
#include "cpu/host_float.h"
#include "cpu/parallel_chunks.h"
#include "cpu/vec_math.h"

namespace jaxnorm {
namespace {

struct Scratch {
  std::vector<float> s, z, w, a, b, c, num;
};

template <class T, class OutT>
JN_CPU_CLONES void scan_row(const LinearAttentionArgs& x, int64_t r, Scratch& w) {
  const int64_t K = x.k_dim, V = x.v_dim, L = x.len;
  const T* a = static_cast<const T*>(x.a) + r * L * K;
  const T* b = static_cast<const T*>(x.b) + r * L * K;
  const T* c = static_cast<const T*>(x.c) + r * L * V;
  OutT* out = static_cast<OutT*>(x.out) + r * L * V;
  float* den = x.den + r * L;
  w.s.assign(K * V, 0.f);
  w.z.assign(K, 0.f);
  w.w.assign(V, 0.f);
  w.a.resize(K);
  w.b.resize(K);
  w.c.resize(V);
  w.num.resize(V);
  const float* alpha = x.alpha != nullptr ? x.alpha + r * L : nullptr;
  const float* beta = x.beta != nullptr ? x.beta + r * L : nullptr;
  float u = 0.f;
  float *s = w.s.data(), *z = w.z.data(), *wv = w.w.data(), *ai = w.a.data(), *bi = w.b.data(), *ci = w.c.data(), *num = w.num.data();
  for (int64_t step = 0; step < L; ++step) {
    const int64_t i = x.reverse ? L - 1 - step : step;
    for (int64_t k = 0; k < K; ++k) {
      ai[k] = to_float(a[i * K + k]);
      bi[k] = to_float(b[i * K + k]);
    }
    for (int64_t v = 0; v < V; ++v) ci[v] = to_float(c[i * V + v]);
    float d = 0.f;
    for (int64_t v = 0; v < V; ++v) num[v] = 0.f;
    for (int64_t k = 0; k < K; ++k) {
      float* sk = s + k * V;
      const float bk = bi[k], ak = ai[k];
      for (int64_t v = 0; v < V; ++v) {
        sk[v] += bk * ci[v];
        num[v] += ak * sk[v];
      }
      z[k] += bk;
      d += ak * z[k];
    }
    if (alpha != nullptr) {
      const float al = alpha[i], be = beta[i];
      u += be;
      for (int64_t v = 0; v < V; ++v) {
        wv[v] += be * ci[v];
        num[v] += al * wv[v];
      }
      d += al * u;
    }
    den[i] = d;
    const float inv = x.normalize ? 1.f / (d + x.eps) : 1.f;
    for (int64_t v = 0; v < V; ++v) out[i * V + v] = from_float<OutT>(x.normalize ? num[v] * inv : num[v]);
  }
}

ffi::Error run(ffi::ThreadPool& pool, const LinearAttentionArgs& x) {
  return dispatch_float<CpuTypes>(x.dtype, "linear_attention's operands", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, x.len * x.k_dim * x.v_dim));
    parallel_chunks(pool, x.rows, grain, [&](int64_t, int64_t begin, int64_t end) {
      Scratch w;
      for (int64_t r = begin; r < end; ++r) {
        if (x.f32_out) {
          scan_row<T, float>(x, r, w);
        } else {
          scan_row<T, T>(x, r, w);
        }
      }
    });
    return ffi::Error::Success();
  });
}

ffi::Error LinearAttentionCpu(ffi::ThreadPool pool, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer c,
                              ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> den,
                              ffi::Result<ffi::AnyBuffer> workspace, bool normalize, float eps, bool reverse,
                              bool f32_out, int64_t parts) {
  LinearAttentionArgs x;
  JN_RETURN_IF_ERROR(linear_attention_args(a, b, c, nullptr, nullptr, *out, *den, *workspace, normalize, eps, reverse,
                                           f32_out, parts, &x));
  return run(pool, x);
}

ffi::Error LinearAttentionRank1Cpu(ffi::ThreadPool pool, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer c,
                                   ffi::AnyBuffer alpha, ffi::AnyBuffer beta, ffi::Result<ffi::AnyBuffer> out,
                                   ffi::Result<ffi::AnyBuffer> den, ffi::Result<ffi::AnyBuffer> workspace,
                                   bool normalize, float eps, bool reverse, bool f32_out, int64_t parts) {
  LinearAttentionArgs x;
  JN_RETURN_IF_ERROR(linear_attention_args(a, b, c, &alpha, &beta, *out, *den, *workspace, normalize, eps, reverse,
                                           f32_out, parts, &x));
  return run(pool, x);
}

}  // namespace

#define JN_CPU_BIND ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormLinearAttentionCpu, LinearAttentionCpu, linear_attention_signature<false>(JN_CPU_BIND));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormLinearAttentionRank1Cpu, LinearAttentionRank1Cpu,
                              linear_attention_signature<true>(JN_CPU_BIND));
#undef JN_CPU_BIND

}  // namespace jaxnorm

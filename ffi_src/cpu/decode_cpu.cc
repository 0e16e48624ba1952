// Decode attention CPU handlers: per (sequence, kv head), the scores of its query heads against
// every valid row, an exact softmax and the weighted sum of V, all in float; (sequence, kv head)
// pairs spread over XLA's intra-op thread pool (each writes only its own outputs).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/decode_args.h"
#include "common/signatures.h"
#include "cpu/host_float.h"
#include "cpu/parallel_chunks.h"

namespace jaxnorm {
namespace {

template <class T>
void attend(const DecodeArgs& a, int64_t b, int64_t kvh) {
  const int64_t D = a.head_dim, length = a.lengths[b];
  const int64_t off = b * a.batch_stride + kvh * a.head_stride;
  const T* kc = static_cast<const T*>(a.k) + off;
  const T* vc = static_cast<const T*>(a.v) + off;
  const int64_t new_off = (b * a.kv_heads + kvh) * D;
  const T* kn = a.has_new ? static_cast<const T*>(a.k_new) + new_off : nullptr;
  const T* vn = a.has_new ? static_cast<const T*>(a.v_new) + new_off : nullptr;
  const bool valid = length >= 0 && length <= a.max_len - (a.has_new ? 1 : 0);
  const int64_t n = valid ? length + (a.has_new ? 1 : 0) : 0;
  auto row = [&](const T* cache, const T* fresh, int64_t pos) { return pos == length ? fresh : cache + pos * a.pos_stride; };

  std::vector<float> q(D), s(n), o(D);
  for (int64_t j = 0; j < a.group; ++j) {
    const int64_t h = kvh * a.group + j;
    T* out = static_cast<T*>(a.out) + (b * a.q_heads + h) * D;
    if (!valid) {
      for (int64_t d = 0; d < D; ++d) out[d] = from_float<T>(std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const T* qh = static_cast<const T*>(a.q) + (b * a.q_heads + h) * D;
    for (int64_t d = 0; d < D; ++d) q[d] = to_float(qh[d]) * a.scale;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t p = 0; p < n; ++p) {
      const T* kr = row(kc, kn, p);
      float dot = 0.f;
      for (int64_t d = 0; d < D; ++d) dot += q[d] * to_float(kr[d]);
      s[p] = dot;
      mx = std::fmax(mx, dot);
    }
    float sum = 0.f;
    std::fill(o.begin(), o.end(), 0.f);
    for (int64_t p = 0; p < n; ++p) {
      const float e = std::exp(s[p] - mx);
      sum += e;
      const T* vr = row(vc, vn, p);
      for (int64_t d = 0; d < D; ++d) o[d] += e * to_float(vr[d]);
    }
    for (int64_t d = 0; d < D; ++d) out[d] = from_float<T>(sum > 0.f ? o[d] / sum : 0.f);
  }
  if (a.has_new && valid) {
    const int64_t dst = off + length * a.pos_stride;
    std::memcpy(static_cast<T*>(a.k_out) + dst, kn, D * sizeof(T));
    std::memcpy(static_cast<T*>(a.v_out) + dst, vn, D * sizeof(T));
  }
}

ffi::Error run(ffi::ThreadPool& pool, const DecodeArgs& a) {
  if (a.has_new) {  // results that XLA could not alias start as copies of the caches
    if (a.k_out != a.k) std::memcpy(a.k_out, a.k, a.cache_bytes());
    if (a.v_out != a.v) std::memcpy(a.v_out, a.v, a.cache_bytes());
  }
  return dispatch_float<CpuTypes>(a.dtype, "the caches", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, a.max_len * a.head_dim));
    parallel_chunks(pool, a.batch * a.kv_heads, grain, [&](int64_t, int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) attend<T>(a, i / a.kv_heads, i % a.kv_heads);
    });
    return ffi::Error::Success();
  });
}

ffi::Error DecodeAttentionCpu(ffi::ThreadPool pool, ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                              ffi::AnyBuffer lengths, ffi::Result<ffi::AnyBuffer> out,
                              ffi::Result<ffi::AnyBuffer> partials, float scale, int64_t splits, bool blhd) {
  DecodeArgs a;
  JN_RETURN_IF_ERROR(decode_args(q, k, v, lengths, nullptr, nullptr, *out, nullptr, nullptr, *partials, scale,
                                 /*splits=*/1, blhd, &a));
  return run(pool, a);
}

ffi::Error DecodeAttentionAppendCpu(ffi::ThreadPool pool, ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                                    ffi::AnyBuffer lengths, ffi::AnyBuffer k_new, ffi::AnyBuffer v_new,
                                    ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> k_out,
                                    ffi::Result<ffi::AnyBuffer> v_out, ffi::Result<ffi::AnyBuffer> partials,
                                    float scale, int64_t splits, bool blhd) {
  DecodeArgs a;
  JN_RETURN_IF_ERROR(decode_args(q, k, v, lengths, &k_new, &v_new, *out, &*k_out, &*v_out, *partials, scale,
                                 /*splits=*/1, blhd, &a));
  return run(pool, a);
}

}  // namespace

#define JN_CPU_BIND ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormDecodeAttentionCpu, DecodeAttentionCpu, decode_attention_signature<false>(JN_CPU_BIND));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormDecodeAttentionAppendCpu, DecodeAttentionAppendCpu,
                              decode_attention_signature<true>(JN_CPU_BIND));
#undef JN_CPU_BIND

}  // namespace jaxnorm

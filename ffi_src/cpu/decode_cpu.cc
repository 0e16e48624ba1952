// Decode attention CPU handlers: per (sequence, kv head), the scores of its query heads against
// every valid row, an exact softmax and the weighted sum of V, all in float (loops the compiler
// vectorizes, cpu/vec_math.h); (sequence, kv head) pairs spread over XLA's intra-op thread pool
// (each writes only its own outputs; chunks fixed by the shape).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/decode_args.h"
#include "common/signatures.h"
#include "cpu/host_float.h"
#include "cpu/parallel_chunks.h"
#include "cpu/vec_math.h"

namespace jaxnorm {
namespace {

template <class T>
JN_VEC_INLINE void row_to_float(const T* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}

// A dot product over 8 float lanes in a fixed order (head_dim is a multiple of 8): vectorizes.
JN_VEC_INLINE float dot8(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  for (int64_t d = 0; d < n; d += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[d + l] * b[d + l];
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// Scratch of one (sequence, kv head): the group's scaled queries, one row as floats, the scores
// (then weights) of every head, the weighted sums and the weights' sums.
struct Scratch {
  std::vector<float> q, row, s, o, sum;
};

// One (sequence, kv head): every row is read once (converted to float once) for all the query
// heads sharing it; an exact softmax per head (max first, weights summed in double).
template <class T>
JN_CPU_CLONES void attend(const DecodeArgs& a, int64_t b, int64_t kvh, Scratch& w) {
  const int64_t D = a.head_dim, G = a.group, length = a.lengths[b];
  const int64_t off = b * a.batch_stride + kvh * a.head_stride;
  const T* kc = static_cast<const T*>(a.k) + off;
  const T* vc = static_cast<const T*>(a.v) + off;
  const int64_t new_off = (b * a.kv_heads + kvh) * D;
  const T* kn = a.has_new ? static_cast<const T*>(a.k_new) + new_off : nullptr;
  const T* vn = a.has_new ? static_cast<const T*>(a.v_new) + new_off : nullptr;
  const bool valid = length >= 0 && length <= a.max_len - (a.has_new ? 1 : 0);
  const int64_t n = valid ? length + (a.has_new ? 1 : 0) : 0;
  T* out = static_cast<T*>(a.out) + (b * a.q_heads + kvh * G) * D;
  if (!valid) {
    for (int64_t i = 0; i < G * D; ++i) out[i] = from_float<T>(std::numeric_limits<float>::quiet_NaN());
    return;
  }
  auto row = [&](const T* cache, const T* fresh, int64_t pos) { return pos == length ? fresh : cache + pos * a.pos_stride; };
  w.q.resize(G * D);
  w.row.resize(D);
  w.s.resize(G * n);
  w.o.assign(G * D, 0.f);
  float* q = w.q.data();
  float* r = w.row.data();
  float* s = w.s.data();
  float* o = w.o.data();
  row_to_float(static_cast<const T*>(a.q) + (b * a.q_heads + kvh * G) * D, q, G * D);
  for (int64_t i = 0; i < G * D; ++i) q[i] *= a.scale;
  for (int64_t p = 0; p < n; ++p) {
    row_to_float(row(kc, kn, p), r, D);
    for (int64_t j = 0; j < G; ++j) s[j * n + p] = dot8(q + j * D, r, D);
  }
  w.sum.resize(G);
  float* sum = w.sum.data();
  for (int64_t j = 0; j < G; ++j) {
    float* sj = s + j * n;
    const float mx = lane_max(n, [&](int64_t c) { return sj[c]; });
    for (int64_t p = 0; p < n; ++p) sj[p] = exp_vec(sj[p] - mx);
    sum[j] = static_cast<float>(block_sum(n, [&](int64_t c) { return sj[c]; }));
  }
  for (int64_t p = 0; p < n; ++p) {
    row_to_float(row(vc, vn, p), r, D);
    for (int64_t j = 0; j < G; ++j) {
      const float e = s[j * n + p];
      float* oj = o + j * D;
      for (int64_t d = 0; d < D; ++d) oj[d] += e * r[d];
    }
  }
  for (int64_t j = 0; j < G; ++j) {
    for (int64_t d = 0; d < D; ++d) out[j * D + d] = from_float<T>(sum[j] > 0.f ? o[j * D + d] / sum[j] : 0.f);
  }
  if (a.has_new) {
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
      Scratch w;
      for (int64_t i = begin; i < end; ++i) attend<T>(a, i / a.kv_heads, i % a.kv_heads, w);
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

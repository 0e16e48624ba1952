// Decode attention's operands, checked once for both platforms.
//   q (B, Hq, D); caches (B, Hkv, L, D) ["BHLD"] or (B, L, Hkv, D) ["BLHD"]; lengths (B) s32;
//   k_new, v_new (B, Hkv, D) when appending; results: out (B, Hq, D), the caches (aliased),
//   partials (B * Hq * splits * (2 + D) | 0) f32 workspace.
#pragma once

#include <string>

#include "common/ffi_util.h"

namespace jaxnorm {

struct DecodeArgs {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, group = 1, max_len = 0, head_dim = 0, splits = 1;
  int64_t batch_stride = 0, head_stride = 0, pos_stride = 0;  // cache strides in elements
  float scale = 1.f;
  bool has_new = false;
  ffi::DataType dtype = ffi::DataType::F32;
  const void *q = nullptr, *k = nullptr, *v = nullptr, *k_new = nullptr, *v_new = nullptr;
  const int32_t* lengths = nullptr;
  void *out = nullptr, *k_out = nullptr, *v_out = nullptr;
  float* partials = nullptr;
  int64_t elem_bytes() const { return static_cast<int64_t>(ffi::ByteWidth(dtype)); }
  int64_t cache_bytes() const { return batch * kv_heads * max_len * head_dim * elem_bytes(); }
};

inline ffi::Error decode_error(const std::string& what) {
  return ffi::Error::InvalidArgument("jaxnorm: decode_attention: " + what);
}

inline ffi::Error decode_args(const ffi::AnyBuffer& q, const ffi::AnyBuffer& k, const ffi::AnyBuffer& v,
                              const ffi::AnyBuffer& lengths, const ffi::AnyBuffer* k_new,
                              const ffi::AnyBuffer* v_new, ffi::AnyBuffer& out, ffi::AnyBuffer* k_out,
                              ffi::AnyBuffer* v_out, ffi::AnyBuffer& partials, float scale, int64_t splits,
                              bool blhd, DecodeArgs* a) {
  auto qd = q.dimensions();
  auto kd = k.dimensions();
  if (qd.size() != 3 || kd.size() != 4) return decode_error("q must be rank 3 and the caches rank 4");
  a->batch = qd[0];
  a->q_heads = qd[1];
  a->head_dim = qd[2];
  a->kv_heads = blhd ? kd[2] : kd[1];
  a->max_len = blhd ? kd[1] : kd[2];
  a->dtype = q.element_type();
  if (kd[0] != a->batch || kd[3] != a->head_dim || a->kv_heads < 1 || a->q_heads % a->kv_heads != 0) {
    return decode_error("the caches must be (batch, kv_heads, max_len, head_dim) with kv_heads dividing q's heads");
  }
  if (k.element_type() != a->dtype || v.element_type() != a->dtype || out.element_type() != a->dtype) {
    return decode_error("q, the caches and the output must share one dtype");
  }
  auto vd = v.dimensions();
  for (size_t i = 0; i < 4; ++i) {
    if (vd.size() != 4 || vd[i] != kd[i]) return decode_error("the caches must have one shape");
  }
  if (a->max_len >= (int64_t{1} << 31) - 1) return decode_error("max_len must be below 2^31 - 1");
  JN_RETURN_IF_ERROR(check_dtype(lengths, ffi::DataType::S32, "lengths"));
  JN_RETURN_IF_ERROR(check_size(lengths, a->batch, "lengths"));
  JN_RETURN_IF_ERROR(check_size(out, a->batch * a->q_heads * a->head_dim, "the output"));
  a->group = a->q_heads / a->kv_heads;
  a->splits = splits < 1 ? 1 : splits;
  a->scale = scale;
  a->pos_stride = blhd ? a->kv_heads * a->head_dim : a->head_dim;
  a->head_stride = blhd ? a->head_dim : a->max_len * a->head_dim;
  a->batch_stride = a->kv_heads * a->max_len * a->head_dim;
  a->q = q.untyped_data();
  a->k = k.untyped_data();
  a->v = v.untyped_data();
  a->lengths = static_cast<const int32_t*>(lengths.untyped_data());
  a->out = out.untyped_data();
  if (a->splits > 1) {
    JN_RETURN_IF_ERROR(check_dtype(partials, ffi::DataType::F32, "partials"));
    JN_RETURN_IF_ERROR(check_size(partials, a->batch * a->q_heads * a->splits * (2 + a->head_dim), "partials"));
    a->partials = static_cast<float*>(partials.untyped_data());
  }
  a->has_new = k_new != nullptr;
  if (a->has_new) {
    for (const ffi::AnyBuffer* n : {k_new, v_new}) {
      if (n->element_type() != a->dtype) return decode_error("k_new and v_new must have the caches' dtype");
      JN_RETURN_IF_ERROR(check_size(*n, a->batch * a->kv_heads * a->head_dim, "k_new / v_new"));
    }
    if (a->max_len < 1) return decode_error("appending needs max_len >= 1");
    a->k_new = k_new->untyped_data();
    a->v_new = v_new->untyped_data();
    a->k_out = k_out->untyped_data();
    a->v_out = v_out->untyped_data();
  }
  return ffi::Error::Success();
}

}  // namespace jaxnorm

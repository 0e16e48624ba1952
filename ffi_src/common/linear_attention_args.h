// Linear attention's operands, checked once for both platforms.
//   a, b (R, L, K); c (R, L, V); one float dtype; the rank-1 form adds alpha, beta (R, L) f32.
//   Results: out (R, L, V) in that dtype (f32 with f32_out), den (R, L) f32, workspace (R * parts * (K+1) * (V+1)
//   | 0) f32: per (row, part) the part's augmented state, row-major (K+1) x (V+1):
//   [[sum b^T c, sum b], [sum beta c, sum beta]] (the sums of [b, beta]^T [c, 1]).
//   With the score s(i, j) = a_i . b_j (+ alpha_i beta_j): num_i = sum over j <= i (j >= i if
//   reverse) of s(i, j) c_j, den_i = the same sum of s(i, j); out = num / (den + eps) if
//   normalize, else num.
#pragma once

#include <string>

#include "common/ffi_util.h"

namespace jaxnorm {

struct LinearAttentionArgs {
  int64_t rows = 0, len = 0, k_dim = 0, v_dim = 0, parts = 1;
  float eps = 0.f;
  bool normalize = false, reverse = false, f32_out = false;
  ffi::DataType dtype = ffi::DataType::F32;
  const void *a = nullptr, *b = nullptr, *c = nullptr;
  const float *alpha = nullptr, *beta = nullptr;  // the rank-1 term, when given
  void* out = nullptr;
  float* den = nullptr;
  float* states = nullptr;  // the workspace, when parts > 1
};

inline ffi::Error linear_attention_error(const std::string& what) {
  return ffi::Error::InvalidArgument("jaxnorm: linear_attention: " + what);
}

inline bool linear_attention_dim_ok(int64_t d) { return d == 32 || d == 64 || d == 128 || d == 256; }

inline ffi::Error linear_attention_args(const ffi::AnyBuffer& a, const ffi::AnyBuffer& b, const ffi::AnyBuffer& c,
                                        const ffi::AnyBuffer* alpha, const ffi::AnyBuffer* beta, ffi::AnyBuffer& out, ffi::AnyBuffer& den, ffi::AnyBuffer& workspace,
                                        bool normalize, float eps, bool reverse, bool f32_out, int64_t parts,
                                        LinearAttentionArgs* x) {
  auto ad = a.dimensions();
  auto bd = b.dimensions();
  auto cd = c.dimensions();
  if (ad.size() != 3 || bd.size() != 3 || cd.size() != 3) return linear_attention_error("operands must be rank 3");
  x->rows = ad[0];
  x->len = ad[1];
  x->k_dim = ad[2];
  x->v_dim = cd[2];
  x->dtype = a.element_type();
  if (bd[0] != x->rows || bd[1] != x->len || bd[2] != x->k_dim || cd[0] != x->rows || cd[1] != x->len) {
    return linear_attention_error("b must have a's shape and c a's rows and length");
  }
  if (!linear_attention_dim_ok(x->k_dim) || !linear_attention_dim_ok(x->v_dim)) {
    return linear_attention_error("head dims must be 32, 64, 128 or 256");
  }
  if (b.element_type() != x->dtype || c.element_type() != x->dtype ||
      out.element_type() != (f32_out ? ffi::DataType::F32 : x->dtype)) {
    return linear_attention_error("operands must share one dtype, the output theirs (float32 with f32_out)");
  }
  if (x->len >= (int64_t{1} << 31) - 1) return linear_attention_error("len must be below 2^31 - 1");
  JN_RETURN_IF_ERROR(check_size(out, x->rows * x->len * x->v_dim, "the output"));
  JN_RETURN_IF_ERROR(check_dtype(den, ffi::DataType::F32, "den"));
  JN_RETURN_IF_ERROR(check_size(den, x->rows * x->len, "den"));
  x->parts = parts < 1 ? 1 : parts;
  if (x->parts > 1) {
    JN_RETURN_IF_ERROR(check_dtype(workspace, ffi::DataType::F32, "the workspace"));
    JN_RETURN_IF_ERROR(check_size(workspace, x->rows * x->parts * (x->k_dim + 1) * (x->v_dim + 1), "the workspace"));
    x->states = static_cast<float*>(workspace.untyped_data());
  }
  if (alpha != nullptr) {
    for (const ffi::AnyBuffer* r : {alpha, beta}) {
      JN_RETURN_IF_ERROR(check_dtype(*r, ffi::DataType::F32, "alpha / beta"));
      JN_RETURN_IF_ERROR(check_size(*r, x->rows * x->len, "alpha / beta"));
    }
    x->alpha = static_cast<const float*>(alpha->untyped_data());
    x->beta = static_cast<const float*>(beta->untyped_data());
  }
  x->normalize = normalize;
  x->eps = eps;
  x->reverse = reverse;
  x->f32_out = f32_out;
  x->a = a.untyped_data();
  x->b = b.untyped_data();
  x->c = c.untyped_data();
  x->out = out.untyped_data();
  x->den = static_cast<float*>(den.untyped_data());
  return ffi::Error::Success();
}

}  // namespace jaxnorm

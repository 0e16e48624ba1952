// The sampling CPU handlers' passes over a whole row, written as branch-free loops that the
// compiler vectorizes (cpu/vec_math.h's clones): the row's values and keys, and the filtered
// logits. Every value that decides a kept
// set or a token is computed with the same float operations as the scalar definition
// (common/sampling_math.h), so the handlers select the same tokens whatever the vector width.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/sampling_math.h"
#include "cpu/host_float.h"
#include "cpu/vec_math.h"

namespace jaxnorm {
namespace {  // internal linkage: each clone's ifunc resolver stays in its translation unit

// One row's sampling view: values v (sampling_value), their keys (when a top-k or top-p
// threshold needs them), the maximum m; and the inverse-transform draw's masses.
struct RowView {
  std::vector<float> v;
  std::vector<uint32_t> key;
  float m = -INFINITY;
  std::vector<uint64_t> mass;
};

template <class T>
JN_CPU_CLONES void load_row(const T* x, const float* bias, int64_t cols, bool want_keys, RowView* rv) {
  rv->v.resize(cols);
  float* v = rv->v.data();
  if (bias) {
    for (int64_t c = 0; c < cols; ++c) v[c] = sampling::sampling_value(to_float(x[c]) + bias[c], false);
  } else {
    for (int64_t c = 0; c < cols; ++c) v[c] = sampling::sampling_value(to_float(x[c]), false);
  }
  const float m = lane_max_at(cols, [&](auto at) { return at(static_cast<const float*>(v)); });  // no NaN in v
  const bool inf_row = m == INFINITY;
  if (inf_row) {
    for (int64_t c = 0; c < cols; ++c) v[c] = v[c] == INFINITY ? 0.0f : -INFINITY;
  }
  rv->m = inf_row ? 0.0f : m;
  if (!want_keys) return;
  rv->key.resize(cols);
  uint32_t* key = rv->key.data();
  for (int64_t c = 0; c < cols; ++c) {
    uint32_t b;
    std::memcpy(&b, &v[c], 4);
    key[c] = sampling::order_key(b);
  }
}

// Without keys (no top-k or top-p) the threshold is 0, which every key passes.
JN_VEC_INLINE bool kept(const RowView& rv, const sampling::RowParams& q, uint32_t t, bool keys, int64_t c) {
  return (!keys || rv.key[c] >= t) && (rv.v[c] - rv.m) * q.inv_t >= q.log_min_p;
}

// The filtered row: x (+ bias, rounded to T) where kept, -inf elsewhere.
template <class T>
JN_CPU_CLONES void write_filtered(const T* x, const float* bias, const RowView& rv, const sampling::RowParams& q,
                                  uint32_t t, bool keys, int64_t cols, T* y) {
  const T neg_inf = from_float<T>(-INFINITY);
  if (rv.m == -INFINITY) {
    for (int64_t c = 0; c < cols; ++c) y[c] = neg_inf;
    return;
  }
  auto keep = [&](int64_t c) { return rv.v[c] != -INFINITY && kept(rv, q, t, keys, c); };
  if (bias) {
    for (int64_t c = 0; c < cols; ++c) y[c] = keep(c) ? from_float<T>(to_float(x[c]) + bias[c]) : neg_inf;
  } else {
    for (int64_t c = 0; c < cols; ++c) y[c] = keep(c) ? x[c] : neg_inf;
  }
}

// The filter that keeps every token but NaN (no top-k, top-p or min-p) in one pass: y = x (+ bias,
// rounded to T), -inf for NaN. Returns the maximum of y as floats; where that is +inf the row
// may be a +inf row (whose finite tokens are dropped), and the caller redoes it the general way.
// (A finite sum that rounds to +-inf in T gives the same y either way: the general pass keeps it
// and rounds it alike.)
template <class T>
JN_CPU_CLONES float filter_nan(const T* x, const float* bias, int64_t cols, T* y) {
  const T neg_inf = from_float<T>(-INFINITY);
  if (bias) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = to_float(x[c]) + bias[c];
      y[c] = v != v ? neg_inf : from_float<T>(v);
    }
  } else {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = to_float(x[c]);
      y[c] = v != v ? neg_inf : x[c];
    }
  }
  return lane_max(cols, [&](int64_t c) { return to_float(y[c]); });
}

}  // namespace
}  // namespace jaxnorm

// The FFI signatures of jaxnorm's handlers, shared by the CPU and CUDA registrations so the two
// platforms can never disagree on operand order or attribute names. Each function appends the
// operands, results and attributes to a binding that already holds the platform's context.
//
// Layouts (the Python primitives in jaxnorm/_ops.py build exactly these):
//   norm_fwd:    x (R, C), scale (C | 0) f32, bias (C | 0) f32
//                -> y (R, C), mean (R) f32, rstd (R) f32
//   norm_bwd:    xin (R, C) [x, or y when memory_efficient], dy (R, C), mean (R), rstd (R),
//                scale (C | 0) f32, bias (C | 0) f32
//                -> dx (R, C), dscale (G, C) f32, dbias (G, C) f32, workspace (G, P, 2, C) f32
//                   G = independent row groups (vmap folds its axis into rows and groups)
//   softmax_fwd: x (R, C), mask (R, C | 0) pred -> y (R, C)
//   softmax_bwd: y (R, C), dy (R, C), mask (R, C | 0) pred -> dx (R, C)
//   sample:      logits (R, V), keys (G, W) u32, temperature (P) f32, top_k (P) s32, top_p (P) f32,
//                log_min_p (P) f32 -> tokens (R) s32
//   filter:      logits (R, V), top_k (P) s32, top_p (P) f32, log_min_p (P) f32 -> filtered (R, V)
//   top_k:       x (R, V) -> indices (R, k) s32; attribute k
//                "Grouped" operands (keys and the per-row parameters, each its own G or P) have a
//                first dimension dividing R: row r reads entry r / (R / G), so one entry serves
//                every row and vmap folds a batch axis into them as into the rows.
#pragma once

#include <utility>

#include "common/ffi_util.h"

namespace jaxnorm {

template <class B>
auto norm_fwd_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Attr<float>("epsilon")
      .template Attr<bool>("centered")
      .template Attr<bool>("has_scale")
      .template Attr<bool>("has_bias");
}

template <class B>
auto norm_bwd_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Attr<float>("epsilon")
      .template Attr<bool>("centered")
      .template Attr<bool>("has_scale")
      .template Attr<bool>("has_bias")
      .template Attr<bool>("memory_efficient");
}

template <class B>
auto softmax_fwd_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Attr<bool>("log")
      .template Attr<bool>("has_mask");
}

template <class B>
auto softmax_bwd_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Attr<bool>("log")
      .template Attr<bool>("has_mask");
}

template <class B>
auto sample_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>();
}

template <class B>
auto filter_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>();
}

template <class B>
auto top_k_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>().template Ret<ffi::AnyBuffer>().template Attr<int64_t>("k");
}

// A grouped operand (see the layouts above): `dtype`, rank <= 2, its first dimension G >= 1
// dividing `rows`. Returns G and the trailing width through the pointers.
inline ffi::Error check_grouped(const ffi::AnyBuffer& b, ffi::DataType dtype, int64_t rows, const char* what,
                                int64_t* groups, int64_t* width = nullptr) {
  JN_RETURN_IF_ERROR(check_dtype(b, dtype, what));
  auto dims = b.dimensions();
  const int64_t g = dims.size() == 0 ? 1 : dims[0];
  const int64_t w = dims.size() == 2 ? dims[1] : 1;
  if (dims.size() > 2 || g < 1 || w < 1 || (rows > 0 && rows % g != 0)) {
    return ffi::Error::InvalidArgument(std::string("jaxnorm: ") + what + " must have a first dimension dividing " +
                                       std::to_string(rows) + " rows");
  }
  *groups = g;
  if (width) *width = w;
  return ffi::Error::Success();
}

// A grouped operand's data, entry count G and trailing width, checked by check_grouped.
struct Grouped {
  const void* data = nullptr;
  int64_t n = 1, width = 1;
};

inline ffi::Error grouped(const ffi::AnyBuffer& b, ffi::DataType dt, int64_t rows, const char* what, Grouped* g) {
  JN_RETURN_IF_ERROR(check_grouped(b, dt, rows, what, &g->n, &g->width));
  g->data = b.untyped_data();
  return ffi::Error::Success();
}

// The sampling handlers' operands after the logits (keys and temperature: sample only).
struct SamplingOperands {
  Rows shape;
  Grouped keys, temps, top_k, top_p, log_min_p;
  bool has_keys = false, has_temps = false;
};

inline ffi::Error sampling_operands(const ffi::AnyBuffer& x, const ffi::AnyBuffer* keys,
                                    const ffi::AnyBuffer* temps, const ffi::AnyBuffer& top_k,
                                    const ffi::AnyBuffer& top_p, const ffi::AnyBuffer& log_min_p,
                                    SamplingOperands* o) {
  JN_RETURN_IF_ERROR(rows_of(x, "logits", &o->shape));
  const int64_t rows = o->shape.rows;
  o->has_keys = keys != nullptr;
  o->has_temps = temps != nullptr;
  if (keys) JN_RETURN_IF_ERROR(grouped(*keys, ffi::DataType::U32, rows, "keys", &o->keys));
  if (temps) JN_RETURN_IF_ERROR(grouped(*temps, ffi::DataType::F32, rows, "temperature", &o->temps));
  JN_RETURN_IF_ERROR(grouped(top_k, ffi::DataType::S32, rows, "top_k", &o->top_k));
  JN_RETURN_IF_ERROR(grouped(top_p, ffi::DataType::F32, rows, "top_p", &o->top_p));
  return grouped(log_min_p, ffi::DataType::F32, rows, "min_p", &o->log_min_p);
}

// Validates the norm operands shared by both directions; fills `shape`.
inline ffi::Error check_norm_operands(const ffi::AnyBuffer& x, const ffi::AnyBuffer& scale,
                                      const ffi::AnyBuffer& bias, bool has_scale, bool has_bias,
                                      Rows* shape) {
  JN_RETURN_IF_ERROR(rows_of(x, "x", shape));
  if (has_scale) {
    JN_RETURN_IF_ERROR(check_dtype(scale, ffi::DataType::F32, "scale"));
    JN_RETURN_IF_ERROR(check_size(scale, shape->cols, "scale"));
  }
  if (has_bias) {
    JN_RETURN_IF_ERROR(check_dtype(bias, ffi::DataType::F32, "bias"));
    JN_RETURN_IF_ERROR(check_size(bias, shape->cols, "bias"));
  }
  return ffi::Error::Success();
}

// Validates the optional softmax mask: absent, or a PRED buffer with one entry per element.
inline ffi::Error check_mask(const ffi::AnyBuffer& mask, bool has_mask, const Rows& shape) {
  if (!has_mask) return ffi::Error::Success();
  JN_RETURN_IF_ERROR(check_dtype(mask, ffi::DataType::PRED, "mask"));
  return check_size(mask, shape.size(), "mask");
}

}  // namespace jaxnorm

// The residual-add norm's operand checks and dtype combinations, shared by the CPU and CUDA
// handlers (layouts in signatures.h).
#pragma once

#include <string>
#include <type_traits>

#include "common/signatures.h"

namespace jaxnorm {

// Calls f(TypeTag<U>{}) with U = T (x's type, `same`) where `dtype` is x's, U = float32 where it
// is float32 (an fp32 residual stream); anything else is an error naming `what`.
template <class Types, class T, class F>
ffi::Error same_or_f32(ffi::DataType same, ffi::DataType dtype, const char* what, F&& f) {
  if (dtype == same) return f(TypeTag<T>{});
  if (dtype == ffi::DataType::F32) return f(TypeTag<typename Types::f32>{});
  return ffi::Error::InvalidArgument(std::string("jaxnorm: ") + what + " must have x's dtype or float32");
}

// The forward's (residual, h) types for x of type T: h is T or float32, the residual T or h's
// type. Calls f(TypeTag<T>, TypeTag<R>, TypeTag<H>).
template <class Types, class T, class F>
ffi::Error dispatch_add_norm_fwd_for(ffi::DataType xt, ffi::DataType rt, ffi::DataType ht, F&& f) {
  if (rt != xt && rt != ht) return ffi::Error::InvalidArgument("jaxnorm: residual must have x's dtype or h's");
  return same_or_f32<Types, T>(xt, ht, "h", [&](auto hh) {
    return same_or_f32<Types, T>(xt, rt, "residual", [&](auto rr) {
      using H = typename decltype(hh)::type;
      using R = typename decltype(rr)::type;
      // R = f32 with h of x's 16-bit type, refused above, is never instantiated.
      if constexpr (std::is_same_v<R, H> || std::is_same_v<R, T>) {
        return f(TypeTag<T>{}, rr, hh);
      } else {
        return ffi::Error::InvalidArgument("jaxnorm: residual must have x's dtype or h's");
      }
    });
  });
}

// The forward's (x, residual, h) types. Calls f(TypeTag<T>, TypeTag<R>, TypeTag<H>).
template <class Types, class F>
ffi::Error dispatch_add_norm_fwd(const ffi::AnyBuffer& x, const ffi::AnyBuffer& r, const ffi::AnyBuffer& h, F&& f) {
  const ffi::DataType xt = x.element_type(), rt = r.element_type(), ht = h.element_type();
  return dispatch_float<Types>(xt, "x", [&](auto t) {
    return dispatch_add_norm_fwd_for<Types, typename decltype(t)::type>(xt, rt, ht, f);
  });
}

// The backward's (hin, dx) types for dy of type T: dx has h's type (T or float32), hin is h or,
// in memory-efficient mode, y (T). Calls f(TypeTag<T>, TypeTag<A>, TypeTag<H>).
template <class Types, class T, class F>
ffi::Error dispatch_add_norm_bwd_for(ffi::DataType yt, ffi::DataType at, ffi::DataType ht, bool memory_efficient,
                                     F&& f) {
  if (at != (memory_efficient ? yt : ht)) {
    return ffi::Error::InvalidArgument("jaxnorm: add_norm backward reads h (y in memory-efficient mode)");
  }
  return same_or_f32<Types, T>(yt, ht, "dx", [&](auto hh) {
    using H = typename decltype(hh)::type;
    if (memory_efficient) return f(TypeTag<T>{}, TypeTag<T>{}, hh);
    return f(TypeTag<T>{}, hh, hh);
  });
}

// The backward's (dy, hin, dx) types. Calls f(TypeTag<T>, TypeTag<A>, TypeTag<H>).
template <class Types, class F>
ffi::Error dispatch_add_norm_bwd(const ffi::AnyBuffer& dy, const ffi::AnyBuffer& hin, const ffi::AnyBuffer& dx,
                                 bool memory_efficient, F&& f) {
  const ffi::DataType yt = dy.element_type(), at = hin.element_type(), ht = dx.element_type();
  return dispatch_float<Types>(yt, "dy", [&](auto t) {
    return dispatch_add_norm_bwd_for<Types, typename decltype(t)::type>(yt, at, ht, memory_efficient, f);
  });
}

// x, residual, scale and bias of the forward; fills `shape`.
inline ffi::Error check_add_norm_fwd(const ffi::AnyBuffer& x, const ffi::AnyBuffer& r, const ffi::AnyBuffer& scale,
                                     const ffi::AnyBuffer& bias, bool has_scale, bool has_bias, Rows* shape) {
  JN_RETURN_IF_ERROR(check_norm_operands(x, scale, bias, has_scale, has_bias, shape));
  Rows rs;
  JN_RETURN_IF_ERROR(rows_of(r, "residual", &rs));
  if (rs.rows != shape->rows || rs.cols != shape->cols) {
    return ffi::Error::InvalidArgument("jaxnorm: residual must have x's shape");
  }
  return ffi::Error::Success();
}

// hin, dy, dh, scale and bias of the backward; fills `shape`.
inline ffi::Error check_add_norm_bwd(const ffi::AnyBuffer& hin, const ffi::AnyBuffer& dy, const ffi::AnyBuffer& dh,
                                     const ffi::AnyBuffer& dx, const ffi::AnyBuffer& scale, const ffi::AnyBuffer& bias,
                                     bool has_scale, bool has_bias, bool has_dh, Rows* shape) {
  JN_RETURN_IF_ERROR(check_norm_operands(hin, scale, bias, has_scale, has_bias, shape));
  Rows r;
  JN_RETURN_IF_ERROR(rows_of(dy, "dy", &r));
  if (r.rows != shape->rows || r.cols != shape->cols) return ffi::Error::InvalidArgument("jaxnorm: dy must match h's shape");
  if (has_dh) JN_RETURN_IF_ERROR(check_same_rows(dh, dx, *shape, "dh"));
  return ffi::Error::Success();
}

}  // namespace jaxnorm

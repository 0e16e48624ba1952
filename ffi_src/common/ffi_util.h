// FFI plumbing shared by every handler: dtype dispatch, 2-D row views, argument checks.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "xla/ffi/api/ffi.h"

#define JN_RETURN_IF_ERROR(expr)            \
  do {                                      \
    ::xla::ffi::Error _jn_err = (expr);     \
    if (_jn_err.failure()) return _jn_err;  \
  } while (0)

namespace jaxnorm {

namespace ffi = xla::ffi;

template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with the platform's storage type for the buffer's float dtype.
// `Types` names the platform's types: struct { using f32 = ...; using bf16 = ...; using f16 = ...; }.
template <class Types, class F>
ffi::Error dispatch_float(ffi::DataType dtype, const char* what, F&& f) {
  switch (dtype) {
    case ffi::DataType::F32:
      return f(TypeTag<typename Types::f32>{});
    case ffi::DataType::BF16:
      return f(TypeTag<typename Types::bf16>{});
    case ffi::DataType::F16:
      return f(TypeTag<typename Types::f16>{});
    default:
      return ffi::Error::InvalidArgument(std::string("jaxnorm: ") + what +
                                         " must be float32, bfloat16 or float16 (dtype code " +
                                         std::to_string(static_cast<int>(dtype)) + ")");
  }
}

// A (rows, cols) view of a rank-2 buffer; the Python primitives always pass rank-2 operands.
struct Rows {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t size() const { return rows * cols; }
};

inline ffi::Error rows_of(const ffi::AnyBuffer& b, const char* what, Rows* out) {
  auto dims = b.dimensions();
  if (dims.size() != 2) {
    return ffi::Error::InvalidArgument(std::string("jaxnorm: ") + what + " must be rank 2, got rank " +
                                       std::to_string(dims.size()));
  }
  *out = Rows{dims[0], dims[1]};
  return ffi::Error::Success();
}

// Checks that `b` is a (rows, cols) buffer of the same shape and dtype as `like`.
inline ffi::Error check_same_rows(const ffi::AnyBuffer& b, const ffi::AnyBuffer& like, const Rows& shape,
                                  const char* what) {
  Rows r;
  JN_RETURN_IF_ERROR(rows_of(b, what, &r));
  if (r.rows != shape.rows || r.cols != shape.cols || b.element_type() != like.element_type()) {
    return ffi::Error::InvalidArgument(std::string("jaxnorm: ") + what + " must match x's shape and dtype");
  }
  return ffi::Error::Success();
}

inline ffi::Error check_size(const ffi::AnyBuffer& b, int64_t want, const char* what) {
  if (static_cast<int64_t>(b.element_count()) != want) {
    return ffi::Error::InvalidArgument(std::string("jaxnorm: ") + what + " has " +
                                       std::to_string(b.element_count()) + " elements, expected " +
                                       std::to_string(want));
  }
  return ffi::Error::Success();
}

inline ffi::Error check_dtype(const ffi::AnyBuffer& b, ffi::DataType want, const char* what) {
  if (b.element_type() != want) {
    return ffi::Error::InvalidArgument(std::string("jaxnorm: ") + what + " has the wrong dtype");
  }
  return ffi::Error::Success();
}


}  // namespace jaxnorm

// Builds the {target name: capsule} dict a nanobind module hands to jax.ffi.register_ffi_target.
// Target names are the same on every platform; the Python side registers each module's dict for
// its own platform.
#pragma once

#include <type_traits>

#include <nanobind/nanobind.h>

#include "xla/ffi/api/c_api.h"

namespace jaxnorm {

template <typename T>
nanobind::capsule encapsulate_ffi_handler(T* fn) {
  static_assert(std::is_invocable_r_v<XLA_FFI_Error*, T, XLA_FFI_CallFrame*>,
                "Encapsulated function must be an XLA FFI handler");
  return nanobind::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace jaxnorm

#define JN_REGISTER(dict, name, symbol) dict[name] = ::jaxnorm::encapsulate_ffi_handler(symbol)

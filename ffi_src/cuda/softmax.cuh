// The softmax / log-softmax forward and backward launches for one dtype T, which
// softmax_typed.cuh defines in a translation unit of its own per dtype (CMakeLists.txt), so that
// the build compiles the dtypes' kernels in parallel.
#pragma once

#include <cuda_runtime.h>

#include "common/signatures.h"

namespace jaxnorm {

template <class T>
ffi::Error softmax_fwd_typed(cudaStream_t stream, const ffi::AnyBuffer& x, const ffi::AnyBuffer& mask,
                             ffi::Result<ffi::AnyBuffer>& y, bool log, bool has_mask, Rows s);

template <class T>
ffi::Error softmax_bwd_typed(cudaStream_t stream, const ffi::AnyBuffer& y, const ffi::AnyBuffer& dy,
                             const ffi::AnyBuffer& mask, ffi::Result<ffi::AnyBuffer>& dx, bool log, bool has_mask,
                             Rows s);

}  // namespace jaxnorm

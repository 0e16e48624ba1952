// The launch of the register-held sampler (mass_rows.cuh, compiled in mass_rows.cu) for the
// jaxnorm_sample_by_mass target's rows.
#pragma once

#include <cuda_runtime.h>

#include "common/ffi_util.h"
#include "cuda/sampling/select_common.cuh"

namespace jaxnorm {
namespace sampling {

// Launches mass_rows over a's rows and sets *launched, or leaves it false where the rows do not
// fit the kernel (rows not of whole 16-byte packs, or longer than 16 CTAs hold in registers):
// the caller then takes the general kernel, which draws the same tokens.
template <class T, bool kBias>
ffi::Error launch_mass_rows(cudaStream_t stream, SelectArgs<T> a, const char* what, bool* launched);

}  // namespace sampling
}  // namespace jaxnorm

// The launch of select_rows (row_select.cuh) for the sampling, filter and top_k handlers
// (sampling.cu): its plan and rules, defined in select_launch_typed.cuh and compiled in a
// translation unit of their own per logits dtype (CMakeLists.txt), so that the build compiles
// the dtypes' kernels in parallel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

#include "common/ffi_util.h"
#include "cuda/sampling/select_common.cuh"

namespace jaxnorm {
namespace sampling {

// The A/B switch JAXNORM_SAMPLING_RADIX=1: thresholds by radix select only, no gather.
inline bool radix_only() {
  static const bool on = std::getenv("JAXNORM_SAMPLING_RADIX") != nullptr;
  return on;
}

// JAXNORM_SAMPLING_ONE_READ: 0 never takes the one-read top-k kernel, 1 always (top-k calls), unset:
// the rule in launch_select. Read at each call, so a test can run both kernels.
inline int one_read_switch() {
  const char* v = std::getenv("JAXNORM_SAMPLING_ONE_READ");
  return v == nullptr || v[0] == 0 ? -1 : v[0] == '1' ? 1 : 0;
}

// Launches select_rows over a's rows in mode kMode (kBias: logits + an output bias), with
// extra_smem bytes of CTA 0's candidates beside each CTA's chunk.
template <class T, int kMode, bool kBias>
ffi::Error launch_select(cudaStream_t stream, SelectArgs<T> a, int64_t extra_smem, const char* what);

}  // namespace sampling
}  // namespace jaxnorm

// A generic pointer into shared memory as the 32-bit shared-window address that PTX's shared-state
// operands (mbarrier, cp.async.bulk, ldmatrix, mapa) take.
#pragma once

namespace jaxnorm {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

}  // namespace jaxnorm

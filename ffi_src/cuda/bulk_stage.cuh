// Rows staged into shared memory by the bulk-copy engine (Hopper's cp.async.bulk), completing on
// an mbarrier per stage: the copy engine reads a worker's next rows while its threads reduce and
// store the current one, without registers held for the loads in flight.
#pragma once

#include <cstdint>

#include "cuda/row_reduce.cuh"

namespace jaxnorm {

__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

// Arrives once on `bar` and adds `bytes` to the transaction count its phase waits for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to this CTA's shared
// memory, counted against `bar`'s transactions when they land.
__device__ __forceinline__ void bulk_copy_g2s(void* smem, const void* gmem, uint32_t bytes, unsigned long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(smem)),
      "l"(gmem), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
#endif
}

}  // namespace jaxnorm

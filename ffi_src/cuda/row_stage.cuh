// Double-buffered staging of each thread's packs of a row in shared memory by cp.async (sm_80+):
// the next row's loads are in flight while the thread reduces and stores this one, and they hold
// no registers. Each thread reads back only the slots it filled itself, so no barrier is needed:
// cp.async.wait_group completes the thread's own copies before its reads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.cuh"

// Knob for A/B runs: -DJAXNORM_STAGE_ROWS=0 loads each row straight into registers.
#ifndef JAXNORM_STAGE_ROWS
#define JAXNORM_STAGE_ROWS 1
#endif

namespace jaxnorm {

template <class T, int kBlock, int kPacks>
struct RowStage {
  Pack<T, kVecOf<T>> slot[2][kPacks][kBlock];  // [row parity][pack][thread]: conflict-free 16-byte reads
};

// Dynamic shared memory a forward tile launches with.
template <class T, int kBlock, int kPacks>
constexpr size_t fwd_stage_bytes() {
  return JAXNORM_STAGE_ROWS != 0 ? sizeof(RowStage<T, kBlock, kPacks>) : 0;
}

// The kernel's dynamic shared memory, as a Stage.
template <class Stage>
__device__ __forceinline__ Stage& dynamic_stage() {
  extern __shared__ __align__(16) unsigned char jn_dynamic_smem[];
  return *reinterpret_cast<Stage*>(jn_dynamic_smem);
}

// 16 bytes from global to shared memory, asynchronously (bypassing L1).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace jaxnorm

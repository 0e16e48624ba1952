// Asynchronous global -> shared copies (cp.async, sm_80+): loads in flight without registers, so
// a kernel can fetch its next row while it works on the current one. A thread's copies are
// visible to that thread once it has waited for their group; other threads need a barrier too.
#pragma once

#include <cuda_runtime.h>

namespace jaxnorm {

// 16 bytes from global `src` to shared `dst`, both 16-byte aligned; cached in L2 only.
__device__ __forceinline__ void copy_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(dst))),
               "l"(src)
               : "memory");
}

// Closes the thread's copies issued since the last commit into a group (possibly empty).
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most kPending of the thread's groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace jaxnorm

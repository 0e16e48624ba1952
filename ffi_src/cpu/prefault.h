// Output pages mapped ahead of the writes. XLA's CPU runtime can hand an output a freshly
// mapped buffer on every call (it did for 32 MiB outputs, which malloc maps anew), and then
// each first write to one of its 4 KiB pages traps into the kernel: on a 2-core machine those
// 8192 faults took most of an 8192x1024 float32 forward's time, for XLA's code and ours alike. One madvise(MADV_POPULATE_WRITE) per chunk maps the
// chunk's pages in a single system call instead: the same pages, zeroed as the faults would,
// without a trap each. Linux 5.14+; elsewhere, or when it fails, the writes fault as before.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace jaxnorm {

inline void prefault_for_write(void* p, size_t bytes) {
#if defined(__linux__)
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, absent from older headers
  constexpr uintptr_t kPage = 4096;
  constexpr size_t kMinBytes = 64 << 10;  // a few faults are not worth two system calls
  if (bytes < kMinBytes) return;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + kPage - 1) & ~(kPage - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kPage - 1);
  if (e <= b) return;
  // A buffer reused from the heap is mapped already, and populating it again walks its pages
  // for nothing (it slowed 16 MiB outputs): a first page in memory stands for the chunk.
  unsigned char resident = 0;
  if (mincore(reinterpret_cast<void*>(b), kPage, &resident) == 0 && (resident & 1)) return;
  madvise(reinterpret_cast<void*>(b), e - b, kPopulateWrite);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace jaxnorm

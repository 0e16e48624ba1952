// Output pages mapped ahead of the writes. XLA's CPU runtime can hand an output a freshly
// mapped buffer on every call (it did for 32 MiB outputs, which malloc maps anew), and then
// each first write to one of its 4 KiB pages traps into the kernel: on a 2-core machine those
// 8192 faults took most of an 8192x1024 float32 forward's time, for XLA's code and ours alike.
// One madvise(MADV_POPULATE_WRITE) per chunk maps the chunk's pages in a single system call
// instead: the same pages, zeroed as the faults would, without a trap each. Linux 5.14+;
// elsewhere, or when it fails, the writes fault as before.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace jaxnorm {

class OutputPrefault {
 public:
  // Looks once, at the output's first page, whether the buffer is mapped already (a buffer
  // reused from the heap): then populating its chunks would walk their pages for nothing, and
  // a system call per chunk slowed 1 MiB outputs. Small outputs are left to fault.
  OutputPrefault(const void* out, size_t bytes) {
#if defined(__linux__)
    constexpr size_t kMinBytes = 1 << 20;
    const uintptr_t b = page_up(reinterpret_cast<uintptr_t>(out));
    if (bytes < kMinBytes || b + kPage > reinterpret_cast<uintptr_t>(out) + bytes) return;
    unsigned char resident = 0;
    active_ = mincore(reinterpret_cast<void*>(b), kPage, &resident) == 0 && !(resident & 1);
    // A large fresh output (a mapping of its own: glibc maps allocations above 32 MiB anew every
    // time) in transparent huge pages: its whole 2 MiB blocks are marked MADV_HUGEPAGE before
    // the chunks populate them, so each block is one zeroed page instead of 512 faults' worth
    // of page-table and accounting work. Only blocks inside the output are marked, which it
    // writes whole. Where huge pages are off or unavailable the kernel maps 4 KiB pages as before.
    if (active_ && bytes >= kHugeMinBytes) {
      const uintptr_t hb = (reinterpret_cast<uintptr_t>(out) + kHuge - 1) & ~(kHuge - 1);
      const uintptr_t he = (reinterpret_cast<uintptr_t>(out) + bytes) & ~(kHuge - 1);
      if (he > hb) madvise(reinterpret_cast<void*>(hb), he - hb, MADV_HUGEPAGE);
    }
#else
    (void)out;
    (void)bytes;
#endif
  }

  // Maps the whole pages of one chunk's output [p, p + bytes), on the chunk's thread.
  void chunk(void* p, size_t bytes) const {
#if defined(__linux__)
    constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, absent from older headers
    const uintptr_t b = page_up(reinterpret_cast<uintptr_t>(p));
    const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kPage - 1);
    if (active_ && e > b) madvise(reinterpret_cast<void*>(b), e - b, kPopulateWrite);
#else
    (void)p;
    (void)bytes;
#endif
  }

 private:
  static constexpr uintptr_t kPage = 4096;
  static constexpr uintptr_t kHuge = uintptr_t{1} << 21;
  static constexpr size_t kHugeMinBytes = size_t{8} << 20;
  static uintptr_t page_up(uintptr_t a) { return (a + kPage - 1) & ~(kPage - 1); }
  bool active_ = false;
};

}  // namespace jaxnorm

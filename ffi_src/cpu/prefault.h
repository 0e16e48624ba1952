// Output pages mapped ahead of the writes. XLA's CPU runtime can hand an output a freshly
// mapped buffer on every call (it did for 32 MiB outputs, which malloc maps anew), and then
// each first write to one of its 4 KiB pages traps into the kernel: on a 2-core machine those
// 8192 faults took most of an 8192x1024 float32 forward's time, for XLA's code and ours alike.
// One madvise(MADV_POPULATE_WRITE) per chunk maps the chunk's pages in a single system call
// instead: the same pages, zeroed as the faults would, without a trap each. Linux 5.14+;
// elsewhere, or when it fails, the writes fault as before.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace jaxnorm {

class OutputPrefault {
 public:
  // Reads once, by one mincore over the output's whole pages, which of them are mapped: all of a
  // buffer reused warm from the heap, none of a fresh mapping, and part of a heap buffer whose
  // top glibc trimmed. Each chunk then populates its range only where a page is missing (a
  // system call per chunk over mapped pages slowed 1 MiB outputs; probing the first page only
  // left partly trimmed buffers to fault page by page). Small outputs are left to fault.
  OutputPrefault(const void* out, size_t bytes) {
#if defined(__linux__)
    constexpr size_t kMinBytes = 1 << 20;
    begin_ = page_up(reinterpret_cast<uintptr_t>(out));
    end_ = (reinterpret_cast<uintptr_t>(out) + bytes) & ~(kPage - 1);
    if (bytes < kMinBytes || end_ <= begin_) return;
    resident_.resize((end_ - begin_) / kPage);
    if (mincore(reinterpret_cast<void*>(begin_), end_ - begin_, resident_.data()) != 0) return;
    for (const unsigned char r : resident_) active_ |= !(r & 1);
    // A large fresh output (glibc maps allocations above its mmap threshold anew every time) in
    // transparent huge pages: its 2 MiB blocks that are wholly unmapped are marked
    // MADV_HUGEPAGE before the chunks populate them, so each block is one zeroed page instead of
    // 512 faults' worth of page-table and accounting work (an 8192x1024 float32 forward 13 ->
    // 7-8.5 ms on 2 cores). Only blocks inside the output are marked, which it writes whole.
    // Where huge pages are off or unavailable the kernel maps 4 KiB pages as before.
    if (active_ && bytes >= kHugeMinBytes) {
      constexpr uintptr_t kBlockPages = kHuge / kPage;
      for (uintptr_t hb = (begin_ + kHuge - 1) & ~(kHuge - 1); hb + kHuge <= end_; hb += kHuge) {
        const size_t first = (hb - begin_) / kPage;
        bool missing = true;
        for (size_t i = first; i < first + kBlockPages && missing; ++i) missing = !(resident_[i] & 1);
        if (missing) madvise(reinterpret_cast<void*>(hb), kHuge, MADV_HUGEPAGE);
      }
    }
#else
    (void)out;
    (void)bytes;
#endif
  }

  // Maps the whole pages of one chunk's output [p, p + bytes) if one of them is missing, on the
  // chunk's thread.
  void chunk(void* p, size_t bytes) const {
#if defined(__linux__)
    if (!active_) return;
    constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, absent from older headers
    const uintptr_t b = std::max(page_up(reinterpret_cast<uintptr_t>(p)), begin_);
    const uintptr_t e = std::min((reinterpret_cast<uintptr_t>(p) + bytes) & ~(kPage - 1), end_);
    for (uintptr_t a = b; a < e; a += kPage) {
      if (!(resident_[(a - begin_) / kPage] & 1)) {
        madvise(reinterpret_cast<void*>(b), e - b, kPopulateWrite);
        return;
      }
    }
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
  uintptr_t begin_ = 0, end_ = 0;       // the output's whole pages
  std::vector<unsigned char> resident_;  // mincore's map of them
  bool active_ = false;                  // some page is missing
};

}  // namespace jaxnorm

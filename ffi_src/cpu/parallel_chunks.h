// Row work spread over XLA's intra-op thread pool. The rows are cut into chunks fixed by the
// shape alone (never by the thread count), so a result combined per chunk in chunk order is
// bitwise the same on every machine and every run.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "common/ffi_util.h"

namespace jaxnorm {

// Rows per chunk: about `elements` elements (64K), so scheduling costs little against the work.
inline int64_t chunk_rows(int64_t cols, int64_t elements = int64_t{1} << 16) {
  return std::max<int64_t>(1, elements / std::max<int64_t>(cols, 1));
}

// Rows per chunk of the row ops (norms, softmax) whose chunks compute independent rows: 16K
// elements. XLA ran the custom calls of a small program one after another on one thread, so an
// op's own chunks were its only parallelism, and 64K-element chunks left inputs of up to 64
// rows of 1024 on one core while XLA's fusions used both.
inline int64_t row_chunk_rows(int64_t cols) { return chunk_rows(cols, int64_t{1} << 14); }

// A pause in a spin-wait loop (lets the other hardware thread of the core run).
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long the caller spins for the helpers' last chunks before it blocks: about one chunk's
// work. Blocking at once put a thread wake-up (tens of microseconds on a virtual machine) at the
// end of every call: 2-10% of the 1 MiB row ops on 2 cores (20 and 200 us measured alike).
constexpr std::chrono::microseconds kJoinSpin{50};

// Calls body(chunk, begin, end) for chunk c = [c * grain, min(n, (c + 1) * grain)) of [0, n), on
// the pool's threads and the caller's, and returns when every chunk is done. The caller takes
// chunks too and waits only for chunks already started, so it never waits on a pool thread that
// has not started (a busy or absent pool just leaves the work to the caller).
//
// Helpers: one fewer than the pool's threads, so that with the caller there are as many workers
// as the pool has threads (XLA sizes it to the cores). The caller is a pool thread when XLA runs
// the program's custom calls concurrently, and another thread (Python's, when XLA runs a program
// inline) otherwise; asking for a helper per pool thread then put three threads on two cores,
// and the row ops at 1 MiB lost 10-25% to the oversubscription.
template <class Body>
void parallel_chunks(ffi::ThreadPool& pool, int64_t n, int64_t grain, const Body& body) {
  const int64_t chunks = (n + grain - 1) / grain;
  const int64_t helpers = std::min<int64_t>(chunks - 1, pool.num_threads() - 1);
  if (helpers <= 0) {
    for (int64_t c = 0; c < chunks; ++c) body(c, c * grain, std::min(n, (c + 1) * grain));
    return;
  }
  struct State {
    std::atomic<int64_t> next{0}, done{0};
    std::mutex m;
    std::condition_variable cv;
  };
  // Shared with the helpers: one that starts after the caller returned finds no chunk left and
  // touches only this state (body is then never called through its dangling references).
  auto st = std::make_shared<State>();
  auto run = [st, n, grain, chunks, &body]() {
    for (int64_t c; (c = st->next.fetch_add(1)) < chunks;) {
      body(c, c * grain, std::min(n, (c + 1) * grain));
      if (st->done.fetch_add(1) + 1 == chunks) {
        { std::lock_guard<std::mutex> lock(st->m); }
        st->cv.notify_all();
      }
    }
  };
  for (int64_t h = 0; h < helpers; ++h) {
    auto task = run;
    pool.Schedule(std::move(task));
  }
  run();
  // Every chunk is taken; wait for those still running on helpers: spin for a while, then block.
  const auto spin_until = std::chrono::steady_clock::now() + kJoinSpin;
  while (st->done.load(std::memory_order_acquire) != chunks) {
    for (int i = 0; i < 64; ++i) spin_pause();
    if (std::chrono::steady_clock::now() > spin_until) break;
  }
  std::unique_lock<std::mutex> lock(st->m);
  st->cv.wait(lock, [&] { return st->done.load() == chunks; });
}

}  // namespace jaxnorm

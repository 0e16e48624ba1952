// Which positions of a row an op keeps: all, or a mask's (softmax's and cross-entropy's `where`).
#pragma once

#include <cstdint>

namespace jaxnorm {

// Functors rather than `!mask || mask[c]`, whose short-circuit load is control flow that stops
// the row loops from vectorizing.
struct KeepAll {
  bool operator()(int64_t) const { return true; }
};
struct KeepMask {
  const bool* m;
  bool operator()(int64_t c) const { return m[c]; }
};

}  // namespace jaxnorm

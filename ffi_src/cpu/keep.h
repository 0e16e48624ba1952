// Which positions of a row an op keeps: all, or a mask's (softmax's and cross-entropy's `where`).
#pragma once

#include <cstdint>

namespace jaxnorm {

// Functors rather than `!mask || mask[c]`, whose short-circuit load is control flow that stops
// the row loops from vectorizing.
// mask(at): the same for the positions a vec_math.h reader (At1, At8) reads.
struct KeepAll {
  bool operator()(int64_t) const { return true; }
  template <class At>
  __attribute__((always_inline)) auto mask(At) const {
    return At::all();
  }
};
struct KeepMask {
  const bool* m;
  bool operator()(int64_t c) const { return m[c]; }
  template <class At>
  __attribute__((always_inline)) auto mask(At at) const {
    return at(m);
  }
};

}  // namespace jaxnorm

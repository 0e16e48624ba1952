// Double-precision row sums for the CPU handlers.
#pragma once

#include <cstdint>

#include "cpu/vec_math.h"

namespace jaxnorm {

// Sum of term(c) for c in [0, n), in double, over four interleaved partial sums: the adds no
// longer wait on one another, and the order is fixed, so the result is reproducible.
template <class Term>
JN_VEC_INLINE double row_sum(int64_t n, const Term& term) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  int64_t c = 0;
  for (; c + 4 <= n; c += 4) {
    s0 += term(c);
    s1 += term(c + 1);
    s2 += term(c + 2);
    s3 += term(c + 3);
  }
  for (; c < n; ++c) s0 += term(c);
  return (s0 + s1) + (s2 + s3);
}

}  // namespace jaxnorm

// Division of indices by a runtime divisor, host and device (the padding copies' index math).
#pragma once

#include <cstdint>

#include "common/hd.h"

namespace jaxnorm {

// Division by a runtime divisor: for 32-bit indices by a multiply-high and a shift
// (Granlund-Montgomery round-up method; exact for every 32-bit n), a few instructions instead of a
// division's ~20 per index.
template <class I>
struct Divisor;
template <>
struct Divisor<uint32_t> {
  uint32_t d = 1, mul = 0, shift = 0;
  Divisor() = default;
  explicit Divisor(uint32_t divisor) : d(divisor) {
    while ((uint64_t{1} << shift) < divisor) ++shift;
    mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - divisor)) / divisor + 1);
  }
  JN_HD uint32_t div(uint32_t n) const {
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(n, mul);
#else
    const uint32_t hi = static_cast<uint32_t>((uint64_t{n} * mul) >> 32);
#endif
    return static_cast<uint32_t>((uint64_t{hi} + n) >> shift);
  }
};
template <>
struct Divisor<uint64_t> {
  uint64_t d = 1;
  Divisor() = default;
  explicit Divisor(uint64_t divisor) : d(divisor) {}
  JN_HD uint64_t div(uint64_t n) const { return n / d; }
};

}  // namespace jaxnorm

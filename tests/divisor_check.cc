// Host check of cuda/divisor.h: the multiply-high division equals n / d for every divisor class
// the padding copies use (1, powers of two, odd, near 2^31 and 2^32) over edge and random n.
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda/divisor.h"

int main() {
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (int s = 12; s < 32; ++s) {
    for (int64_t delta = -3; delta <= 3; ++delta) divisors.push_back(static_cast<uint32_t>((int64_t{1} << s) + delta));
  }
  divisors.push_back(0xFFFFFFFFu);
  divisors.push_back(0xFFFFFFFEu);
  std::mt19937_64 rng(12345);
  for (int i = 0; i < 2000; ++i) divisors.push_back(static_cast<uint32_t>(rng() % 0xFFFFFFFFu) + 1);
  int64_t checked = 0, bad = 0;
  for (uint32_t d : divisors) {
    const jaxnorm::Divisor<uint32_t> div(d);
    auto check = [&](uint32_t n) {
      ++checked;
      if (div.div(n) != n / d && bad++ < 10) std::printf("d=%u n=%u: got %u want %u\n", d, n, div.div(n), n / d);
    };
    for (uint32_t n = 0; n < 2048; ++n) check(n);
    for (uint32_t k = 0; k < 2048; ++k) check(0xFFFFFFFFu - k);
    for (int i = 0; i < 2000; ++i) {
      const uint32_t n = static_cast<uint32_t>(rng());
      check(n);
      const uint64_t m = (n / d) * uint64_t{d};  // around multiples of d
      check(static_cast<uint32_t>(m));
      if (m > 0) check(static_cast<uint32_t>(m - 1));
    }
  }
  std::printf("%lld divisions checked, %lld wrong\n", static_cast<long long>(checked), static_cast<long long>(bad));
  return bad != 0;
}

// Thresholds by radix select: 8 key bits a pass (count_select), or value bins then key bits
// (select_threshold), each pass one cluster histogram.
#pragma once

#include "cuda/sampling/select_common.cuh"

namespace jaxnorm {
namespace sampling {

// Radix select over the 32-bit keys that key_of(i, &key) yields (false: not a candidate) for the
// `needed`-th largest; the key bits above `top_shift + 8` are already fixed by the caller's
// predicate. Returns the threshold: every candidate key >= it is among the `needed` largest plus
// ties with the last. *remaining gets how many of the threshold's ties are needed (exact when
// the select ran to the last bit), *exact whether it did. With cap > 0 it stops as soon as the
// candidates at or above the chosen bin number at most cap: *fits is set and the return value is
// the least key of that set (every candidate key >= it is in), for the caller to gather and sort.
template <int kThreads, class KeyOf>
__device__ uint32_t count_select(const cg::cluster_group& cl, SelectShared<kThreads>& sh, int& phase, int n,
                                 unsigned long long needed, int top_shift, KeyOf key_of,
                                 unsigned long long* remaining, bool* exact, unsigned long long cap = 0,
                                 bool* fits = nullptr) {
  const unsigned long long total = needed;
  uint32_t prefix = 0, pmask = 0;
  *exact = false;
  if (fits) *fits = false;
  for (int shift = top_shift; shift >= 0; shift -= 8) {
    cluster_histogram<false>(cl, sh, phase, n, [&](int i, uint32_t& d, unsigned long long&) {
      uint32_t key;
      if (!key_of(i, key) || (key & pmask) != prefix) return false;
      d = (key >> shift) & 0xffu;
      return true;
    });
    find_crossing<false>(sh, needed, -1.0);
    if (total - needed + sh.dec_above + sh.dec_n <= cap) {
      *fits = true;
      *remaining = needed - sh.dec_above;
      return prefix | (sh.dec_bin << shift);
    }
    needed -= sh.dec_above;
    prefix |= sh.dec_bin << shift;
    pmask |= 0xffu << shift;
    if (sh.dec_n == needed) break;  // the whole bin is in
    *exact = shift == 0;
  }
  *remaining = needed;
  return prefix;
}

// Top-k (kMass false: the `needed` largest, ties kept) or top-p (kMass: the mass rule of
// jaxnorm.sampling with fraction p) among the tokens with in_set(v, bin, key): value bins first,
// then the keys within the chosen bin 8 bits at a time.
template <bool kMass, int kThreads, class Token, class InSet>
__device__ Threshold select_threshold(const cg::cluster_group& cl, SelectShared<kThreads>& sh, int& phase, int n,
                                      unsigned long long needed, double p, Token token, InSet in_set) {
  Threshold t;
  uint32_t prefix = 0, pmask = 0;
  for (int shift = 32; shift >= 0; shift -= 8) {
    const bool first = shift == 32;
    cluster_histogram<kMass>(cl, sh, phase, n, [&](int i, uint32_t& d, unsigned long long& q) {
      float s;
      uint32_t bin, key;
      token(i, s, bin, key);
      if (!in_set(bin, key)) return false;
      if (first) {
        d = bin;
      } else {
        if (bin != t.bin || (key & pmask) != prefix) return false;
        d = (key >> shift) & 0xffu;
      }
      if (kMass) q = mass_of(s);
      return true;
    });
    find_crossing<kMass>(sh, needed, kMass && first ? p : -1.0);
    needed = (kMass ? sh.target : needed) - sh.dec_above;
    if (first) {
      t.bin = sh.dec_bin;
    } else {
      prefix |= sh.dec_bin << shift;
      pmask |= 0xffu << shift;
    }
    t.key = prefix;
    if (sh.dec_n == (kMass ? 1 : needed)) break;  // the whole bin is in
  }
  return t;
}

}  // namespace sampling
}  // namespace jaxnorm

// The per-element definitions of the sampling family, shared verbatim by the CPU handlers and the
// CUDA kernels so both select the same tokens and draw the same noise (jaxnorm.reference is the
// written spec; see jaxnorm/sampling.py for the conventions).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/hd.h"

namespace jaxnorm {
namespace sampling {

// A float's bits mapped to an unsigned key with the same total order as lax.top_k's comparator:
// -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN.
JN_HD uint32_t order_key(uint32_t bits) { return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u); }
JN_HD uint32_t key_bits(uint32_t key) { return (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key; }

// The value sampling ranks: NaN never drawn (as -inf), -0 as +0 (one key for one value). In a row
// whose maximum is +inf the +inf tokens share the whole mass: 0 for them, -inf for the rest.
// On the GPU NaN -> -inf by one FMNMX (fmaxf returns the other operand of a NaN): the same value
// as the select, one instruction less a token in every pass.
JN_HD float sampling_value(float x, bool inf_row) {
#ifdef __CUDA_ARCH__
  const float v = fmaxf(x, -INFINITY) + 0.0f;
#else
  const float v = x != x ? -INFINITY : x + 0.0f;
#endif
  return inf_row ? (v == INFINITY ? 0.0f : -INFINITY) : v;
}

// Philox-4x32-10 (Salmon et al., SC'11): a counter-based generator, so any element's random
// word depends only on (key, counter), never on which thread or in which order it is drawn.
struct Philox4 {
  uint32_t v[4];
};

JN_HD uint32_t mulhi32(uint32_t a, uint32_t b) {
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
}

// kUnroll: the GPU's unrolling of the rounds (1 where a few tokens a row are drawn, whose code is
// fetched afresh each row).
template <int kUnroll = 10>
JN_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
#ifdef __CUDA_ARCH__
#pragma unroll kUnroll
#endif
  for (int i = 0; i < 10; ++i) {
    const uint32_t hi0 = mulhi32(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = mulhi32(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Distinguishes this family's streams from any other use of the same key words.
constexpr uint32_t kStreamTag = 0x6a6e5331u;

// The four random words of token group `group` (tokens 4*group .. 4*group+3) of a row.
template <int kUnroll = 10>
JN_HD Philox4 token_words(uint32_t group, uint32_t row_in_key, uint32_t k0, uint32_t k1) {
  return philox4x32_10<kUnroll>(group, row_in_key, kStreamTag, 0u, k0, k1);
}

// A uniform in (0, 1) from a word: odd multiples of 2^-24, never 0 or 1.
JN_HD float open_uniform(uint32_t w) { return static_cast<float>(((w >> 9) << 1) | 1u) * 0x1p-24f; }

// The probability mass exp(s) (s <= 0, relative to the row maximum) in fixed point: integer sums
// are exact and associative, so thresholds do not depend on the order of the additions.
constexpr double kMassScale = 0x1p38;
constexpr int64_t kMaxVocab = int64_t{1} << 25;  // rows of at most 2^25 tokens cannot overflow 64 bits

// A token's value bin: 255 minus a bin 1/8 wide in s = (v - max) / temperature (bin 0: s <=
// -31.875 and -inf). Bins grow with v, so a bin threshold keeps an upper set of values.
constexpr uint32_t kValueBins = 256;
JN_HD uint32_t value_bin(float s) {
  return kValueBins - 1 - static_cast<uint32_t>(fminf(-8.0f * s, static_cast<float>(kValueBins - 1)));
}

// Top-p alone draws by inverse transform (jaxnorm/sampling.py): draw `round`'s 64-bit uniform word
// (counter word 3 = 1: apart from every token's words), and its position in a mass total q.
constexpr uint32_t kPickRounds = 4;
JN_HD uint64_t pick_word(uint32_t round, uint32_t row_in_key, uint32_t k0, uint32_t k1) {
  const Philox4 w = philox4x32_10<1>(round, row_in_key, kStreamTag, 1u, k0, k1);
  return (static_cast<uint64_t>(w.v[0]) << 32) | w.v[1];
}
JN_HD uint64_t scale_word(uint64_t u, uint64_t q) {
#ifdef __CUDA_ARCH__
  return __umul64hi(u, q);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(u) * q) >> 64);
#endif
}

// The index into a grouped operand of G entries (signatures.h) that row r of `rows` reads. One
// entry, or one a row, are the usual cases and need no 64-bit division (on the GPU a software
// routine: every thread decodes its row's parameters, and 13 of them were ~7% of the sampler's
// instructions, top-p at 64 x 128256).
JN_HD int64_t group_of(int64_t r, int64_t rows, int64_t groups) {
  return groups == 1 ? 0 : groups == rows ? r : r / (rows / groups);
}

// Row r's index among the rows that share its key group.
JN_HD int64_t row_in_group(int64_t r, int64_t rows, int64_t groups) {
  return groups == rows ? 0 : groups == 1 ? r : r % (rows / groups);
}

// Row r's forced token: its end_id (as given, not range-checked) when it is finished, else
// false. A finished row draws nothing, so its token does not depend on the key.
JN_HD bool forced_token(int64_t r, int64_t rows, const bool* finished, int64_t n_fin, const int32_t* end_id,
                        int64_t n_end, int32_t* token) {
  if (!finished || !finished[group_of(r, rows, n_fin)]) return false;
  *token = end_id[group_of(r, rows, n_end)];
  return true;
}

// A bijection of 32-bit words (odd multiply, then rotate): fold_mix(a) ^ a is 0 for two words a
// of 2^32 (0 and 0xF419FD61, counted), where a plain xor fold of a repeated word always is.
JN_HD uint32_t fold_mix(uint32_t x) {
  x *= 0x9E3779B9u;
  return (x << 16) | (x >> 16);
}

// One row's sampling parameters, decoded from the grouped operands. Out-of-range values are
// clamped as documented in jaxnorm/sampling.py: temperature <= 0 (or NaN) is greedy, top_k outside
// [1, V) and top_p >= 1 (or NaN) are off, top_p <= 0 keeps only the top value.
struct RowParams {
  bool greedy;
  float inv_t;
  bool use_k;
  int64_t k;
  bool use_p;
  double p;
  float log_min_p;  // keep s >= log_min_p, s = (v - max) / temperature; -inf keeps all
  uint32_t key0, key1, row_in_key;
};

JN_HD RowParams row_params(int64_t r, int64_t rows, int64_t cols, const float* temps, int64_t n_temps,
                           const int32_t* top_k, int64_t n_k, const float* top_p, int64_t n_p,
                           const float* log_min_p, int64_t n_m, const uint32_t* keys, int64_t n_keys,
                           int64_t key_width) {
  // Every entry is loaded before any is used. A GPU thread issues in order and stalls at the first
  // use of a load: decoding each value before loading the next (the temperature's greedy test and
  // its reciprocal's slow path branch on it) made five memory round trips serial, ~1.5 us of a
  // batch-1 row (clock trace, benchmarks/results/h200-stage-x-hist-push).
  const float t = temps ? temps[group_of(r, rows, n_temps)] : 1.0f;
  const int32_t k = top_k ? top_k[group_of(r, rows, n_k)] : 0;
  const float p = top_p ? top_p[group_of(r, rows, n_p)] : 1.0f;
  const float lm = log_min_p ? log_min_p[group_of(r, rows, n_m)] : -INFINITY;
  const uint32_t* w = keys ? keys + group_of(r, rows, n_keys) * key_width : nullptr;
  uint32_t kw[4] = {0u, 0u, 0u, 0u};  // a key's first words: 2 (threefry), 4 (rbg)
  for (int i = 0; i < 4; ++i) kw[i] = w && i < key_width ? w[i] : 0u;
  RowParams q;
  q.greedy = !(t > 0.0f) || !(1.0f / t < INFINITY);  // a subnormal temperature is greedy too
  // Past 2^126 (inf included) a temperature acts as 2^126: (v - max) * 0 would make -inf NaN.
  q.inv_t = q.greedy ? 1.0f : fmaxf(1.0f / t, 0x1p-126f);
  q.k = k;
  q.use_k = !q.greedy && q.k >= 1 && q.k < cols;
  q.use_p = !q.greedy && !(p >= 1.0f) && p == p;
  q.p = p > 0.0f ? static_cast<double>(p) : 0.0;
  q.log_min_p = q.greedy || lm != lm ? -INFINITY : (lm > 0.0f ? 0.0f : lm);
  // A wider key (rbg's four words) folded into Philox's two: words past the second are mixed in,
  // since rbg's key data repeats its halves ([a, b, a, b]), which a plain xor cancels to 0.
  q.key0 = kw[0];
  q.key1 = kw[1];
  for (int64_t i = 2; i < key_width; ++i) {
    uint32_t& kk = i % 2 == 0 ? q.key0 : q.key1;
    kk = fold_mix(kk) ^ (i < 4 ? kw[i] : w[i]);
  }
  q.row_in_key = keys ? static_cast<uint32_t>(row_in_group(r, rows, n_keys)) : 0u;
  return q;
}

// The mass target of top-p over a candidate mass z: a value v is kept while the mass of the
// strictly larger values is below p * z (never below one unit, so the top value always stays).
JN_HD uint64_t top_p_target(double p, uint64_t z) {
  const double t = ceil(p * static_cast<double>(z));
  return t < 1.0 ? 1u : static_cast<uint64_t>(t);
}

}  // namespace sampling
}  // namespace jaxnorm

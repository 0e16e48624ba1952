// Draws by inverse transform over the fixed-point masses (the rules jaxnorm/sampling.py states,
// and the CPU handler follows): no threshold search, no sort, no noise a token.
//
// Rows without top-k or top-p (no filter, or min-p alone: the kept set is known once the maximum
// is): one draw R over the kept tokens' masses in index order (draw_by_mass).
//
// Top-p alone (draw_top_p): after the weighed histogram of value bins, every token in the bins
// above the crossing bin B is kept. A draw R in [0, Q) over the masses of the bins >= B, ordered
// by bin (descending) then index, that lands above B is the row's token: the cluster picks the bin
// from the histogram, the CTA from its peers' masses in that bin (chunks are in index order), and
// only that CTA scans its chunk for the token; the peers go on at once. A draw into B is tested
// exactly (the mass of the strictly larger values against top-p's target: one pass, two cluster
// barriers); a rejected draw raises the pivot to its key and draws again among the tokens of B
// above it. Each proposal set holds the kept set, so the accepted token follows the kept masses
// (rejection sampling). After kPickRounds rejections the caller takes the exact threshold and the
// Gumbel draw.
#pragma once

#include "cuda/sampling/gather_select.cuh"

namespace jaxnorm {
namespace sampling {

// The CTA that holds mass position r of the proposal: with r below `above` (the bins over B), the
// bin from the cluster's totals (sh.bin_mass, from the top) and then the peer from each one's
// share of that bin (sh.mass[hb]); else the peer from each one's share of B's proposal
// (`sub_share`, this CTA's address of it). Leaves sh.pick_bin, pick_rank and pick_pos (the position
// within that peer's share) for every thread.
template <int kThreads>
__device__ void pick_cta(const cg::cluster_group& cl, SelectShared<kThreads>& sh, int hb, unsigned long long r,
                         unsigned long long above, uint32_t bound, unsigned long long* sub_share) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    uint32_t bin = bound;
    unsigned long long pos = r - above;
    unsigned long long* share = sub_share;
    if (r < above) {
      unsigned long long v[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) sum += v[j] = sh.bin_mass[kBins - 1 - 8 * lane - j];
      const unsigned long long incl = warp_inclusive_scan(sum);
      const int src = __ffs(__ballot_sync(~0u, incl - sum <= r && r < incl)) - 1;
      uint32_t b = 0;
      unsigned long long a = incl - sum, rest = 0;
      bool found = false;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (!found && r < a + v[j]) found = true, b = kBins - 1 - 8 * lane - j, rest = r - a;
        a += v[j];
      }
      bin = __shfl_sync(~0u, b, src);
      pos = __shfl_sync(~0u, rest, src);
      share = &sh.mass[hb][bin];
    }
    const unsigned long long mine = lane < static_cast<int>(cl.num_blocks()) ? *cl.map_shared_rank(share, lane) : 0ull;
    const unsigned long long incl = warp_inclusive_scan(mine);
    if (lane == __ffs(__ballot_sync(~0u, pos < incl)) - 1) {
      sh.pick_bin = bin, sh.pick_rank = lane, sh.pick_pos = pos - (incl - mine);
    }
  }
  __syncthreads();
}

// The masses of this CTA's tokens 4g .. 4g + 3 with match(bin, key), 0 for the others and past n.
// A group without a match takes no exp or conversion (most groups: the locate and the test match
// one value bin). Same-call A/B (h100-sampling.md, 8ee2c97; top-p 0.5 and 0.9 at 1-256 x 128256):
// 0.91-0.99x the time everywhere.
template <class Token4, class Match>
__device__ __forceinline__ void group_masses(int g, int n, const Token4& token4, const Match& match,
                                             unsigned long long (&w)[4]) {
  float s[4];
  uint32_t bin[4], key[4];
  bool in[4], any = false;
  token4(g, s, bin, key);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    in[j] = 4 * g + j < n && match(bin[j], key[j]);
    any |= in[j];
    w[j] = 0;
  }
  if (any) {
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = in[j] ? mass_of(s[j]) : 0ull;
  }
}

// The inverse-transform draws find a token in a CTA's chunk by spans: warp w sums groups [w *
// span, (w + 1) * span) of 4 tokens, 32 groups a step (lane l takes group w * span + 32 * it + l),
// and records the sums of up to 32 segments of per_seg steps each.
struct Spans {
  int span, steps, per_seg;
};
template <int kThreads>
__device__ __forceinline__ Spans spans_of(int n, int min_per_seg) {
  constexpr int kWarps = kThreads / 32;
  const int groups = (n + 3) / 4;
  const int span = (groups + 32 * kWarps - 1) / (32 * kWarps) * 32;
  const int steps = span / 32;
  return {span, steps, max((steps + 31) / 32, min_per_seg)};
}

// Each warp's segment sums of mass4 over its span, in sh.warp_mass[warp][0 .. 31] (free outside a
// weighed histogram); 0 past its segments.
template <int kThreads, class Mass4>
__device__ void segment_sums(SelectShared<kThreads>& sh, const Spans& sp, Mass4 mass4) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  unsigned long long* seg = &sh.warp_mass[warp][0];
  seg[lane] = 0;
  __syncwarp();
  for (int s0 = 0, sg = 0; s0 < sp.steps; s0 += sp.per_seg, ++sg) {
    unsigned long long acc = 0;
    const int end = min(sp.steps, s0 + sp.per_seg);
    for (int it = s0; it < end; ++it) {
      unsigned long long w[4];
      mass4(warp * sp.span + 32 * it + lane, w);
      acc += w[0] + w[1] + w[2] + w[3];
    }
    if (__ballot_sync(~0u, acc != 0)) {
      const unsigned long long t = warp_sum(acc);
      if (lane == 0) seg[sg] = t;
    }
  }
  __syncwarp();
}

// This CTA's token at mass position pos in index order (pos below the chunk's total), from the
// segment sums that segment_sums left for the same spans and mass4: its local index, for every
// thread. The warp whose span holds pos finds the segment by one scan of its segments' sums and
// scans that segment again, 128 tokens a step.
template <int kThreads, class Mass4>
__device__ int locate_in_segments(SelectShared<kThreads>& sh, const Spans& sp, unsigned long long pos, Mass4 mass4) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned long long mine = sh.warp_mass[warp][lane];
  const unsigned long long total = warp_sum(mine);
  __syncthreads();  // an earlier reader of sh.wsum is done
  if (lane == 0) sh.wsum[warp] = total;
  __syncthreads();
  int at = kWarps - 1;
  unsigned long long before = 0;
  for (int w = 0; w < kWarps - 1; ++w) {
    if (pos < before + sh.wsum[w]) {
      at = w;
      break;
    }
    before += sh.wsum[w];
  }
  if (warp == at) {
    pos -= before;
    const unsigned long long incl = warp_inclusive_scan(mine);
    const int sg = __ffs(__ballot_sync(~0u, pos < incl)) - 1;
    pos -= __shfl_sync(~0u, incl - mine, sg);
    unsigned long long run = 0;
    for (int it = sg * sp.per_seg; it < min(sp.steps, (sg + 1) * sp.per_seg); ++it) {
      const int g0 = at * sp.span + 32 * it;
      unsigned long long w[4];
      mass4(g0 + lane, w);
      const unsigned long long sum = w[0] + w[1] + w[2] + w[3];
      if (__ballot_sync(~0u, sum != 0) == 0) continue;
      const unsigned long long in = warp_inclusive_scan(sum);
      const unsigned hit = __ballot_sync(~0u, pos < run + in);
      if (hit) {
        if (lane == __ffs(hit) - 1) {
          unsigned long long a = run + in - sum;
          int j = 0;
          while (j < 3 && !(pos < a + w[j])) a += w[j++];
          sh.located = 4 * (g0 + lane) + j;
        }
        break;
      }
      run += __shfl_sync(~0u, in, 31);
    }
  }
  __syncthreads();
  return sh.located;
}

// This CTA's token at mass position pos in index order, the masses of tokens 4g .. 4g + 3 given by
// mass4(g, w) (pos below their total): its local index, for every thread. One step a segment
// while a warp's span holds at most 1024 groups.
template <int kThreads, class Mass4>
__device__ int locate_token(SelectShared<kThreads>& sh, int n, unsigned long long pos, Mass4 mass4) {
  const Spans sp = spans_of<kThreads>(n, 1);
  segment_sums(sh, sp, mass4);
  return locate_in_segments(sh, sp, pos, mass4);
}

// This CTA's total of mass4 (as in locate_token) over its chunk, in sh.part for its peers once the
// cluster barrier returns; returns that buffer's parity.
template <int kThreads, class Mass4>
__device__ int publish_chunk_mass(const cg::cluster_group& cl, SelectShared<kThreads>& sh, int& phase, int n,
                                  Mass4 mass4) {
  unsigned long long mine = 0;
  for (int g = threadIdx.x; 4 * g < n; g += kThreads) {
    unsigned long long w[4];
    mass4(g, w);
    mine += w[0] + w[1] + w[2] + w[3];
  }
  mine = block_sum(sh, mine);
  const int pb = phase++ & 1;
  if (threadIdx.x == 0) sh.part[pb] = mine;
  cl.sync();
  return pb;
}

// Steps of a segment that draw_by_mass's sums record at least: a warp's sum a segment costs about
// as much as a step's exps, and the picked CTA rescans one segment. Against a publish pass and the
// picked CTA's own pass over its chunk (same-call A/B, h100-sampling.md, c45a621; no filter and
// min-p 0.1 at 64-256 x 32000-128256): 0.72-0.93x the time, bfloat16 64 x 128256 0.72x.
constexpr int kByMassSegSteps = 8;

// Draws the token of a row without top-k or top-p (no filter, or min-p alone) and writes it from
// the CTA that holds it: R = the row's first pick word scaled to the kept tokens' total mass, a
// position in their masses in index order. Each CTA sums its chunk's kept masses (mass4) by
// segments of its warps' spans; every CTA reads its peers' sums, so all pick the same CTA, and
// only that one finds the token, from its segment sums and a rescan of one segment. On the CTA's
// last row every CTA arrives at the exit barrier once the sums are read, so the peers leave while
// the picked one scans.
template <int kThreads, class Mass4>
__device__ void draw_by_mass(const cg::cluster_group& cl, SelectShared<kThreads>& sh, int& phase, int n, int64_t c0,
                             const RowParams& q, Mass4 mass4, int32_t* out, bool last) {
  const Spans sp = spans_of<kThreads>(n, kByMassSegSteps);
  segment_sums(sh, sp, mass4);
  const unsigned long long total = block_sum(sh, sh.warp_mass[threadIdx.x / 32][threadIdx.x % 32]);
  const int pb = phase++ & 1;
  if (threadIdx.x == 0) sh.part[pb] = total;
  cl.sync();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const unsigned long long v = lane < static_cast<int>(cl.num_blocks()) ? *cl.map_shared_rank(&sh.part[pb], lane) : 0ull;
    const unsigned long long incl = warp_inclusive_scan(v);
    const unsigned long long r = scale_word(pick_word(0, q.row_in_key, q.key0, q.key1), __shfl_sync(~0u, incl, 31));
    if (lane == __ffs(__ballot_sync(~0u, r < incl)) - 1) sh.pick_rank = lane, sh.pick_pos = r - (incl - v);
  }
  __syncthreads();
  if (last) arrive_early(&sh.arrived);
  if (static_cast<int>(cl.block_rank()) == sh.pick_rank) {
    const int i = locate_in_segments(sh, sp, sh.pick_pos, mass4);
    if (threadIdx.x == 0) *out = static_cast<int32_t>(c0 + i);
  }
}

// Draws a top-p-alone row's token (sh.dec_bin, dec_above, target and the cluster's and the CTAs'
// bin masses from the weighed histogram, this CTA's in sh.mass[hb]) and writes it from the CTA
// that holds it. False when kPickRounds draws were rejected: the caller draws by the exact
// threshold. token(i, ...) and token4(g, ...) as in gather_candidates. On the CTA's last row
// (`last`), a draw above the crossing bin needs no peer's shared memory once its CTA is picked:
// every CTA arrives at the exit barrier then, so the peers leave while the picked one scans.
template <int kThreads, class Token, class Token4>
__device__ bool draw_top_p(const cg::cluster_group& cl, SelectShared<kThreads>& sh, int& phase, int hb, int n,
                           int64_t c0, const RowParams& q, Token token, Token4 token4, int32_t* out, bool last) {
  const int rank = static_cast<int>(cl.block_rank());
  const uint32_t bound = sh.dec_bin;
  const unsigned long long above = sh.dec_above, target = sh.target;
  unsigned long long sub = sh.bin_mass[bound];  // the mass of B's tokens above the pivot
  unsigned long long* sub_share = &sh.mass[hb][bound];
  uint32_t pivot = 0;  // no token has key 0 (NaN is -inf here)
#pragma unroll 1
  for (uint32_t round = 0; round < kPickRounds; ++round) {
    const unsigned long long r = scale_word(pick_word(round, q.row_in_key, q.key0, q.key1), above + sub);
    pick_cta(cl, sh, hb, r, above, bound, sub_share);
    const uint32_t bin = sh.pick_bin;
    const int at = sh.pick_rank;
    if (r < above && last) arrive_early(&sh.arrived);
    if (rank == at) {
      // r < above matches the whole bin: key > 0 holds for every token (sampling_value is never
      // NaN, and only a NaN's key is 0), so one compare serves both cases (ptxas re-tested the
      // 64-bit r < above at every token).
      const uint32_t floor_key = r < above ? 0u : pivot;
      const int i = locate_token(sh, n, sh.pick_pos, [&](int g, unsigned long long(&w)[4]) {
        group_masses(g, n, token4, [&](uint32_t b, uint32_t key) { return b == bin && key > floor_key; }, w);
      });
      if (r < above && threadIdx.x == 0) *out = static_cast<int32_t>(c0 + i);
      if (r >= above && threadIdx.x == 0) {
        float s;
        uint32_t b, key;
        token(i, s, b, key);
        sh.pick_key = key;
      }
    }
    if (r < above) return true;  // above B: kept
    // The test: is the mass of the values strictly above the drawn one below the target?
    cl.sync();
    const uint32_t drawn_key = *cl.map_shared_rank(&sh.pick_key, at);
    const int pb = publish_chunk_mass(cl, sh, phase, n, [&](int g, unsigned long long(&w)[4]) {
      group_masses(g, n, token4, [&](uint32_t b, uint32_t key) { return b == bound && key > drawn_key; }, w);
    });
    if (threadIdx.x < 32) {
      const unsigned long long v =
          threadIdx.x < cl.num_blocks() ? *cl.map_shared_rank(&sh.part[pb], threadIdx.x) : 0ull;
      const unsigned long long t = warp_sum(v);
      if (threadIdx.x == 0) sh.pick_sub = t;
    }
    __syncthreads();
    sub = sh.pick_sub;
    if (above + sub < target) {
      if (rank == at && threadIdx.x == 0) *out = static_cast<int32_t>(c0 + sh.located);
      return true;
    }
    pivot = drawn_key;
    sub_share = &sh.part[pb];
  }
  return false;
}

}  // namespace sampling
}  // namespace jaxnorm

// One kernel for the sampling family: a thread-block cluster takes a row, each CTA copies its
// chunk of the row into shared memory once (the row's only DRAM read), and every later pass
// (radix-select histograms, the Gumbel draw, the filtered store) reads those copies.
//
// Its kStream instances (the jaxnorm_sample_with_top_k target and top_k of k <= 1024, where
// launch_select picks them) first try top-k rows by the one-read path of stream_select.cuh,
// which copies nothing; the rows it hands back take the passes below, over global memory (its
// launches hold no chunk copy), as do the sampler's rows without top-k: a read for the maximum,
// then the passes'.
//
// The sampling modes first try one gather: a histogram of value bins finds the bin that holds the
// top-k boundary (or, top-p alone, the top-p crossing), and the tokens at or above it (or in it),
// usually a few dozen to a few hundred, are gathered into CTA 0, which sorts them and resolves
// the thresholds exactly, from the same keys and fixed-point masses as the radix passes below,
// and draws the token: among its candidates, and, when only the bin was gathered, among the
// peers' draws over the tokens above it, made in the same pass. Rows whose gather would overflow
// CTA 0's buffer (flat rows, wide top-k) take the radix passes. With top-k, each CTA first bounds
// the boundary bin from below by its threads' largest tokens (delegate_floor), and both passes
// skip the tokens below that bound after a subtract, a multiply and a compare. Sampled rows with
// top-p alone (no min-p) gather nothing: after the same histogram, draw_top_p (inverse_draw.cuh)
// draws by inverse transform over the bins' masses; the filter and top-p with min-p gather. Sampled
// rows without top-k or top-p (no filter, min-p alone) need no threshold: draw_by_mass draws by
// inverse transform over the kept tokens' masses in index order.
//
// Thresholds are otherwise found by radix select: each CTA histograms its chunk in shared memory, the
// cluster sums the histograms through distributed shared memory (each CTA reads every peer's, so
// all take the same decision), and the bin holding the target is refined in the next pass. A
// pass stops early once the chosen bin holds exactly what is still needed. Counts and fixed-point
// masses are integers, so the sums, and therefore the thresholds, do not depend on the order of
// the atomic additions.
//
// Modes: kSample (one token a row: Gumbel-max over the kept tokens where top-k or a rejected top-p
// draw set the thresholds, else by inverse transform) and kFilter (the logits with
// the dropped tokens at -inf) select with select_threshold: a first pass over value bins of
// (v - max) / T, then 8 key bits a pass inside the chosen bin. kTopK (the k largest in lax.top_k's
// order) works on the raw key, which orders NaN and -0 as lax.top_k does: where top_k_plan says
// so, a first pass over quarter-binade key bins below the row's largest key; if its boundary bin
// and those above do not fit CTA 0's buffer, count_select, 8 key bits a pass, until the keys at
// or above its bin fit (then it gathers and sorts them all), else on to the index among ties;
// CTA 0 bitonic-sorts the k winners.
//
// The logits update of a decoding loop rides on the same read (kBias: the sampling modes with an
// output bias): every pass sees logits + bias in float32. A float32 row's shared-memory copy holds
// those sums; a 16-bit row's holds the logits as loaded and each pass adds the bias again (a
// [vocab] vector that all rows share, in L1/L2): float sums would double its shared memory, so its
// cluster (bf16, 64 x 128256, top-k 50 and top-p 0.9: 1.63x the time without a bias). A finished
// row (kSample) writes its end_id and reads nothing.
#pragma once

#include "cuda/sampling/radix_select.cuh"
#include "cuda/sampling/stream_select.cuh"
#include "cuda/sampling/inverse_draw.cuh"

namespace jaxnorm {
namespace sampling {

// Whether the shared-memory copy holds logits + bias (float32 rows) rather than the logits.
template <class T, bool kBias>
constexpr bool kHoldsSums = kBias && sizeof(T) == sizeof(float);

// The samplers of 256-thread CTAs ask for 3 CTAs an SM (<= 80 registers, no spills with nvcc 13;
// what the shared memory of a 32 KB chunk allows): without it ptxas gave the sampler 92 registers
// once the finished-row test was in, 2 CTAs an SM. The filters and top_k of 256 threads keep
// ptxas's choice (at 80 the filter with a bias spills). 512-thread CTAs (one an SM) say so: with
// the sort's call in them and no bound, ptxas held one of them to 64 registers and spilled.
// kStream: the sampler or top_k that tries the one-read top-k path (stream_select.cuh) first; the
// rows that take it copy nothing, those it hands back re-read global memory. It asks for 2 CTAs
// an SM (128 registers): held to 80, ptxas spilled 100-220 bytes in the sampler's general passes.
template <class T, int kMode, bool kBias, int kThreads, bool kStream = false>
__global__ void __launch_bounds__(kThreads, kThreads == kThreadsFew ? 1 : kStream ? 2 : kMode == kSample ? 3 : 0)
    select_rows(const SelectArgs<T> a) {
  static_assert(!kBias || kMode != kTopK, "top_k takes no bias");
  static_assert(!kStream || kMode != kFilter, "the one-read path samples or takes top_k");
  using S = T;
  constexpr bool kSums = kHoldsSums<T, kBias>;
  extern __shared__ __align__(16) unsigned char dyn[];
  __shared__ SelectShared<kThreads> sh;
  const cg::cluster_group cl = cg::this_cluster();
  const int rank = static_cast<int>(cl.block_rank());
  const int64_t c0 = min(a.cols, rank * a.chunk);
  const int n = static_cast<int>(min(a.cols, c0 + a.chunk) - c0);
  S* smem_chunk = reinterpret_cast<S*>(dyn);
  unsigned long long* cand = reinterpret_cast<unsigned long long*>(dyn + a.cand_offset);
  if (threadIdx.x == 0) sh.ncand = 0;
  int phase = 0;
  const float* gbias = kBias ? a.bias + c0 : nullptr;
  // Whether this CTA arrived at the exit barrier early. Each thread writes and reads its own
  // (equal) value; in shared memory, as a register held across the row loop spilled.
  sh.arrived = false;
  // The sampling rows' maximum, their first cluster exchange, goes by st.async pushes onto
  // mbarriers (cluster_max_pushed), whose init orders before it (or the exit) by a split cluster
  // barrier, in the 512-thread instances (batches whose rows all start at once). Same-call A/B
  // against cluster_max's fenced cluster barrier (h100-sampling.md, H200): 0.93-0.95x the time at
  // batch 1 (128256 columns, top-k, top-p, both), 0.97-0.99x at batch 8. Not measured for the
  // 256-thread instances (rows queue for the SMs), which keep the barrier: the quick bench after
  // the change gave float32 top-p, min-p and no filter at 64 x 128256 +5% against an earlier call.
  // The one-read kernel's rows and top_k meet their clusters before their maximum.
  constexpr bool kPushed = kMode != kTopK && !kStream && kThreads == kThreadsFew;
  // Its storage only where it runs: the other instances keep their shared memory to the byte.
  struct NoPush {};
  __shared__ std::conditional_t<kPushed, MaxPushSmem, NoPush> mx;
  int ex = 0;  // cluster_max_pushed's exchanges so far
  if constexpr (kPushed) {
    if (threadIdx.x == 0) init_hist_push();  // ordered before the peers' pushes by the init below
    cluster_reduce_init(mx, cl.num_blocks());
  }

  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    if constexpr (kMode == kSample) {
      // The same decision in every CTA of the cluster (a per-row value), so none waits at a
      // cluster barrier the others skip.
      int32_t forced;
      if (forced_token(r, a.rows, a.finished, a.n_fin, a.end_id, a.n_end, &forced)) {
        if (rank == 0 && threadIdx.x == 0) static_cast<int32_t*>(a.out)[r] = forced;
        continue;
      }
    }
    const T* grow = a.x + r * a.cols + c0;
    // What the passes read: the held chunk, or (not resident) the row in global memory.
    const S* src = a.resident ? smem_chunk : grow;
    // Whether src lacks the bias (logit() adds it).
    const bool add_bias = kBias && !(kSums && a.resident);
    // Element i of this CTA's chunk as the sampler sees it (the bias added).
    auto logit = [&](int i) -> float { return add_bias ? to_float(src[i]) + gbias[i] : to_float(src[i]); };
    // The chunk's largest as the later passes need it: the samplers' value, top_k's key.
    float lmax = -INFINITY;
    bool have_lmax = false;  // the one-read path computed it
    if constexpr (kStream) {
      if (a.vec && threadIdx.x == 0) {
        // Before the row's parameters are read, the first two rounds on their way to L2: with more
        // rows than clusters the next row's first loads otherwise wait a full DRAM latency.
        constexpr int N = kVecOf<T>;
        prefetch_packs_l2<T, N>(grow, 0, min(n / N, 2 * kStreamRoundPacks<T, kBias> * kThreads));
      }
      RowParams q{};
      if constexpr (kMode == kTopK) {
        q.use_k = true, q.k = a.k;
      } else {
        q = row_params(r, a.rows, a.cols, a.temps, a.n_temps, a.top_k, a.n_k, a.top_p, a.n_p, a.log_min_p, a.n_m,
                       a.keys, a.n_keys, a.key_width);
      }
      const bool rising = kMode == kTopK && a.rising;
      if (a.vec && q.use_k && (q.k <= kThreads || rising)) {
        int32_t* out = static_cast<int32_t*>(a.out) + (kMode == kTopK ? r * a.k : r);
        // The lists follow CTA 0's gather buffer (the general passes' fallback gathers there).
        unsigned long long* lists = cand + (a.gather_cap > kCand ? a.gather_cap : kCand);
        const StreamLists ls{lists, lists + a.local_cap, static_cast<int>(a.local_cap), static_cast<int>(a.comp_cap),
                             rising};
        if (stream_row<T, kThreads, kBias, kMode == kTopK>(cl, sh, grow, kBias ? a.bias + c0 : nullptr, n, c0,
                                                           static_cast<uint32_t>(a.cols - 1), q, ls, cand, out,
                                                           rank == 0 && r + gridDim.y >= a.rows, lmax)) {
          continue;
        }
        have_lmax = true;
      }
    }
    uint32_t kmax = 0;
    auto note = [&](float x) {
      if constexpr (kMode == kTopK) {
        kmax = max(kmax, order_key(__float_as_uint(x)));
      } else if constexpr (kStream) {
        // The one-read kernel's rows come here only when handed back. The plain fmaxf below made
        // ptxas spill the one-read loop's bf16 packs (51 local loads and stores an iteration
        // against 1; bf16 top-k 50 at 64 x 128256 1.05x the time).
        lmax = fmaxf(lmax, sampling_value(x, false));
      } else {
        // fmaxf skips NaN as sampling_value's -inf would; a -0 may now make a zero maximum -0,
        // which changes no s = (v - max) / T (v is never -0) and no token: one FMNMX a token,
        // where sampling_value took three more.
        lmax = fmaxf(lmax, x);
      }
    };
    // The row's read: into the shared-memory copy, or (nothing held: the one-read kernel's rows
    // without top-k, rows too long to hold) for the samplers' maximum alone, the draw re-reading
    // global memory (mostly from L2).
    if (a.resident || (kMode != kTopK && !have_lmax)) {
      constexpr int N = kVecOf<T>;
      int i0 = 0;
      if (a.vec) {
        // U packs a thread in flight before any is stored (the copy is the row's DRAM read): the
        // most that stay within the 80 registers of 3 CTAs an SM without spilling (ptxas, nvcc 13).
        constexpr int U = kBias || sizeof(T) == 2 ? 2 : 4;
        const int npk = n / N;
        const bool async_copy = !kBias && a.resident && a.async_copy;
        if (async_copy) {
          // The whole chunk in flight at once, no register held: the register copy below keeps U
          // packs a thread in flight, so a 64 KB chunk of 256 threads waits out 4 DRAM latencies.
          for (int pk = threadIdx.x; pk < npk; pk += kThreads) cp_async_16(smem_chunk + pk * N, grow + pk * N);
          cp_async_commit();
          cp_async_wait<0>();
          for (int pk = threadIdx.x; pk < npk; pk += kThreads) {
            const Pack<T, N> v = *reinterpret_cast<const Pack<T, N>*>(smem_chunk + pk * N);
#pragma unroll
            for (int j = 0; j < N; ++j) note(to_float(v.v[j]));
          }
        }
        for (int base = threadIdx.x; base < (async_copy ? 0 : npk); base += U * kThreads) {
          Pack<T, N> v[U];
#pragma unroll
          for (int u = 0; u < U; ++u) {
            if (base + u * kThreads < npk) v[u] = load_raw_nc<T, N>(grow + (base + u * kThreads) * N);
          }
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int pk = base + u * kThreads;
            if (pk >= npk) break;
            if constexpr (kBias) {
              float b[N];
              load_pack<float, N>(gbias + pk * N, b);
              Pack<T, N> held = v[u];
#pragma unroll
              for (int j = 0; j < N; ++j) {
                const float sum = to_float(v[u].v[j]) + b[j];
                if constexpr (kSums) held.v[j] = sum;
                note(sum);
              }
              if (a.resident) *reinterpret_cast<Pack<T, N>*>(smem_chunk + pk * N) = held;
            } else {
              if (a.resident) *reinterpret_cast<Pack<T, N>*>(smem_chunk + pk * N) = v[u];
#pragma unroll
              for (int j = 0; j < N; ++j) note(to_float(v[u].v[j]));
            }
          }
        }
        i0 = n / N * N;
      }
      for (int i = i0 + threadIdx.x; i < n; i += kThreads) {
        const T v = grow[i];
        if constexpr (kBias) {
          const float sum = to_float(v) + gbias[i];
          if (a.resident) smem_chunk[i] = kSums ? from_float<T>(sum) : v;
          note(sum);
        } else {
          if (a.resident) smem_chunk[i] = v;
          note(to_float(v));
        }
      }
    }
    __syncthreads();

    if constexpr (kMode == kTopK) {
      const uint32_t last = static_cast<uint32_t>(a.cols - 1);
      auto value_key = [&](int i, uint32_t& key) {
        key = order_key(__float_as_uint(to_float(src[i])));
        return true;
      };
      unsigned long long remaining = 0;
      bool exact = false;
      bool all = false;  // every key >= tv gathered (at most gather_cap), not just the k winners
      uint32_t tv = 0;
      if (a.topk_window && a.resident && a.gather_cap > 0) {
        // First a histogram of the keys' top 11 bits (sign, exponent, 2 mantissa bits: quarter
        // binades) in a window of 256 bins that ends at the row's largest key, everything below
        // in bin 0: one pass usually isolates a boundary bin that fits the gather, where the
        // key's top byte (a whole binade) seldom does.
        const uint32_t top = cluster_max(cl, sh, phase, kmax, 0u) >> kWindowShift;
        const uint32_t lo = max(top, kBins - 1u) - (kBins - 1u);
        cluster_histogram<false>(cl, sh, phase, n, [&](int i, uint32_t& d, unsigned long long&) {
          d = max(order_key(__float_as_uint(to_float(src[i]))) >> kWindowShift, lo) - lo;
          return true;
        });
        find_crossing<false>(sh, a.k, -1.0);
        all = sh.dec_bin > 0 && sh.dec_above + sh.dec_n <= static_cast<unsigned long long>(a.gather_cap);
        tv = (lo + sh.dec_bin) << kWindowShift;
      }
      if (!all) {
        tv = count_select(cl, sh, phase, n, a.k, 24, value_key, &remaining, &exact,
                          static_cast<unsigned long long>(a.gather_cap), &all);
      }
      uint32_t ti = 0;  // among ties with tv, the index keys (last - index) >= ti are in
      if (!all && exact && remaining < sh.dec_n) {
        const int bits = 32 - __clz(last);
        bool exact_i;
        ti = count_select(cl, sh, phase, n, remaining, (bits - 1) / 8 * 8,
                          [&](int i, uint32_t& key) {
                            key = last - static_cast<uint32_t>(c0 + i);
                            return order_key(__float_as_uint(to_float(src[i]))) == tv;
                          },
                          &remaining, &exact_i);
      }
      // The k winners (or every key >= tv) into CTA 0, sorted there.
      const unsigned cap = all ? static_cast<unsigned>(a.gather_cap) : static_cast<unsigned>(a.k);
      gather_to_rank0(cl, sh, cand, n, cap, [&](int i, unsigned long long& c) {
        const uint32_t key = order_key(__float_as_uint(to_float(src[i])));
        const uint32_t ikey = last - static_cast<uint32_t>(c0 + i);
        c = composite(key, last, c0 + i);
        return all ? key >= tv : key > tv || (key == tv && ikey >= ti);
      });
      cl.sync();
      if (rank == 0) {
        if (r + gridDim.y >= a.rows) arrive_early(&sh.arrived);  // its last row
        const int got = static_cast<int>(min(sh.ncand, cap));
        int kp = 1;
        while (kp < got) kp <<= 1;
        for (int i = got + threadIdx.x; i < kp; i += kThreads) cand[i] = 0;
        __syncthreads();
        bitonic_sort_desc<kThreads>(cand, kp);
        // A key of 0 (-NaN at the last column) ties with the padding; it can only be the k-th.
        int32_t* out = static_cast<int32_t*>(a.out) + r * a.k;
        for (int i = threadIdx.x; i < a.k; i += kThreads) out[i] = static_cast<int32_t>(last - static_cast<uint32_t>(cand[i]));
        __syncthreads();
        if (threadIdx.x == 0) sh.ncand = 0;
      }
    } else {
      float m;
      if constexpr (kPushed) {
        m = cluster_max_pushed(sh, mx, phase, ex, lmax, -INFINITY, cl.num_blocks());
      } else {
        m = cluster_max(cl, sh, phase, lmax, -INFINITY);
      }
      const bool inf_row = m == INFINITY;
      if (inf_row) m = 0.0f;
      auto value_of = [&](int i) { return sampling_value(logit(i), inf_row); };
      const RowParams q = row_params(r, a.rows, a.cols, a.temps, a.n_temps, a.top_k, a.n_k, a.top_p, a.n_p,
                                     a.log_min_p, a.n_m, a.keys, a.n_keys, a.key_width);
      // s, value bin and key of a token whose logit (the bias added) is x, and of token i
      auto token_x = [&](float x, float& s, uint32_t& bin, uint32_t& key) {
        const float v = sampling_value(x, inf_row);
        s = (v - m) * q.inv_t;
        bin = value_bin(s);
        key = order_key(__float_as_uint(v));
      };
      auto token = [&](int i, float& s, uint32_t& bin, uint32_t& key) { token_x(logit(i), s, bin, key); };
      // The logits (bias added) of tokens 4g .. 4g + 3, -inf past the chunk.
      auto logits4 = [&](int g, float (&x)[4]) {
        if ((a.resident || a.vec) && 4 * g + 4 <= n) {
          // One 4-token load: from the copy, four scalar loads 16 bytes apart would be 4-way bank
          // conflicts; from global memory, four load instructions.
          const Pack<S, 4> pk = *reinterpret_cast<const Pack<S, 4>*>(src + 4 * g);
          float b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          if (add_bias) load_pack<float, 4>(gbias + 4 * g, b);
          // Without a bias nothing is added: x + 0.0f only turned -0 into +0 (an FADD a token),
          // which every consumer's sampling_value does anyway, as for logit()'s scalar loads.
#pragma unroll
          for (int j = 0; j < 4; ++j) x[j] = add_bias ? to_float(pk.v[j]) + b[j] : to_float(pk.v[j]);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) x[j] = 4 * g + j < n ? logit(4 * g + j) : -INFINITY;
        }
      };
      auto token4 = [&](int g, float (&s)[4], uint32_t (&bin)[4], uint32_t (&key)[4]) {
        float x[4];
        logits4(g, x);
#pragma unroll
        for (int j = 0; j < 4; ++j) token_x(x[j], s[j], bin[j], key[j]);
      };
      Threshold tk, tp;
      bool drawn = false;  // the row's token is written (by CTA 0 from its candidates, or by draw_top_p)
      Gather g;
      // Top-p alone (no min-p) draws by inverse transform; its rare rejected rows take the exact
      // threshold below (no gather: it would draw on its own).
      bool top_p_alone = false;
      if constexpr (kMode == kSample) {
        top_p_alone = m != -INFINITY && !q.greedy && q.use_p && !q.use_k && q.log_min_p == -INFINITY;
        if (top_p_alone) {
          const int hb = phase & 1;
          weigh_value_bins<false>(cl, sh, phase, n, q, token4);
          drawn = draw_top_p(cl, sh, phase, hb, n, c0, q, token, token4, static_cast<int32_t*>(a.out) + r,
                             r + gridDim.y >= a.rows);
        } else if (m != -INFINITY && !q.greedy && !q.use_k && !q.use_p) {
          // The kept tokens' masses (kept_mass, as mass_rows weighs them). A group that min-p drops whole takes no exp (most of them, at min-p 0.1). Same-call A/B
          // (h100-sampling.md, 5d5513c on an H200, 128256 columns): min-p 0.1 at 64-256 rows
          // 0.84-0.88x the time, 1-8 rows 0.95-0.98x; no filter 1.00x.
          auto kept_mass4 = [&](int g, unsigned long long (&w)[4]) {
            float x[4], s[4];
            bool keep[4], any = false;
            logits4(g, x);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              s[j] = scaled(x[j], m, inf_row, q);
              keep[j] = 4 * g + j < n && s[j] >= q.log_min_p;
              any |= keep[j];
              w[j] = 0;
            }
            if (any) {
#pragma unroll
              for (int j = 0; j < 4; ++j) w[j] = keep[j] ? kept_mass(s[j], q) : 0ull;
            }
          };
          draw_by_mass(cl, sh, phase, n, c0, q, kept_mass4, static_cast<int32_t*>(a.out) + r, r + gridDim.y >= a.rows);
          drawn = true;
        }
      }
      if (!top_p_alone && m != -INFINITY && !q.greedy && (q.use_k || q.use_p)) {
        // Each thread's largest token (lmax: the copy's own maximum) as a delegate for top-k.
        uint32_t floor_bin = 0;
        if (q.use_k && !inf_row && a.delegate_floor) {
          const bool has = lmax != -INFINITY;
          floor_bin = delegate_floor(sh, has ? value_bin((lmax - m) * q.inv_t) : 0u, has, q.k);
        }
        // Token i's s as token() computes it, without sampling_value: a NaN logit gives NaN, which
        // no skip test passes; in a +inf row the +inf tokens give +inf and the rest have s = -inf
        // (bin 0) anyway, so skipping on this s is exact there too.
        auto s_of = [&](int i) { return (logit(i) - m) * q.inv_t; };
        g = gather_candidates<kMode == kSample, kPushed>(cl, sh, phase, n, c0, static_cast<uint32_t>(a.cols - 1), cand,
                                                a.gather_cap, q, floor_bin, token, token4, s_of);
      }
      if (g.fits) {
        constexpr bool kDraw = kMode == kSample;
        drawn = kDraw;
        if (rank == 0) {
          float above_s = -INFINITY;  // the peers' draws above the gathered bin, one a thread
          int above_i = 0x7fffffff;
          if (kDraw && !g.all && threadIdx.x < cl.num_blocks()) {
            above_s = *cl.map_shared_rank(&sh.above_s, threadIdx.x);
            above_i = *cl.map_shared_rank(&sh.above_i, threadIdx.x);
          }
          if (kDraw && r + gridDim.y >= a.rows) arrive_early(&sh.arrived);  // its last row
          const int t = resolve_candidates<kDraw>(sh, cand, g, m, q, static_cast<uint32_t>(a.cols - 1), above_s, above_i);
          if (drawn && threadIdx.x == 0) static_cast<int32_t*>(a.out)[r] = t;
        }
        if (!drawn) {
          cl.sync();
          const uint32_t* pub = cl.map_shared_rank(sh.pub, 0);
          tk.bin = pub[0], tk.key = pub[1], tp.bin = pub[2], tp.key = pub[3];
        }
      } else if (m != -INFINITY && !q.greedy && !drawn) {
        if (q.use_k) {
          tk = select_threshold<false>(cl, sh, phase, n, q.k, -1.0, token, [](uint32_t, uint32_t) { return true; });
        }
        if (q.use_p) {
          tp = select_threshold<true>(cl, sh, phase, n, 0, q.p, token,
                                      [&](uint32_t bin, uint32_t key) { return keeps(tk, bin, key); });
        }
      }
      // Without a top-k or top-p threshold (both at bin 0, key 0: keep all; the filter of such rows)
      // no token needs its bin and key (measured: 13% of the instructions of the Gumbel draw over
      // every token, which such rows took before draw_by_mass).
      const bool thresholded = (tk.bin | tk.key | tp.bin | tp.key) != 0u;
      auto kept_x = [&](float x, float& s) {
        uint32_t bin, key;
        token_x(x, s, bin, key);
        return m != -INFINITY && (!thresholded || (keeps(tk, bin, key) && keeps(tp, bin, key))) && s >= q.log_min_p;
      };
      auto kept_token = [&](int i, float& s) { return kept_x(logit(i), s); };
      if (drawn) {
        // nothing left: the peers go on to their next row
      } else if constexpr (kMode == kFilter) {
        T* out = static_cast<T*>(a.out) + r * a.cols + c0;
        const T neg_inf = from_float<T>(-INFINITY);
        for (int i = threadIdx.x; i < n; i += kThreads) {
          float s;
          const bool keep = kept_token(i, s) && s != -INFINITY;  // NaN out as -inf
          if constexpr (kBias) {
            out[i] = keep ? from_float<T>(logit(i)) : neg_inf;
          } else {
            out[i] = keep ? src[i] : neg_inf;
          }
        }
      } else {
        float best = -INFINITY;
        int best_i = 0x7fffffff;
        if (m != -INFINITY && q.greedy) {
          for (int i = threadIdx.x; i < n; i += kThreads) {
            const float v = value_of(i);
            if (better(v, static_cast<int>(c0) + i, best, best_i)) best = v, best_i = static_cast<int>(c0) + i;
          }
        } else if (m != -INFINITY) {
          for (int g = threadIdx.x; 4 * g < n; g += kThreads) {
            float x[4], s[4];
            bool keep[4];
            logits4(g, x);
#pragma unroll
            for (int j = 0; j < 4; ++j) keep[j] = 4 * g + j < n && kept_x(x[j], s[j]);
            draw4(c0, g, s, keep, q, best, best_i);
          }
        }
        const int token = cluster_argmax(cl, sh, phase, best, best_i);
        if (rank == 0 && threadIdx.x == 0) {
          static_cast<int32_t*>(a.out)[r] = m == -INFINITY || token == 0x7fffffff ? -1 : token;
        }
      }
    }
    __syncthreads();  // the next row's copy overwrites the chunk
  }
  // No CTA leaves while a peer may still read its shared memory.
  if (kPushed && ex == 0) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // the init's arrive
  if (!sh.arrived) cluster_arrive();
  cluster_wait();
}

}  // namespace sampling
}  // namespace jaxnorm

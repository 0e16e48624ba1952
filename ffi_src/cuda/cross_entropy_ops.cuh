// Softmax cross-entropy on the GPU. The forward stores nothing per element, so a row need not
// stay on one CTA or cluster: wide rows are cut into chunks, one CTA each, that write their
// online (max, sum) statistics plus the sum and count of their kept logits as partials, and a
// warp per row merges them in a fixed order and writes the loss and the saved (lse, n). Narrow
// rows (one chunk) take the softmax family's row tiles (row_tiles.cuh) with the same op. The
// backward needs no reduction (lse is saved): an elementwise pass over 16-byte packs, a CTA per
// chunk of a row on wide rows, so each CTA reads its row's label and statistics once.
#pragma once

#include "common/cross_entropy_math.h"
#include "cuda/device_types.cuh"
#include "cuda/divisor.h"
#include "cuda/row_tiles.cuh"
#include "cuda/softmax_ops.cuh"

namespace jaxnorm {

// A group of lanes all-reduces the statistics as MaxSumMerge does: the max by one butterfly,
// each lane's sum rescaled to it once, then plain sums, where a merge at every level takes two
// exps; the logits' sum (kXsum: label smoothing) and the kept count (kCount: a mask) only where
// the kernel's fold makes them. Merges were a quarter of the fused kernel's instructions (ncu,
// bf16 8192 x 128256: 1751 a warp a CTA, issue slots 66% busy); this way the kernel took
// 0.90-0.97x the time (h100-cross-entropy.md). fmaxf skips a NaN max, whose
// lane's sum is NaN too, and so is the row's. Symmetric: every lane ends with the same bits.
template <bool kXsum = true, bool kCount = true>
struct CeMerge {
  __device__ CeStats operator()(CeStats a, CeStats b) const { return ce_merge(a, b); }

  static constexpr bool kGroupAllReduce = true;
  template <int kWidth>
  __device__ CeStats group(CeStats v) const {
    const float m = group_max<kWidth>(v.max);
    return {m, group_sum<kWidth>(ce_rescale(v.sum, v.max, m)), kXsum ? group_sum<kWidth>(v.xsum) : v.xsum,
            kCount ? group_sum<kWidth>(v.n) : v.n};
  }
};

// exp(d): for 16-bit logits the hardware ex2 (three instructions an element instead of expf's
// ten; the bf16 softmax forwards were issue-bound with expf, results/h100.md). Its ~2^-22
// relative error is far below a 16-bit dlogit's rounding and, in the forward, below the loss's
// float32 sum; what it flushes (below 2^-126) is beyond both.
template <class T>
__device__ __forceinline__ float ce_exp(float d) {
  if constexpr (sizeof(T) == 2) {
    return ex2_approx(d * kLog2e);
  } else {
    return expf(d);
  }
}

// exp(v - lse) for the gradient: for 16-bit logits ex2 of one FFMA against lse log2(e), whose
// rounding moves the argument by ~|lse| 2^-24, the order of lse's own float32 rounding that every
// dlogit already carries (the fused kernel was issue-bound, h100-cross-entropy.md). Not for the
// forward's sums: the max they subtract is exact, and large logits made the loss 6x its tolerance
// (float16, test_split_rows). Float32 logits: expf(v - lse).
template <class T>
struct CeExpFrom {
  float m;
  __device__ explicit CeExpFrom(float shift) : m(sizeof(T) == 2 ? shift * kLog2e : shift) {}
  __device__ float operator()(float v) const {
    if constexpr (sizeof(T) == 2) {
      return ex2_approx(fmaf(v, kLog2e, -m));
    } else {
      return expf(v - m);
    }
  }
};

// A masked position travels to thread_stats() as this NaN, which no logit carries once convert()
// has given float32 NaNs the canonical payload (16-bit logits widen with zero low bits): the
// statistics skip it, while a kept NaN or -inf counts, exactly as the math says.
constexpr unsigned kCeMaskedBits = 0x7fc00001u;
__device__ __forceinline__ bool ce_masked(float v) { return __float_as_uint(v) == kCeMaskedBits; }

template <class T>
struct CrossEntropyFwdOp : MaskedRowsIn<T> {
  using Type = T;
  using Stats = CeStats;
  using Merge = CeMerge<>;
  static constexpr TileBudget kBudget = kForwardBudget;
  static constexpr bool kCanHoldRaw = false;
  using MaskedRowsIn<T>::x, MaskedRowsIn<T>::mask, MaskedRowsIn<T>::cols;

  const int32_t* labels;
  float* loss;
  float* stats;  // (rows, 2): lse, kept count
  CeOptions o;

  __device__ static Stats identity() { return {-INFINITY, 0.f, 0.f, 0.f}; }

  template <int N>
  __device__ void convert(int64_t row, int64_t col, const Pack<T, N>& raw, float (&v)[N]) const {
    unpack(raw, v);
    if (mask != nullptr) {
      bool keep[N];
      load_mask<N>(mask + row * cols + col, keep);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        if constexpr (sizeof(T) == 4) v[i] = v[i] != v[i] ? __uint_as_float(0x7fffffffu) : v[i];
        v[i] = keep[i] ? v[i] : __uint_as_float(kCeMaskedBits);
      }
    }
  }

  // The loop kernel's one-element update.
  __device__ void push(Stats& s, float v) const {
    if (ce_masked(v)) return;
    const float m = fmaxf(s.max, v);  // ignores a NaN, whose exp below makes the sum NaN
    const float e = m == -INFINITY ? (v != v ? v : 0.f) : v == m ? 1.f : ce_exp<T>(v - m);
    s.sum = ce_rescale(s.sum, s.max, m) + e;
    s.max = m;
    s.xsum += v;
    s.n += 1.f;
  }

  // The thread's max first (fmaxf skips NaN and the masked marker), then each exp against it.
  // Only a thread max of -inf (every element -inf, NaN or masked) or +inf needs care: there
  // exp(v - m) would be NaN for v = m. The count is the kept elements' (finalize() takes the
  // row width when there is no mask).
  template <int P, int N>
  __device__ Stats thread_stats(float (&v)[P][N], const bool (&ok)[P]) const {
    const float m = thread_max(v, ok);
    Stats s{m, 0.f, 0.f, 0.f};
    const bool finite = m > -INFINITY && m < INFINITY;
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (ok[p])
#pragma unroll
        for (int i = 0; i < N; ++i) {
          const float x = v[p][i];
          const float e = finite ? ce_exp<T>(x - m) : (x == m && m > 0.f) ? 1.f : (x != x ? x : 0.f);
          if (mask == nullptr) {
            s.sum += e;
            s.xsum += x;
          } else {
            const bool keep = !ce_masked(x);
            s.sum += keep ? e : 0.f;
            s.xsum += keep ? x : 0.f;
            s.n += keep ? 1.f : 0.f;
          }
        }
    return s;
  }

  template <int N>
  __device__ void restate(float (&)[N], Stats) const {}

  struct Row {};

  // One thread per row writes its results. The label's logit is read again from memory (an L2
  // hit: the row was just read) rather than found during the pass, where no thread knows its
  // columns' indices.
  __device__ Row finalize(Stats s, Stats, int64_t row, bool writer) const {
    if (writer) {
      const int64_t y = labels[row];
      const float xl = ce_label_ok(y, cols) ? to_float(x[row * cols + y]) : NAN;
      const float n = o.has_mask ? s.n : static_cast<float>(cols);
      loss[row] = ce_row_loss(s, n, xl, y, cols, o, &stats[2 * row]);
      stats[2 * row + 1] = n;
    }
    return {};
  }

  template <int N>
  struct Params {};
  static constexpr int kParamFloats = 0;
  template <int N>
  __device__ void load_params(int64_t, Params<N>&) const {}
  template <int N>
  __device__ void store(int64_t, int64_t, const float (&)[N], Row, const Params<N>*) const {}
};

namespace ce {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // packs a thread has in flight

template <class T>
struct BwdArgs {
  const T* x;
  const int32_t* labels;
  const float* stats;
  const float* dloss;
  const bool* mask;  // nullptr when absent
  T* dx;
  int64_t cols;
  CeOptions o;
};

// dlogits over packs of N elements (rows of `packs_per_row` packs), one pack per thread and
// kUnroll packs a thread: every load (the pack, its row's label, stats and dloss, the mask) is
// issued before the first store.
template <class T, int N, class I>
__global__ void __launch_bounds__(kThreads) bwd_kernel(BwdArgs<T> a, Divisor<I> packs_per_row, I total) {
  const I first = static_cast<I>(blockIdx.x) * (kThreads * kUnroll) + threadIdx.x;
  Pack<T, N> raw[kUnroll];
  bool keep[kUnroll][N];
  I row[kUnroll];
  float lse[kUnroll], n[kUnroll], g[kUnroll];
  int32_t label[kUnroll];
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    const I i = first + static_cast<I>(j * kThreads);
    if (i < total) {
      raw[j] = load_raw<T, N>(a.x + static_cast<int64_t>(i) * N);
      row[j] = packs_per_row.div(i);
      const int64_t r = row[j];
      label[j] = a.labels[r];
      lse[j] = a.stats[2 * r];
      n[j] = a.stats[2 * r + 1];
      g[j] = a.dloss[r];
      if (a.mask != nullptr) {
        load_mask<N>(a.mask + static_cast<int64_t>(i) * N, keep[j]);
      } else {
#pragma unroll
        for (int k = 0; k < N; ++k) keep[j][k] = true;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    const I i = first + static_cast<I>(j * kThreads);
    if (i < total) {
      const CeGradRow gr = ce_grad_row(g[j], lse[j], n[j], label[j], a.cols, a.o);
      const int64_t col = static_cast<int64_t>(i - row[j] * packs_per_row.d) * N;
      float v[N], out[N];
      unpack(raw[j], v);
#pragma unroll
      for (int k = 0; k < N; ++k) out[k] = ce_grad(ce_exp<T>(v[k] - gr.lse), keep[j][k], col + k, gr);
      store_pack<T, N>(a.dx + static_cast<int64_t>(i) * N, out);
    }
  }
}


// ---- wide rows ----

// Packs a thread has in flight per step of the chunk kernels: four 16-byte packs (a 256-thread
// CTA reads 16 KB a step), or eight elements when the row is not 16-byte aligned. The forward
// folds each pack into its statistics as it converts it, so it holds packs as loaded (a quarter
// of the registers of floats for 16-bit logits) and keeps eight in flight.
template <int N>
constexpr int kChunkPacks = N == 1 ? 8 : 4;
constexpr int kFwdChunkPacks = 8;
// Resident CTAs per SM the chunk kernels' registers must allow, the most without spills (ptxas
// -v; the masked 16-bit kernels still spill at 3): 96-128 KB in flight per SM. At 2 CTAs
// (97-115 registers) the backward read 1.88 TB/s. The forward's eight packs fit 4 CTAs once the
// columns inside a chunk are 32-bit offsets and bf16 is widened by byte permutes; before, at 3
// CTAs with a 22-byte spill, it read 2.58 TB/s and still beat spill-free six packs at 3 CTAs
// and four at 4 (898, 904 against 815 us at 8192 x 128256; results/h100-cross-entropy.md).
constexpr int kFwdChunkCtas = 4, kFwdMaskedChunkCtas = 3;
constexpr int kBwdChunkCtas = 4, kBwdMaskedChunkCtas = 3;
// fwd_grad_kernel holds the forward's packs through the cluster merge. Unmasked at 4 CTAs (64
// registers at bf16, no spill) against 3: bf16 8192 x 32000 / 128256 / 256000 369 / 1585 / 3269
// against 414 / 1673 / 3625 us, float32 unchanged; packs in shared memory by cp.async at 5 or 6
// CTAs lost (1.03-1.04x at bf16 128256, 1.04-1.05x at float32; h100-cross-entropy.md). The masked
// kernel stays at 3: at 4 its bf16 instance spills 56 bytes.
constexpr int kFwdGradCtas = 4, kFwdGradMaskedCtas = 3;

// A CTA's share of a row: columns [begin, end) of row `row`, chunks of `width` columns.
struct Chunk {
  int64_t row, begin, end;
};

__device__ __forceinline__ Chunk chunk_of(int64_t block, int64_t chunks, int64_t width, int64_t cols) {
  Chunk c;
  c.row = block / chunks;
  c.begin = (block - c.row * chunks) * width;
  c.end = min(c.begin + width, cols);
  return c;
}

// How the forward chunks fold a pack into the thread's statistics: the op's general per-pack
// statistics and merge (masks; every -inf, NaN and +inf case), or, without a mask, the fast fold
// below, with or without the logits' sum (only label smoothing needs it).
enum class Fold { kGeneral, kPlain, kWithSum };

// Folds a pack whose largest element is finite into `acc` (whose max is not +inf) with no merge:
// the running max moves, rescaling the sum once, only when the pack's exceeds it, and each
// element costs a subtract, a multiply and an exp. The general path (a merge a pack) issued 78%
// of cycles at 2.0 TB/s (results/h100-cross-entropy.md). False, with `acc` untouched, otherwise.
template <class T, int N, bool kSum>
__device__ __forceinline__ bool fold_finite_pack(CeStats& acc, const float (&v)[N]) {
  float pm = v[0];
#pragma unroll
  for (int k = 1; k < N; ++k) pm = fmaxf(pm, v[k]);  // skips NaN; all NaN leaves NaN
  if (!(pm > -INFINITY && pm < INFINITY) || acc.max == INFINITY) return false;
  if (pm > acc.max) {
    acc.sum = ce_rescale(acc.sum, acc.max, pm);
    acc.max = pm;
  }
  float e = 0.f, x = 0.f;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    e += ce_exp<T>(v[k] - acc.max);  // a NaN element makes the sum NaN; -inf adds 0
    if constexpr (kSum) x += v[k];
  }
  acc.sum += e;
  if constexpr (kSum) acc.xsum += x;
  return true;
}

// Folds the converted pack v (columns from `col`) into acc: the fast fold where kFold allows and
// the pack's largest is finite, else the op's general statistics and a merge.
template <class T, int N, Fold kFold>
__device__ __forceinline__ void fold_pack(const CrossEntropyFwdOp<T>& op, int64_t row, int64_t col,
                                          const Pack<T, N>& raw, CeStats& acc) {
  float v[1][N];
  if constexpr (kFold == Fold::kGeneral) {
    op.convert(row, col, raw, v[0]);
  } else {
    unpack_again(raw, v[0]);  // convert() without a mask (bf16: a byte permute an element)
    if (fold_finite_pack<T, N, kFold == Fold::kWithSum>(acc, v[0])) return;
  }
  acc = ce_merge(acc, op.thread_stats(v, {true}));
}

// The statistics of a thread's held packs (no mask) against their common max: one exp an
// element and no running max to move, where fold_pack checks and rescales pack by pack: 0.96-0.99x
// the time (bf16 8192 x 128256 1473 -> 1424 us; h100-cross-entropy.md). False, with acc
// untouched, where that max is not finite (the packs then take fold_pack).
template <class T, int N, int P, bool kSum>
__device__ __forceinline__ bool fold_held(const Pack<T, N> (&raw)[P], int len, CeStats& acc) {
  const float m = held_max(raw, [&](int p) { return p * kThreads * N < len; });
  if (!(m > -INFINITY && m < INFINITY)) return false;
  float e = 0.f, xs = 0.f;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    if (p * kThreads * N < len) {
      float v[N];
      unpack_again(raw[p], v);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        e += ce_exp<T>(v[k] - m);  // a NaN element makes the sum NaN; -inf adds 0
        if constexpr (kSum) xs += v[k];
      }
    }
  }
  acc = {m, e, xs, 0.f};
  return true;
}

// The statistics of one chunk of a row into partials[block], each pack folded in as it is
// converted, then merged across the CTA in a fixed order.
template <class T, int N, Fold kFold>
__global__ void __launch_bounds__(kThreads, kFold == Fold::kGeneral ? kFwdMaskedChunkCtas : kFwdChunkCtas) fwd_chunk_kernel(CrossEntropyFwdOp<T> op, int64_t chunks,
                                                                            int64_t width, CeStats* partials) {
  constexpr int P = kFwdChunkPacks;
  constexpr int kStep = kThreads * P * N;
  const Chunk c = chunk_of(blockIdx.x, chunks, width, op.cols);
  // Offsets inside the chunk in 32 bits from the thread's first element: no 64-bit column per
  // pack (registers the eight packs in flight need).
  const int64_t first = c.begin + threadIdx.x * N;
  const T* x = op.x + c.row * op.cols + first;
  const int len = static_cast<int>(c.end - first);
  CeStats acc = CrossEntropyFwdOp<T>::identity();
  for (int base = 0; base < len; base += kStep) {
    Pack<T, N> raw[P];
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (base + p * kThreads * N < len) raw[p] = load_raw<T, N>(x + base + p * kThreads * N);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int off = base + p * kThreads * N;
      if (off < len) fold_pack<T, N, kFold>(op, c.row, first + off, raw[p], acc);
    }
  }
  __shared__ RowReduceSmem<CeStats, kThreads / 32> red;
  acc = row_allreduce<kThreads, 1>(acc, CeMerge<>{}, red, 0);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// A warp per row merges the row's `chunks` partials (lanes strided, then a butterfly: a fixed
// order) and writes the loss and the saved statistics.
constexpr int kMergeRows = 8;  // rows (warps) per CTA

template <class T>
__global__ void __launch_bounds__(32 * kMergeRows) fwd_merge_kernel(CrossEntropyFwdOp<T> op, int64_t rows,
                                                                    int64_t chunks, const CeStats* partials) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kMergeRows + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  CeStats s = CrossEntropyFwdOp<T>::identity();
  for (int64_t k = lane; k < chunks; k += 32) s = ce_merge(s, partials[row * chunks + k]);
  s = group_allreduce<32>(s, CeMerge<>{});
  op.finalize(s, s, row, lane == 0);
}

// dlogits for one chunk of a row: the row's coefficients loaded once, then each step's packs all
// loaded before the first store. The mask is a template flag: handled at run time, its bytes
// took the 16-bit kernels past the register budget into spills.
template <class T, int N, bool kMask>
__global__ void __launch_bounds__(kThreads, kMask ? kBwdMaskedChunkCtas : kBwdChunkCtas) bwd_chunk_kernel(BwdArgs<T> a, int64_t chunks, int64_t width) {
  constexpr int P = kChunkPacks<N>;
  constexpr int kStep = kThreads * P * N;
  const Chunk c = chunk_of(blockIdx.x, chunks, width, a.cols);
  const CeGradRow gr = ce_grad_row(a.dloss[c.row], a.stats[2 * c.row], a.stats[2 * c.row + 1], a.labels[c.row],
                                   a.cols, a.o);
  const T* x = a.x + c.row * a.cols;
  T* dx = a.dx + c.row * a.cols;
  const bool* mask = kMask ? a.mask + c.row * a.cols : nullptr;
  for (int64_t base = c.begin; base < c.end; base += kStep) {
    Pack<T, N> raw[P];
    Pack<bool, N> keep[P];  // as loaded: a quarter of the registers of bools
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t col = base + (p * kThreads + threadIdx.x) * N;
      if (col < c.end) {
        raw[p] = load_raw<T, N>(x + col);
        if constexpr (kMask) keep[p] = *reinterpret_cast<const Pack<bool, N>*>(mask + col);
      }
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t col = base + (p * kThreads + threadIdx.x) * N;
      if (col < c.end) {
        float v[N], out[N];
        unpack(raw[p], v);
#pragma unroll
        for (int k = 0; k < N; ++k)
          out[k] = ce_grad(ce_exp<T>(v[k] - gr.lse), !kMask || keep[p].v[k], col + k, gr);
        store_pack<T, N>(dx + col, out);
      }
    }
  }
}

// ---- the forward and the gradient from one read (the reduced losses, jaxnorm/cross_entropy.py) ----

// A row per cluster of `chunks` CTAs, each holding one step of packs (at most kThreads *
// kFwdChunkPacks * N columns) in registers while the cluster merges the statistics, then writing
// its columns of dlogits = weight[row] * d loss_row / d logits from them: the logits are read
// once and dlogits written once, where the forward and backward kernels read them twice. Every
// CTA merges the partials of all in the same order, so all hold the same statistics; CTA 0
// writes the loss.

// The thread's columns of dlogits from its held packs, as ce_grad() computes them, with the
// row's cases out of the element loop and the label found by one 32-bit compare a pack.
template <class T, int N, int P, bool kMasked>
__device__ __forceinline__ void store_grads(const Pack<T, N> (&raw)[P], int len, int64_t first, const CeGradRow& gr,
                                            const bool* mask, T* d) {
  if (gr.off || gr.nan_row) {
    float fill[N];
#pragma unroll
    for (int k = 0; k < N; ++k) fill[k] = gr.off ? 0.f : NAN;
#pragma unroll
    for (int p = 0; p < P; ++p)
      if (p * kThreads * N < len) store_pack<T, N>(d + p * kThreads * N, fill);
    return;
  }
  const int64_t label = gr.label - first;  // from the thread's first column
  const int rel = label >= 0 && label < len ? static_cast<int>(label) : -1;
  const CeExpFrom<T> ex(gr.lse);
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int off = p * kThreads * N;
    if (off < len) {
      float v[N], out[N];
      unpack(raw[p], v);
      bool keep[N];
      if constexpr (kMasked) load_mask<N>(mask + off, keep);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float g = fmaf(gr.a, ex(v[k]), -gr.b);
        out[k] = !kMasked || keep[k] ? g : 0.f;
      }
      if (static_cast<unsigned>(rel - off) < static_cast<unsigned>(N)) {
#pragma unroll
        for (int k = 0; k < N; ++k)
          if (off + k == rel) out[k] -= gr.c;
      }
      store_pack<T, N>(d + off, out);
    }
  }
}

// The loss (CTA 0's thread 0) and the gradient's row constants from the row's statistics.
template <class T>
__device__ __forceinline__ CeGradRow finish_row(const CrossEntropyFwdOp<T>& op, const CeStats& s, int64_t row,
                                                int64_t y, float g, bool writes_loss) {
  const float n = op.o.has_mask ? s.n : static_cast<float>(op.cols);
  float lse;
  if (writes_loss) {
    const float xl = ce_label_ok(y, op.cols) ? to_float(op.x[row * op.cols + y]) : NAN;
    op.loss[row] = ce_row_loss(s, n, xl, y, op.cols, op.o, &lse);
  }
  lse = s.max + logf(s.sum);  // ce_row_loss's
  return ce_grad_row(g, lse, n, y, op.cols, op.o);
}

// One row per cluster, its packs loaded straight into registers. Persistent clusters that copied
// their next two rows into shared memory (cp.async) while working on one lost the same-call A/B:
// 1.07-1.14x the time at bf16 and float32 128256, 1.00x at bf16 32000 (h100-cross-entropy.md).
template <class T, int N, Fold kFold>
__global__ void __launch_bounds__(kThreads, kFold == Fold::kGeneral ? kFwdGradMaskedCtas : kFwdGradCtas)
    fwd_grad_kernel(CrossEntropyFwdOp<T> op, const float* weight, T* dx, int64_t width) {
  constexpr int P = kFwdChunkPacks;
  __shared__ RowReduceSmem<CeStats, kThreads / 32> red;
  const cg::cluster_group cl = cg::this_cluster();
  const unsigned chunks = cl.num_blocks();
  const int64_t rank = cl.block_rank(), row = blockIdx.x / chunks;
  const int64_t first = rank * width + threadIdx.x * N;
  const int len = static_cast<int>(min(rank * width + width, op.cols) - first);
  const T* x = op.x + row * op.cols + first;
  cluster_reduce_init(red, chunks);
  // The row's label and weight with the packs: the writes after the merge wait on nothing else.
  const int64_t y = op.labels[row];
  const float g = weight[row];
  Pack<T, N> raw[P];
#pragma unroll
  for (int p = 0; p < P; ++p)
    if (p * kThreads * N < len) raw[p] = load_raw<T, N>(x + p * kThreads * N);
  CeStats acc = CrossEntropyFwdOp<T>::identity();
  if (kFold == Fold::kGeneral || !fold_held<T, N, P, kFold == Fold::kWithSum>(raw, len, acc)) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int off = p * kThreads * N;
      if (off < len) fold_pack<T, N, kFold>(op, row, first + off, raw[p], acc);
    }
  }
  using Merge = CeMerge<kFold != Fold::kPlain, kFold == Fold::kGeneral>;
  acc = row_allreduce<kThreads, 1>(acc, Merge{}, red, 0);
  const CeStats s = cluster_allreduce(acc, Merge{}, red, 0, chunks, CrossEntropyFwdOp<T>::identity());
  const CeGradRow gr = finish_row(op, s, row, y, g, rank == 0 && threadIdx.x == 0);
  const bool* mask = kFold == Fold::kGeneral ? op.mask + row * op.cols + first : nullptr;
  store_grads<T, N, P, kFold == Fold::kGeneral>(raw, len, first, gr, mask, dx + row * op.cols + first);
}

}  // namespace ce
}  // namespace jaxnorm

// The row kernels every op shares, and the choice among them by row width (OneFlow's dispatch,
// extended with thread-block clusters for rows wider than one CTA can hold).
//
// A *tile* kernel keeps the whole row in registers: a row is held by kTPR threads of a CTA
// (1..32 lanes, several rows per CTA; or the whole CTA) times kCluster CTAs of a cluster, each
// thread holding kPacks 16-byte packs. Statistics are reduced across lanes, warps and cluster
// CTAs (row_reduce.cuh), then each thread writes its outputs from registers: x is read once.
// A *loop* kernel handles any width and alignment with scalar accesses and a second read of the
// row (L2-resident); it is the fallback for unaligned widths and rows wider than any tile.
//
// An Op (norm_ops.cuh, softmax_ops.cuh) supplies loads, per-thread statistics, the merge, the
// per-row finalization and the stores, so one tuned kernel serves every operator.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/stats.h"
#include "cuda/bulk_stage.cuh"
#include "cuda/device_types.cuh"
#include "cuda/launch.cuh"
#include "cuda/row_reduce.cuh"
#include "cuda/tile_choice.h"

namespace jaxnorm {

struct WelfordMerge {
  __device__ Welford operator()(Welford a, Welford b) const { return welford_merge(a, b); }
};
struct MaxSumMerge {
  __device__ MaxSum operator()(MaxSum a, MaxSum b) const { return maxsum_merge(a, b); }

  // A group's max by one butterfly, then its sum by another, each lane's sum rescaled to the max
  // once: one exp a lane where a merge at every level takes two, and five instructions a level
  // instead of ~19 (QuACK's online-softmax reduction; merges were a quarter of the bf16 softmax
  // forward's instructions at 32768 columns, results/h100-rows.md). fmaxf skips a NaN max (the
  // loop kernel's), whose lane's sum is NaN too, and so is the row's. Symmetric, so every lane
  // ends with the same bits.
  static constexpr bool kGroupAllReduce = true;
  template <int kWidth>
  __device__ MaxSum group(MaxSum v) const {
    const float m = group_max<kWidth>(v.max);
    return {m, group_sum<kWidth>(maxsum_rescale(v.sum, v.max, m))};
  }
};
struct SumMerge {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Sum2Merge {
  __device__ Sum2 operator()(Sum2 a, Sum2 b) const { return sum2_merge(a, b); }
};

__device__ __forceinline__ int64_t ceil_div_dev(int64_t a, int64_t b) { return (a + b - 1) / b; }

// L2 prefetch of a worker's next rows while it works on the current ones (the op's budget says
// from which row span on). One row ahead: two measured slower (results/NOTES.md v6).
template <class Op, int kTPR, int kCluster>
constexpr bool prefetches() {
  return kTPR * kCluster >= Op::kBudget.prefetch_threads;
}

// One thread of each CTA requests the CTA's share of rows [row, row + kRowsPerCta) of the worker:
// the whole span for a CTA-wide tile, 1/kCluster of the row for a cluster tile.
template <int kTPR, int kRowsPerCta, int kCluster, class Op>
__device__ __forceinline__ void prefetch_rows(const Op& op, int64_t row, int64_t end) {
  if constexpr (prefetches<Op, kTPR, kCluster>()) {
    if (threadIdx.x == 0 && row < end) {
      const int part = kCluster > 1 ? static_cast<int>(blockIdx.x % kCluster) : 0;
      op.prefetch(row, min(static_cast<int64_t>(kRowsPerCta), end - row), part, kCluster);
    }
  }
}

// A grid of one CTA per kBlock / kTPR rows lets the hardware balance the rows over the SMs,
// where a persistent grid's static shares end unevenly: bf16 forwards up to 16384 columns ran
// 2-22% faster against XLA in the same call (results/NOTES.md v7). Cluster tiles are one-shot up
// to a cluster size that the op's budget and the direction choose (FwdRunner, one_shot_bwd), larger
// ones persistent.
template <int kCluster, int kMaxOneShotCluster = 1>
constexpr bool one_shot_grid() {
  return kCluster <= kMaxOneShotCluster;
}
constexpr int64_t kMaxGridX = 2147483647;

template <int kTPR, int kBlock>
constexpr int warps_for_reduce() {
  return kTPR > 32 ? kBlock / 32 : 0;
}

// Column of pack p of thread t (t counts across the cluster's CTAs).
template <int kTPR, int kCluster, int V>
__device__ __forceinline__ int64_t pack_col(int p, int t) {
  return (static_cast<int64_t>(p) * kTPR * kCluster + t) * V;
}

// Whether an op's packs may be split (device_types.cuh: load_raw_split): ops that say so in
// kSplitPacks and then read `op.split`.
template <class Op, class = void>
struct SplitsPacks : std::false_type {};
template <class Op>
struct SplitsPacks<Op, std::void_t<decltype(Op::kSplitPacks)>> : std::bool_constant<Op::kSplitPacks> {};

// Whether an op runs the forward's stores through op.specialize(f), which calls f with a copy of
// the op whose runtime flags are constants where they take their common values (Op::kSpecializes).
template <class Op, class = void>
struct Specializes : std::false_type {};
template <class Op>
struct Specializes<Op, std::void_t<decltype(Op::kSpecializes)>> : std::bool_constant<Op::kSpecializes> {};

// Whether an op's packs combine x with a second row's (the residual-add forward's r): it names
// that row's pack Beside<N>, loads it by load_beside() and combines the two into x's pack by
// combine_held() where the tile holds the row as loaded (else convert() loads and combines).
// Tiles holding the row as loaded issue every pack's loads of both rows before they combine any:
// combined as each pack was loaded, each pack's loads waited for the previous pack's data (the
// registers reused), a memory round trip a pack. Tiles holding floats keep that order: at 64
// registers, two packs at a time spilled 112-252 bytes (bf16; results/h200-add-held).
template <class Op, class = void>
struct LoadsBeside : std::false_type {};
template <class Op>
struct LoadsBeside<Op, std::void_t<decltype(Op::kLoadsBeside)>> : std::bool_constant<Op::kLoadsBeside> {};
// The pack of that row (an empty stand-in for other ops).
template <class Op, int N, bool = LoadsBeside<Op>::value>
struct BesideOf {
  struct type {};
};
template <class Op, int N>
struct BesideOf<Op, N, true> {
  using type = typename Op::template Beside<N>;
};

// Whether a tile has split-pack code: tiles of whole warps a row that can hold a row split packs
// are taken for (kSplitPackCols columns). Narrower tiles compile without it: its branches on
// `split` cost the small launches (one wave) ~0.5 us (results/h100-rows.md, v16).
template <class Op, int kTPR, int kCluster, int kPacks>
constexpr bool split_tile() {
  return SplitsPacks<Op>::value && kTPR % 32 == 0 &&
         static_cast<long long>(kTPR) * kCluster * kPacks * kVecOf<typename Op::Type> >= kSplitPackCols;
}

// ---------------------------------------------------------------------------------------------
// Forward: statistics of x, then y from registers.
// An op that can (the norms) holds a 16-bit row as loaded: its statistics convert each element
// as they go, and the stores convert the row again. Half the registers of holding floats (bf16
// 4-pack tiles: 72 -> 56), so more warps are resident (LayerNorm +0-9% vs XLA, results/NOTES.md
// v7).
template <class Op, int kPacks>
constexpr bool holds_raw() {
  if constexpr (!Op::kCanHoldRaw || sizeof(typename Op::Type) != 2) return false;
  else return kPacks >= Op::kRawMinPacks;  // an op may hold floats where its registers allow
}

// CTAs of 512 threads must fit twice per SM (64 registers a thread), so one CTA's loads overlap
// the other's reduction. (Holding the next row's packs in registers instead, one CTA per SM,
// measured slower: 1dc6ced in results/NOTES.md.) 256-thread CTAs holding 32 registers of row
// (kHeldRowForwardBudget's cluster tiles) fit three times, QuACK's occupancy, or four (below). The
// widest tiles need 128 registers.
//
// 256-thread tiles of 8 packs holding a 16-bit row as loaded fit four times at 64 registers, as
// softmax's do; the norms took 76 at a bound of three, and at 32768-131072 columns their
// parameter loads waited with 32% of the warps resident against softmax's 47% (Nsight Compute).
// Same-call A/B at four (h100-insn-1e5d404, call 7, bf16 and fp16 forwards): RMSNorm +2-4% at
// 32768-131072, LayerNorm +6-12% at 65536-262144 but -5% (bf16) and -11% (fp16) at 32768, the
// clusters of 2, which keep three. Float32 8-pack norm tiles at four too (RMSNorm's spill 8
// bytes): LayerNorm +3.4-5.8%, RMSNorm +1.3-3.5% at 32768-65536 columns, 131072 +-0.6% (v25).
// Float32 softmax's too (60 registers at four, no spill): 1.05-1.10x at 16384-131072 columns on
// the H200. The 512-thread clusters of 16 holding 32 registers of row (float32 rows of
// 131073-262144 columns) fit twice, in 60-64 registers (RMSNorm's spill 8 bytes): one CTA an SM
// left the SM loading nothing while its row reduced and stored; softmax 1.54x, the persistent
// norm tiles 1.06-1.10x at 262144 (results/h200-f32-occupancy).
template <class Op, int kBlock, int kPacks, int kCluster = 1>
constexpr int min_ctas_per_sm() {
  constexpr int held = kPacks * (holds_raw<Op, kPacks>() ? 4 : kVecOf<typename Op::Type>);
  if constexpr (kBlock < 256 && kPacks >= 8) return 256 / kBlock * min_ctas_per_sm<Op, 256, kPacks, kCluster>();
  if constexpr (kBlock == 256 && kPacks >= 8 && held <= 32 && (Op::kParamFloats < 2 || kCluster >= 4)) return 4;
  if constexpr (kBlock == 512 && kPacks == 8 && held == 32 && (kCluster == 16 || kCluster == 1)) return 2;
  return kBlock >= 512 && kPacks <= 4 ? 2 : kBlock == 256 && held <= 32 ? 3 : 1;
}

// What store() needs beyond the row (the norms' scale and bias, Op::Params) is loaded in store(),
// after the previous pack's store, which the compiler cannot move a load across: each pack waits
// for its own memory round trip after the row's reduction, kPacks of them in a row. A launch of
// one wave (a small batch), where that chain is the kernel's time, takes the kernel variant
// kEarlyParams that loads them for all of a thread's packs beside x, before the reduction: bf16 norms
// 0.4-0.6 us faster at 1-512 rows (LayerNorm 8 x 768 2.59 -> 2.21 us). Its registers (LayerNorm
// 56 -> 114 a thread) cost larger launches 7-18% (results/h100-rows.md, v13). Only where the
// tile's register cap leaves room beside the held row (Op::kParamFloats floats a column, ~32
// registers of addresses and temporaries), in tiles of up to 4 packs; the wide tiles spilled.
template <class Op, int kBlock, int kPacks>
constexpr bool early_params() {
  constexpr int V = kVecOf<typename Op::Type>;
  constexpr int held = kPacks * (holds_raw<Op, kPacks>() ? 4 : V);
  constexpr int cap = 65536 / (kBlock * min_ctas_per_sm<Op, kBlock, kPacks>());
  return Op::kParamFloats > 0 && kPacks <= 4 &&
         held + kPacks * V * Op::kParamFloats + 32 <= cap;
}

// The residual-add forward's tiles of 4 packs and 64-256 threads (16-bit x and r, up to 8192
// columns; up to 2048 where h has x's dtype, whose wider rows take 8 packs holding h as stored,
// norm_ops.cuh, AddNormFwdOp) hold h as floats: 68-77 registers, 24 warps an SM (bf16 at 32768 x 1024: DRAM 66-71%
// busy against the plain forward's 67-70% at two thirds the bytes, Nsight Compute,
// results/h200-half-wide). Bounded at 64 registers (eight 128-thread CTAs an SM) they take 62-64,
// no spills with r and h 16-bit, the case measured; a float32 r spilled, and so did fp16
// LayerNorm's with a float32 h (20 bytes): the op keeps the default for both. Two builds in one
// call each (H200, 2^27 elements), bf16 / fp16 residual-add forward: the 128-thread tiles at
// eight CTAs 1.04-1.15x (LayerNorm) and 1.05x (RMSNorm) at 256-1024 columns, 1.03-1.15x at
// 3000-4096; then the 64- and 256-thread ones 1.03-1.05x at 2048, 1.04-1.14x at 6144-8192;
// fwd+bwd 1.02-1.06x at 1024-8192; launches of a wave and the 512-thread tiles (16384) level.
// Op::kFourPackRegs: the registers a thread those tiles are bounded to (0: none). The
// early-parameter variant (a wave or less) keeps its registers.
template <class Op, class = void>
struct FourPackRegs : std::integral_constant<int, 0> {};
template <class Op>
struct FourPackRegs<Op, std::void_t<decltype(Op::kFourPackRegs)>> : std::integral_constant<int, Op::kFourPackRegs> {};
// Op::kEightPackRegs: the registers a thread of its 8-pack CTA tiles of 64-256 threads (0: the
// default), which it takes in place of min_ctas_per_sm's.
template <class Op, class = void>
struct EightPackRegs : std::integral_constant<int, 0> {};
template <class Op>
struct EightPackRegs<Op, std::void_t<decltype(Op::kEightPackRegs)>> : std::integral_constant<int, Op::kEightPackRegs> {};
template <class Op, int kBlock, int kPacks, int kCluster, bool kEarlyParams>
constexpr int tile_fwd_min_ctas() {
  constexpr int base = min_ctas_per_sm<Op, kBlock, kPacks, kCluster>();
  constexpr int regs = FourPackRegs<Op>::value, regs8 = EightPackRegs<Op>::value;
  if constexpr (!kEarlyParams && kPacks == 8 && kCluster == 1 && kBlock >= 64 && kBlock <= 256 && regs8 > 0)
    return 65536 / (kBlock * regs8);
  constexpr bool bounded = !kEarlyParams && kPacks == 4 && kBlock >= 64 && kBlock <= 256 && regs > 0;
  constexpr int asked = bounded ? 65536 / (kBlock * regs) : 1;
  return asked > base ? asked : base;
}

// kReplicas > 1 (tile_choice.h, spread_small_launch): kReplicas CTAs a row, one an SM, each
// reducing the whole row and storing (and loading the parameters of) packs p % kReplicas == its
// slice.
template <class Op, int kTPR, int kBlock, int kPacks, int kCluster, bool kEarlyParams = false, int kReplicas = 1>
__global__ void __launch_bounds__(kBlock, kReplicas > 1 ? 1 : tile_fwd_min_ctas<Op, kBlock, kPacks, kCluster, kEarlyParams>())
    tile_fwd_kernel(Op op, int64_t rows, int64_t cols) {
  static_assert(kReplicas == 1 || (kCluster == 1 && kBlock == kTPR && kPacks % kReplicas == 0), "a replica is a CTA a row");
  const int slice = kReplicas > 1 ? static_cast<int>(blockIdx.x % kReplicas) : 0;
  const auto stores = [&](int p) { return kReplicas == 1 || p % kReplicas == slice; };
  using T = typename Op::Type;
  using Stats = typename Op::Stats;
  constexpr int V = kVecOf<T>;
  constexpr int kRowsPerCta = kBlock / kTPR;
  __shared__ RowReduceSmem<Stats, warps_for_reduce<kTPR, kBlock>(), Op::kBudget.async_exchange && (kCluster > 1)> red;
  const int t = (kCluster > 1 ? (blockIdx.x % kCluster) * kTPR : 0) + threadIdx.x % kTPR;
  const int slot = threadIdx.x / kTPR;
  const int64_t stride = (gridDim.x / (kCluster * kReplicas)) * kRowsPerCta;
  // A split pack's first half (device_types.cuh) starts 4 columns a lane before the whole pack's
  // column, which is the column the ops take; whole warps a row only. The thread's first column
  // is the one variable, so that every pack's addresses remain one base and an immediate offset
  // (computed signed, ptxas kept an address a pack and spilled them).
  constexpr bool kSplit = split_tile<Op, kTPR, kCluster, kPacks>();
  bool split = false;
  if constexpr (SplitsPacks<Op>::value) {
    if constexpr (!kSplit) op.split = false;  // the op's loads and stores see it too
    split = op.split;
  }
  const unsigned lane = threadIdx.x % 32, first = static_cast<unsigned>(t) * V;
  const unsigned col0 = split ? first - lane * (V / 2) : first;
  // Wide tiles (rows of 256+ threads) that hold a 16-bit row as loaded take the unsigned first
  // column too: computed signed (pack_col(p, t)), ptxas formed a 64-bit address a pack (softmax's
  // 256x8 tiles: ~10 instructions a pack at the loads and again at the stores); and they test a
  // pack's columns by one 32-bit compare against the columns left from the thread's first. Other
  // tiles keep the old forms: the new ones made tiles holding floats spill at 64 registers
  // (residual-add, softmax 512x4) and cost narrow 16-bit norm tiles 7-9 registers.
  constexpr bool kHeld = holds_raw<Op, kPacks>() && kTPR >= 256;
  const auto col_of = [&](int p) -> int64_t {
    if constexpr (kSplit || kHeld) return pack_col<kTPR, kCluster, V>(p, 0) + col0;
    else return pack_col<kTPR, kCluster, V>(p, t);
  };
  const int left = static_cast<int>(min(max(cols - static_cast<int64_t>(col0), int64_t{0}), int64_t{0x7fffffff}));
  const auto pack_ok = [&](int p) {
    if constexpr (kHeld) return p * (kTPR * kCluster * V) < left;
    else return col_of(p) < cols;
  };
  row_reduce_init<kCluster>(red);
  int iter = 0;  // the worker's rows so far (row_allreduce alternates its scratch by it)
  for (int64_t base = (blockIdx.x / (kCluster * kReplicas)) * kRowsPerCta; base < rows; base += stride, ++iter) {
    const int64_t row = base + slot;
    const bool row_ok = row < rows;
    Pack<T, V> raw[kPacks];
    float v[kPacks][V];
    bool ok[kPacks];
    typename Op::template Params<V> prm[kPacks];
    constexpr bool kCombineAfter = LoadsBeside<Op>::value && holds_raw<Op, kPacks>();
    typename BesideOf<Op, V>::type beside[kPacks];
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int64_t col = col_of(p);
      ok[p] = row_ok && pack_ok(p);
      if (ok[p]) {
        raw[p] = load_raw_split<T, V>(op.x + row * cols + col, split);
        if constexpr (kCombineAfter) beside[p] = op.template load_beside<V>(row, col);
        else if constexpr (holds_raw<Op, kPacks>()) op.hold(row, col, raw[p]);
        else op.convert(row, col, raw[p], v[p]);
      }
    }
    if constexpr (kCombineAfter) {
#pragma unroll
      for (int p = 0; p < kPacks; ++p)
        if (ok[p]) op.combine_held(raw[p], beside[p]);
    }
    if constexpr (kEarlyParams) {
#pragma unroll
      for (int p = 0; p < kPacks; ++p)
        if (ok[p] && stores(p)) op.load_params(col_of(p), prm[p]);
    }
    prefetch_rows<kTPR, kRowsPerCta, kCluster>(op, base + stride, rows);
    const Stats mine = [&] {
      if constexpr (holds_raw<Op, kPacks>()) return op.thread_stats(raw, ok);
      else return op.thread_stats(v, ok);
    }();
    const Stats s = row_allreduce<kTPR, kCluster>(mine, typename Op::Merge{}, red, iter);
    const auto r = op.finalize(s, mine, row, row_ok && t == 0 && slice == 0);
    const auto store_packs = [&](const Op& o) {
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        if (ok[p] && stores(p)) {
          const int64_t col = col_of(p);
          if constexpr (holds_raw<Op, kPacks>()) {  // a held op stores from x as loaded
            unpack_again(raw[p], v[p]);
            o.from_held(v[p], r);
          }
          o.store(row, col, v[p], r, kEarlyParams ? &prm[p] : nullptr);
        }
      }
    };
    if constexpr (Specializes<Op>::value && kHeld) op.specialize(store_packs);  // common flags as constants
    else store_packs(op);
  }
}

template <class Op, int kTPR, int kBlock>
__global__ void __launch_bounds__(kBlock) loop_fwd_kernel(Op op, int64_t rows, int64_t cols) {
  using Stats = typename Op::Stats;
  constexpr int kRowsPerCta = kBlock / kTPR;
  __shared__ RowReduceSmem<Stats, warps_for_reduce<kTPR, kBlock>()> red;
  const int t = threadIdx.x % kTPR;
  const int slot = threadIdx.x / kTPR;
  int iter = 0;  // the worker's rows so far (row_allreduce alternates its scratch by it)
  for (int64_t base = blockIdx.x * kRowsPerCta; base < rows; base += gridDim.x * kRowsPerCta, ++iter) {
    const int64_t row = base + slot;
    const bool row_ok = row < rows;
    Stats s = Op::identity();
    if (row_ok) {
      for (int64_t col = t; col < cols; col += kTPR) {
        float v[1];
        op.convert(row, col, load_raw<typename Op::Type, 1>(op.x + row * cols + col), v);
        op.push(s, v[0]);
      }
    }
    s = row_allreduce<kTPR, 1>(s, typename Op::Merge{}, red, iter);
    // The row's statistics stand in for the thread's: values are re-read, not kept.
    const auto r = op.finalize(s, s, row, row_ok && t == 0);
    if (row_ok) {
      for (int64_t col = t; col < cols; col += kTPR) {
        float v[1];
        op.convert(row, col, load_raw<typename Op::Type, 1>(op.x + row * cols + col), v);
        op.restate(v, s);
        op.store(row, col, v, r, static_cast<const typename Op::template Params<1>*>(nullptr));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Backward: one pass over (a, dy) [a = x, or y when the op recovers from the output], row sums,
// dx from registers; column sums (scale/bias gradients) accumulate in registers across the rows
// of a worker and are written once per worker to workspace[group][worker] (no atomics).
// 16-bit rows (a and dy) are held as loaded, as the forwards hold x: each pack is converted
// once for the row sums and again for dx, and the ops' terms() run twice (the second time only
// to put a in emit()'s form; its sums are dead).
template <class Op>
constexpr bool bwd_holds_raw() {
  return sizeof(typename Op::Type) == 2 && sizeof(typename Op::RowType) == 2;
}

// Registers of row (a and dy) a backward thread holds.
template <class Op, int kPacks>
constexpr int bwd_held_registers() {
  return 2 * kPacks * (bwd_holds_raw<Op>() ? 4 : kVecOf<typename Op::Type>);
}

// At most 128 registers a thread for CTAs up to 256 threads, so 512 threads fit per SM. A
// 512-thread CTA without column partials holding 32 registers of row (16-bit 4-pack tiles as
// loaded, float32 ones as floats) fits twice, where the op says its code does (Op::kFitsTwice).
// The 256-thread tiles of 2 packs (rows of 1024-4096 16-bit columns) fit the op's
// budget.bwd_256x2_ctas: 3 for the plain 16-bit RMSNorm backward, whose code ptxas fits in 80
// registers without spills (92 at 2). Against 2 an SM (H200, three builds in one call,
// results/h200-l2-prefetch): bf16 RMSNorm fwd+bwd 1.083x the speed at 131072 x 1024, 1.081x at
// 2048, 1.068x at 4096, fp16 1.077x at 1024; 4096 x 1024 0.986x. 4 an SM lost: with 72 bytes
// spilled at 64 registers 0.81-0.87x; with the default mode's flags as constants (64 registers,
// no spills; results/next-rows/d4-default-rms-4ctas.patch) 0.95-0.97x against 3 an SM at
// 2^27 elements, so the warps past 24 an SM cost more than they hide. LayerNorm's op with runtime
// flags spills 108 bytes at 80 registers; in the default mode (scale and bias) it takes the
// fixed-flag op (norm_ops.cuh), 80 registers without spills, 3 an SM too: bf16 LayerNorm fwd+bwd
// 1.13x at 131072 x 1024, 1.12x at 2048, 1.10x at 4096 (4.01 TB/s at 1024, 94% of the copy), fp16
// 1.09-1.12x, and RMSNorm's fixed op (72 registers) 1.01-1.02x (results/h200-fixed-flags). The
// residual-add ops spill 24-144 bytes: they keep 2. The RMSNorm op's kernel with runtime flags
// serves its memory-efficient mode and LayerNorm without a bias, which run 3 an SM untimed.
template <class Op, int kBlock, int kPacks>
constexpr bool half_wide_bwd() {  // tile_choice.h, half_wide_rows
  return Op::kBudget.half_wide && kBlock == Op::kBudget.max_block / 2 && kPacks == 2 * Op::kBudget.wide_packs;
}
template <class Op, int kBlock, int kPacks>
constexpr int bwd_min_ctas_per_sm() {
  if constexpr (Op::kColumnSums == 0) {
    if (Op::kFitsTwice && kBlock >= 512 && bwd_held_registers<Op, kPacks>() <= 32)
      return 2;
  }
  if (Op::kBudget.one_pack_rows && kPacks == 1) return 1024 / kBlock;  // tile_choice.h, one_pack_rows
  if (half_wide_bwd<Op, kBlock, kPacks>()) return 2;
  if (kBlock == 256 && kPacks == 2) return Op::kBudget.bwd_256x2_ctas;
  return kBlock >= 512 || kPacks > 4 ? 1 : 512 / kBlock;
}

// Whether a backward grid is one-shot (a worker a row span; the kernel then makes one pass):
// never for the ops with column sums, whose workers accumulate the scale/bias gradients across
// rows; CTA-wide tiles always; cluster tiles up to the op's budget.one_shot_cluster where two
// CTAs fit an SM (bf16 softmax fwd+bwd 32768-262144 7-12% faster than persistent clusters of
// one CTA a SM holding the row as loaded; one-shot at one CTA a SM, holding floats, had lost
// 20-28%: results/h100-rows.md, v12).
template <class Op, int kBlock, int kPacks, int kCluster>
constexpr bool one_shot_bwd() {
  if constexpr (Op::kColumnSums > 0) return false;
  else if constexpr (kCluster == 1) return one_shot_grid<1>();
  else return bwd_min_ctas_per_sm<Op, kBlock, kPacks>() >= 2 && one_shot_grid<kCluster, Op::kBudget.one_shot_cluster>();
}

// A backward op's operand of emit() that it may load beside a and dy (Op::Early<N>, load_early):
// none for most ops; the residual-add norm's cotangent of h, whose load at the store would be one
// more memory round trip after the row's reduction (bf16 add + RMSNorm backward 8192 x 4096:
// 0.87x the time loaded early; results/h100-add-norm.md). Taken where a thread's row and early
// packs fit 64 registers: past that (the wide tiles of float32 rows or h) ptxas spilled.
struct NoEarly {};

template <class Op, int kPacks>
constexpr bool bwd_loads_early() {
  constexpr int V = kVecOf<typename Op::Type>;
  using E = typename Op::template Early<V>;
  return !std::is_empty_v<E> && bwd_held_registers<Op, kPacks>() + kPacks * static_cast<int>(sizeof(E) / 4) <= 64;
}

// A backward thread's packs of a and dy (and the op's early operand where it fits): a and dy as
// floats, or as loaded (bwd_holds_raw). with(p, f) calls f(a, d, early) on pack p; for a held row
// a and d are converted afresh each time (the second time by unpack_again(), so the compiler does
// not keep the first conversion live).
template <class Op, int kPacks, bool kRaw = bwd_holds_raw<Op>()>
struct BwdRowPacks {
  static constexpr int V = kVecOf<typename Op::Type>;
  static constexpr bool kHeld = false;
  using Early = std::conditional_t<bwd_loads_early<Op, kPacks>(), typename Op::template Early<V>, NoEarly>;
  float a[kPacks][V], d[kPacks][V];
  Early e[kPacks];
  __device__ void load(const Op& op, int64_t row, int64_t col, int p) {
    op.load(row, col, a[p], d[p]);
    if constexpr (bwd_loads_early<Op, kPacks>()) e[p] = op.template load_early<V>(row, col);
  }
  template <bool kAgain, class F>
  __device__ void with(int p, F f) {
    f(a[p], d[p], e[p]);
  }
};

template <class Op, int kPacks>
struct BwdRowPacks<Op, kPacks, true> {
  static constexpr int V = kVecOf<typename Op::Type>;
  static constexpr bool kHeld = true;
  Pack<typename Op::RowType, V> a[kPacks];
  Pack<typename Op::Type, V> d[kPacks];
  using Early = std::conditional_t<bwd_loads_early<Op, kPacks>(), typename Op::template Early<V>, NoEarly>;
  Early e[kPacks];
  __device__ void load(const Op& op, int64_t row, int64_t col, int p) {
    op.load_held(row, col, a[p], d[p]);
    if constexpr (bwd_loads_early<Op, kPacks>()) e[p] = op.template load_early<V>(row, col);
  }
  // Pack p from the row's staged slices (staged_bwd_rows), at the thread's place in them.
  __device__ void load_staged(const Op& op, const typename Op::RowType* as, const typename Op::Type* ds, int64_t row,
                              int64_t col, int p) {
    a[p] = load_raw<typename Op::RowType, V>(as);
    d[p] = load_raw<typename Op::Type, V>(ds);
    if constexpr (bwd_loads_early<Op, kPacks>()) e[p] = op.template load_early<V>(row, col);
  }
  template <bool kAgain, class F>
  __device__ void with(int p, F f) {
    float fa[V], fd[V];
    if constexpr (kAgain) {
      unpack_again(a[p], fa);
      unpack_again(d[p], fd);
    } else {
      unpack(a[p], fa);
      unpack(d[p], fd);
    }
    f(fa, fd, e[p]);
  }
};

// The scale (and, for kSums == 2, bias) gradient partials of a thread's columns, summed over its
// worker's rows. In registers (the warp-row tile's too: warp_staged_bwd); for the wide tile
// (twice the columns a thread of the others holds) in dynamic shared memory instead, as
// [gradient][pack][float4 of the pack][thread] so a warp's float4 accesses are contiguous: the
// registers hold x and dy, and rows up to 262144 columns keep a tile (the loop fallback, which reads each row three times, ran at 31% of copy:
// results/h100.md). With one sum, get() gives a zero bias partial and put() drops it.
template <class Op, int kBlock, int kPacks>
constexpr bool partials_in_smem() {
  return Op::kColumnSums > 0 && kPacks > Op::kBudget.block_packs &&
         (kBlock == Op::kBudget.max_block || half_wide_bwd<Op, kBlock, kPacks>());
}

template <class Op, int kBlock, int kPacks>
constexpr size_t column_partials_smem() {
  return partials_in_smem<Op, kBlock, kPacks>()
             ? Op::kColumnSums * kPacks * kVecOf<typename Op::Type> * kBlock * sizeof(float)
             : 0;
}

template <int kPacks, int V, int kBlock, bool kInSmem, int kSums>
struct ColumnPartials {
  float g[kPacks][V], b[kPacks][V];
  __device__ explicit ColumnPartials(int = kPacks) {
#pragma unroll
    for (int p = 0; p < kPacks; ++p)
#pragma unroll
      for (int i = 0; i < V; ++i) g[p][i] = b[p][i] = 0.f;
  }
  __device__ void get(int p, float (&gp)[V], float (&bp)[V]) const {
#pragma unroll
    for (int i = 0; i < V; ++i) gp[i] = g[p][i], bp[i] = kSums == 2 ? b[p][i] : 0.f;
  }
  __device__ void put(int p, const float (&gp)[V], const float (&bp)[V]) {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      g[p][i] = gp[i];
      if constexpr (kSums == 2) b[p][i] = bp[i];
    }
  }
};

extern __shared__ float4 jn_dynamic_smem[];

// `used`: the packs a thread of the tile has in the row, the layout's stride (the half-wide tile's
// shared memory is sized to the row: half_wide_smem); kPacks for the others.
template <int kPacks, int V, int kBlock, int kSums>
struct ColumnPartials<kPacks, V, kBlock, true, kSums> {
  static_assert(V % 4 == 0, "packs of whole float4s");
  static constexpr int Q = V / 4;
  const int used;
  __device__ float4& at(int which, int p, int q) const {
    return jn_dynamic_smem[((which * used + p) * Q + q) * kBlock + threadIdx.x];
  }
  __device__ explicit ColumnPartials(int used_packs = kPacks) : used(used_packs) {
#pragma unroll
    for (int w = 0; w < kSums; ++w)
#pragma unroll
      for (int p = 0; p < kPacks; ++p)
#pragma unroll
        for (int q = 0; q < Q; ++q)
          if (p < used) at(w, p, q) = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  __device__ void get(int p, float (&gp)[V], float (&bp)[V]) const {
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      const float4 a = at(0, p, q), c = kSums == 2 ? at(1, p, q) : make_float4(0.f, 0.f, 0.f, 0.f);
      gp[4 * q] = a.x, gp[4 * q + 1] = a.y, gp[4 * q + 2] = a.z, gp[4 * q + 3] = a.w;
      bp[4 * q] = c.x, bp[4 * q + 1] = c.y, bp[4 * q + 2] = c.z, bp[4 * q + 3] = c.w;
    }
  }
  __device__ void put(int p, const float (&gp)[V], const float (&bp)[V]) {
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      at(0, p, q) = make_float4(gp[4 * q], gp[4 * q + 1], gp[4 * q + 2], gp[4 * q + 3]);
      if constexpr (kSums == 2) at(1, p, q) = make_float4(bp[4 * q], bp[4 * q + 1], bp[4 * q + 2], bp[4 * q + 3]);
    }
  }
};

// The norm backward's wide cluster tiles (a CTA a row slice, 16-bit rows held as loaded, the
// partials in shared memory, one CTA an SM) keep their slice of the scale in shared memory for all
// rows, where each row read it twice from L2. With one column sum (RMSNorm) they also stage the
// worker's next row's slices of a and dy there by bulk copies (bulk_stage.cuh) while the current
// row reduces, exchanges and stores, with the L2 prefetch a row further ahead. Measured on the H200
// against the plain tile (same calls; results/h100-rows.md v29, v30): bf16 RMSNorm fwd+bwd 1.01 /
// 1.05 / 1.10 / 1.21x at 32768 / 65536 / 131072 / 262144 columns (the 262144 backward 380 -> 281
// us, 43.8 -> 58.6% of DRAM throughput), fp16 1.07-1.23x. LayerNorm's two partials leave room for
// the scale but not the staged rows: the scale held, bf16 fwd+bwd 1.03 / 1.07 / 1.12x at 32768 /
// 65536 / 131072 (the backward 262144 ~424 -> ~342 us); staged with one slice a stage and no
// scale, it lost 3-17%. A launch whose workers have a row each has nothing to reuse or overlap and
// takes the plain tile (RMSNorm 16 x 65536 staged: 0.925x; LayerNorm 64 x 131072 held: 1.00x).
// Float32 rows (262144 columns: 512 x 8 x 16, 64 KB a slice) hold the scale beside the partials
// but cannot stage a and dy too (256 KB for RMSNorm): held, float32 fwd+bwd 1.19x (RMSNorm, the
// backward ~640 -> ~495 us) and 1.16x (LayerNorm) at 512 x 262144, 1.15 / 1.03x at 64 rows
// (results/h200-f32-bwd). The 16-bit one-CTA wide tile (512 x 4, 8193-16384 columns) holds the
// scale too but stages no rows: held, bf16 LayerNorm fwd+bwd 1.02 / 1.02 / 1.06x at 9000 / 12288 /
// 16384 (fp16 1.03x, 1.02x, 1.13x); RMSNorm held 1.02 / 1.01 / 1.04x (fp16 1.03x, 1.02x, 1.06x),
// where staged as well it lost 4% at 9000 and gained 1.01-1.04x at 16384 (H200, one build, a
// launch switch, results/h200-narrow-held).
// Dynamic shared memory of a backward tile: the partials; held, the scale's slice; staged, one
// slice each of a and dy.
template <class Op, int kBlock, int kPacks, bool kHeld, bool kStaged>
constexpr size_t bwd_smem_bytes() {
  constexpr size_t n = static_cast<size_t>(kPacks) * kBlock * kVecOf<typename Op::Type>;
  return column_partials_smem<Op, kBlock, kPacks>() + (kHeld ? n * sizeof(float) : 0) +
         (kStaged ? n * (sizeof(typename Op::RowType) + sizeof(typename Op::Type)) : 0);
}
template <class Op, int kTPR, int kBlock, int kPacks, int kCluster>
constexpr bool held_scale_bwd() {
  return (kCluster >= 2 || sizeof(typename Op::Type) == 2) && kTPR == kBlock && partials_in_smem<Op, kBlock, kPacks>() &&
         bwd_smem_bytes<Op, kBlock, kPacks, true, false>() <= kStagedSmemCap;
}
template <class Op, int kBlock, int kPacks, int kCluster>
constexpr bool staged_bwd_rows() {
  return kCluster >= 2 && Op::kColumnSums == 1 && bwd_holds_raw<Op>() && bwd_smem_bytes<Op, kBlock, kPacks, true, true>() <= kStagedSmemCap;
}

// The warp-row tile (tile_choice.h, warp_rows: a warp of 4 packs a row, 4 rows a 128-thread CTA;
// the plain 16-bit RMSNorm backward) after QuACK's backward at 1024 columns: its partials in
// registers, the scale of its columns (the same for the CTA's 4 rows) in shared memory for the
// kernel's life (the tile read the scale from L1 twice a row and its partials from shared memory;
// the scale in registers too took 128 registers and spilled 116 bytes), and each row slot's next
// two rows of a and dy staged in shared memory by cp.async, every thread copying the 16-byte
// packs it reads itself (so no barrier: cp.async.wait_group), while the current row reduces and
// stores. Against main's warp tile (H200, two builds in one call, results/h200-wide16): bf16
// RMSNorm fwd+bwd 1.065x the speed at 640 columns, 0.992x at 896; rows of 1024 columns, taking
// it instead of 64 threads of 2 packs, 0.95-0.96x (bf16; fp16 0.94x), so warp_rows still ends
// at 896 (112 packs).
template <class Op, int kTPR, int kBlock, int kPacks, int kCluster>
constexpr bool warp_staged_bwd() {
  return kTPR == 32 && kBlock == 128 && kCluster == 1 && Op::kBudget.warp_rows > 0 &&
         kPacks == 2 * Op::kBudget.block_packs && Op::kColumnSums == 1 && bwd_holds_raw<Op>();
}
constexpr int kWarpStages = 2;
template <class Op, int kTPR, int kBlock, int kPacks, int kCluster, bool kHeld>
constexpr size_t tile_bwd_smem() {
  if constexpr (warp_staged_bwd<Op, kTPR, kBlock, kPacks, kCluster>())
    return (size_t{kWarpStages} * 2 * kBlock + kTPR * kVecOf<typename Op::Type> / 4) * kPacks * 16;
  else return bwd_smem_bytes<Op, kBlock, kPacks, kHeld, kHeld && staged_bwd_rows<Op, kBlock, kPacks, kCluster>()>();
}

// A warp-row tile's stage of one row slot (warp_staged_bwd): this thread's packs of a and dy at the
// row, by cp.async into [a, dy][pack][thread] 16-byte entries; one commit group whether or not the
// row exists, so cp_async_wait counts rows.
template <class Op, int kTPR, int kBlock, int kPacks>
__device__ __forceinline__ void stage_warp_row(const Op& op, int64_t row, bool row_ok, int t, int64_t cols,
                                               uint4* stage) {
  constexpr int V = kVecOf<typename Op::Type>;
  if (row_ok) {
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int64_t col = pack_col<kTPR, 1, V>(p, t);
      if (col < cols) {
        cp_async_16(stage + p * kBlock + threadIdx.x, op.xin + row * cols + col);
        cp_async_16(stage + (kPacks + p) * kBlock + threadIdx.x, op.dy + row * cols + col);
      }
    }
  }
  cp_async_commit();
}

// kHold: the tile holds the scale (and stages rows) where held_scale_bwd allows it.
template <class Op, int kTPR, int kBlock, int kPacks, int kCluster, bool kHold = false>
__global__ void __launch_bounds__(kBlock, bwd_min_ctas_per_sm<Op, kBlock, kPacks>())
    tile_bwd_kernel(Op op, int64_t rows_per_group, int64_t cols, float* workspace, int64_t ws_rows) {
  using T = typename Op::Type;
  constexpr int V = kVecOf<T>;
  constexpr int kRowsPerCta = kBlock / kTPR;
  __shared__ RowReduceSmem<Sum2, warps_for_reduce<kTPR, kBlock>(), Op::kBudget.async_exchange && (kCluster > 1)> red;
  const int t = (kCluster > 1 ? (blockIdx.x % kCluster) * kTPR : 0) + threadIdx.x % kTPR;
  const int slot = threadIdx.x / kTPR;
  const int64_t workers = gridDim.x / kCluster;
  const int64_t worker = blockIdx.x / kCluster;
  const int64_t stride = workers * kRowsPerCta;
  const int64_t group_row0 = static_cast<int64_t>(blockIdx.y) * rows_per_group;
  row_reduce_init<kCluster>(red);
  constexpr int W = kBlock * V, S = W * kCluster;
  // The half-wide tile's shared memory holds the packs its threads have in the row (half_wide_smem).
  const int used = half_wide_bwd<Op, kBlock, kPacks>() ? static_cast<int>(min((cols + W - 1) / W, int64_t{kPacks}))
                                                       : kPacks;
  ColumnPartials<kPacks, V, kBlock, partials_in_smem<Op, kBlock, kPacks>(), Op::kColumnSums> parts(used);

  // Held tiles (held_scale_bwd): the scale's slice after the partials, then the staged slices of
  // a and dy; W columns a segment, S a segment of the cluster. Pack p's op reads the scale at col
  // from segment p of the slice (`at_pack`); other tiles read it from global memory.
  constexpr bool kHeld = kHold && held_scale_bwd<Op, kTPR, kBlock, kPacks, kCluster>();
  constexpr bool kStaged = kHeld && staged_bwd_rows<Op, kBlock, kPacks, kCluster>();
  using A = typename Op::RowType;
  float* const gs = reinterpret_cast<float*>(jn_dynamic_smem) +
                    column_partials_smem<Op, kBlock, kPacks>() / sizeof(float) / kPacks * used;
  A* const as = reinterpret_cast<A*>(gs + kPacks * W);
  T* const ds = reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(as) + kPacks * W * sizeof(A));
  __shared__ alignas(8) unsigned long long full[1];  // staged: the row's copies
  const unsigned rank = kCluster > 1 ? blockIdx.x % kCluster : 0;
  const auto at_pack = [&](int p) {
    Op q = op;
    if constexpr (kHeld) q.gamma = gs + p * W - (static_cast<int64_t>(p) * S + rank * W);
    return q;
  };
  if constexpr (kHeld) {
    if (kStaged && threadIdx.x == 0) init_stage_barriers(full, 1);
    if (op.gamma != nullptr) load_param_slice<kBlock, kCluster, W, kPacks>(op.gamma, gs, cols, rank);
    __syncthreads();  // the mbarrier initialized, the scale's slice in
    if (kStaged && threadIdx.x == 0 && worker < rows_per_group)
      stage_slices<kCluster, W, kPacks>(group_row0 + worker, cols, rank, smem_addr(&full[0]), op.xin, as, op.dy, ds);
  }
  // Warp-row tiles (warp_staged_bwd): the scale of the row's columns in shared memory, as
  // [pack][float4 of the pack][thread] so a warp's float4 reads are contiguous, and the slot's
  // first two rows staged.
  constexpr bool kWarpStaged = warp_staged_bwd<Op, kTPR, kBlock, kPacks, kCluster>();
  constexpr int kStageEntries = 2 * kPacks * kBlock;
  uint4* const stages = reinterpret_cast<uint4*>(jn_dynamic_smem);  // [kWarpStages][a, dy][pack][thread]
  float4* const gsm = reinterpret_cast<float4*>(stages + kWarpStages * kStageEntries);
  const auto scale_of = [&](int p, float(&g)[V]) {
#pragma unroll
    for (int q = 0; q < V / 4; ++q) {
      const float4 v = gsm[(p * (V / 4) + q) * kTPR + t];
      g[4 * q] = v.x, g[4 * q + 1] = v.y, g[4 * q + 2] = v.z, g[4 * q + 3] = v.w;
    }
  };
  if constexpr (kWarpStaged) {
    if (threadIdx.x < kTPR) {
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        const int64_t col = pack_col<kTPR, kCluster, V>(p, t);
        float g[V];
        if (col < cols) op.scale_at(col, g);
#pragma unroll
        for (int q = 0; q < V / 4; ++q)
          gsm[(p * (V / 4) + q) * kTPR + t] = make_float4(g[4 * q], g[4 * q + 1], g[4 * q + 2], g[4 * q + 3]);
      }
    }
    __syncthreads();  // the scale in
#pragma unroll
    for (int k = 0; k < kWarpStages; ++k) {
      const int64_t b = worker * kRowsPerCta + k * stride + slot;
      stage_warp_row<Op, kTPR, kBlock, kPacks>(op, group_row0 + b, b < rows_per_group, t, cols,
                                               stages + k * kStageEntries);
    }
  }

  int iter = 0;  // the worker's rows so far (row_allreduce alternates its scratch by it)
  constexpr bool kOnce = one_shot_bwd<Op, kBlock, kPacks, kCluster>();  // one pass: no loop state kept live
  for (int64_t base = worker * kRowsPerCta; base < rows_per_group && (!kOnce || iter == 0); base += stride, ++iter) {
    const int64_t row = group_row0 + base + slot;
    const bool row_ok = base + slot < rows_per_group;
    BwdRowPacks<Op, kPacks> rp;
    using Early = typename decltype(rp)::Early;
    bool ok[kPacks];
    if constexpr (kStaged) wait_phase<true>(&full[0], iter & 1);  // the row's copies landed
    uint4* const stage = stages + (iter % kWarpStages) * kStageEntries;
    if constexpr (kWarpStaged) cp_async_wait<kWarpStages - 1>();  // this row's copies landed
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int64_t col = pack_col<kTPR, kCluster, V>(p, t);
      ok[p] = row_ok && col < cols;
      if (!ok[p]) continue;
      if constexpr (kStaged) {
        rp.load_staged(op, as + p * W + threadIdx.x * V, ds + p * W + threadIdx.x * V, row, col, p);
      } else if constexpr (kWarpStaged) {
        rp.load_staged(op, reinterpret_cast<const A*>(stage + p * kBlock + threadIdx.x),
                       reinterpret_cast<const T*>(stage + (kPacks + p) * kBlock + threadIdx.x), row, col, p);
      } else {
        rp.load(op, row, col, p);
      }
    }
    if constexpr (kStaged) {
      __syncthreads();  // every thread's reads of the slices are done: they take the next row
      if (threadIdx.x == 0 && base + stride < rows_per_group)
        stage_slices<kCluster, W, kPacks>(row + stride, cols, rank, smem_addr(&full[0]), op.xin, as, op.dy, ds);
    }
    prefetch_rows<kTPR, kRowsPerCta, kCluster>(op, group_row0 + base + (kWarpStaged ? 3 : kStaged ? 2 : 1) * stride,
                                               group_row0 + rows_per_group);
    const auto in = op.row_in(row, row_ok);
    Sum2 s{0.f, 0.f};
#pragma unroll
    for (int p = 0; p < kPacks; ++p)
      if (ok[p])
        rp.template with<false>(p, [&](float(&a)[V], float(&d)[V], const Early&) {
          if constexpr (kWarpStaged) {
            float g[V];
            scale_of(p, g);
            op.terms_scaled(in, pack_col<kTPR, kCluster, V>(p, t), a, d, g, s);
          } else {
            at_pack(p).terms(in, row, pack_col<kTPR, kCluster, V>(p, t), a, d, s);
          }
        });
    // The stage's packs are in registers (the sums used them all): it takes the slot's row
    // kWarpStages ahead.
    if constexpr (kWarpStaged) {
      const int64_t b = base + kWarpStages * stride + slot;
      stage_warp_row<Op, kTPR, kBlock, kPacks>(op, group_row0 + b, b < rows_per_group, t, cols, stage);
    }
    s = row_allreduce<kTPR, kCluster>(s, Sum2Merge{}, red, iter);
    const auto r = op.finalize(in, s);
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      if (ok[p]) {
        const int64_t col = pack_col<kTPR, kCluster, V>(p, t);
        rp.template with<true>(p, [&](float(&a)[V], float(&d)[V], const Early& early) {
          const Op q = at_pack(p);
          float g[kWarpStaged ? V : 1];
          if constexpr (kWarpStaged) scale_of(p, g);
          if constexpr (decltype(rp)::kHeld) {
            Sum2 unused{0.f, 0.f};
            if constexpr (kWarpStaged) q.terms_scaled(in, col, a, d, g, unused);
            else q.terms(in, row, col, a, d, unused);  // a in emit()'s form again
          }
          float gp[V], bp[V];
          parts.get(p, gp, bp);
          if constexpr (kWarpStaged) q.emit_scaled(row, col, a, d, r, g, gp, bp, early);
          else q.emit(row, col, a, d, r, gp, bp, early);
          parts.put(p, gp, bp);
        });
      }
    }
  }

  if constexpr (Op::kColumnSums > 0) {
    constexpr bool kBias = Op::kColumnSums == 2;
    float* out = workspace + (static_cast<int64_t>(blockIdx.y) * ws_rows + worker) * 2 * cols;
    if constexpr (kRowsPerCta == 1) {
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        const int64_t col = pack_col<kTPR, kCluster, V>(p, t);
        // 16-byte stores: a float a store spread each warp store over 32 sectors, V times a pack,
        // with every worker storing at once at the kernel's end (bf16 RMSNorm backward 8192 x 4096:
        // 0.78 M more L2 write sectors than dx's; backward 0.56-0.98x the time with these). Whole
        // sectors a warp store (shuffled) tied (0.96-1.01x).
        if (col < cols) {
          float gp[V], bp[V];
          parts.get(p, gp, bp);
          store_pack<float, V>(out + col, gp);
          if constexpr (kBias) store_pack<float, V>(out + cols + col, bp);
        }
      }
    } else {
      // Several rows per CTA: sum the row slots' partials in shared memory, in slot order.
      constexpr int kSpan = kTPR * kPacks * V;  // columns one slot covers
      __shared__ float buf[Op::kColumnSums][kRowsPerCta][kSpan];
#pragma unroll
      for (int p = 0; p < kPacks; ++p) {
        float gp[V], bp[V];
        parts.get(p, gp, bp);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const int e = (p * kTPR + t) * V + i;
          buf[0][slot][e] = gp[i];
          if constexpr (kBias) buf[1][slot][e] = bp[i];
        }
      }
      __syncthreads();
      for (int e = threadIdx.x; e < kSpan && e < cols; e += kBlock) {
        float sg = 0.f, sb = 0.f;
        for (int k = 0; k < kRowsPerCta; ++k) {
          sg += buf[0][k][e];
          if constexpr (kBias) sb += buf[1][k][e];
        }
        out[e] = sg;
        if constexpr (kBias) out[cols + e] = sb;
      }
    }
  }
}

// Fallback backward: dx only (two passes over the row); column sums come from column_sums_kernel.
template <class Op, int kTPR, int kBlock>
__global__ void __launch_bounds__(kBlock) loop_bwd_kernel(Op op, int64_t rows, int64_t cols) {
  constexpr int kRowsPerCta = kBlock / kTPR;
  __shared__ RowReduceSmem<Sum2, warps_for_reduce<kTPR, kBlock>()> red;
  const int t = threadIdx.x % kTPR;
  const int slot = threadIdx.x / kTPR;
  int iter = 0;  // the worker's rows so far (row_allreduce alternates its scratch by it)
  for (int64_t base = blockIdx.x * kRowsPerCta; base < rows; base += gridDim.x * kRowsPerCta, ++iter) {
    const int64_t row = base + slot;
    const bool row_ok = row < rows;
    const auto in = op.row_in(row, row_ok);
    Sum2 s{0.f, 0.f};
    if (row_ok) {
      for (int64_t col = t; col < cols; col += kTPR) {
        float a[1], d[1];
        op.load(row, col, a, d);
        op.terms(in, row, col, a, d, s);
      }
    }
    s = row_allreduce<kTPR, 1>(s, Sum2Merge{}, red, iter);
    const auto r = op.finalize(in, s);
    if (row_ok) {
      for (int64_t col = t; col < cols; col += kTPR) {
        float a[1], d[1], g[1] = {0.f}, b[1] = {0.f};
        Sum2 unused{0.f, 0.f};
        op.load(row, col, a, d);
        op.terms(in, row, col, a, d, unused);  // puts a in the form emit() takes, as in the tile kernel
        op.emit(row, col, a, d, r, g, b, NoEarly{});
      }
    }
  }
}

// Column sums for the fallback: grid (column blocks, workers, groups); worker w sums a contiguous
// chunk of its group's rows for one column per thread, in row order.
template <class Op>
__global__ void __launch_bounds__(256) column_sums_kernel(Op op, int64_t rows_per_group, int64_t cols,
                                                          float* workspace, int64_t ws_rows, int64_t workers) {
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (col >= cols) return;
  const int64_t w = blockIdx.y, group = blockIdx.z;
  const int64_t chunk = ceil_div_dev(rows_per_group, workers);
  const int64_t r0 = group * rows_per_group + w * chunk;
  const int64_t r1 = group * rows_per_group + min(rows_per_group, (w + 1) * chunk);
  float sg = 0.f, sb = 0.f;
  for (int64_t row = r0; row < r1; ++row) op.column_terms(op.row_in(row, true), row, col, sg, sb);
  float* out = workspace + (group * ws_rows + w) * 2 * cols;
  out[col] = sg;
  out[cols + col] = sb;
}

// dscale[g, c] / dbias[g, c] = sum over the workers' partials, in a fixed order (dbias = 0
// where the op sums the scale's alone, sums == 1).
constexpr int kPartialSlices = 16;
__global__ void reduce_partials_kernel(const float* workspace, int64_t ws_rows, int64_t workers, int64_t cols,
                                       int sums, float* dscale, float* dbias);

// Picks the kernel for a row width from the op's register budget.
template <class Op>
TileChoice choose_tile_for(int64_t cols, bool vectorizable, bool clusters) {
  return choose_tile(cols, kVecOf<typename Op::Type>, vectorizable, clusters, Op::kBudget);
}

// Calls runner.template tile<tpr, block, packs, cluster>() for the chosen tile, or
// runner.template loop<tpr, block>() for the fallback.
template <class Op, class Runner>
ffi::Error run_choice(const TileChoice& c, Runner& runner) {
#define JN_TILE_CASE(a, b, p, k)                                                                     \
  if constexpr (tile_possible<a, b, p, k>(Op::kBudget)) {         \
    if (c.loop_tpr == 0 && c.tpr == a && c.block == b && c.packs == p && c.cluster == k) \
      return runner.template tile<a, b, p, k>();                                          \
  }
  JN_FOR_EACH_TILE(JN_TILE_CASE)
#undef JN_TILE_CASE
  if (c.loop_tpr == 32) return runner.template loop<32, 128>();
  if (c.loop_tpr == 512) return runner.template loop<512, 512>();
  return ffi::Error::Internal("jaxnorm: no kernel for this row width (internal dispatch error)");
}

}  // namespace jaxnorm

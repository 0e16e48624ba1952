// The norm forwards' cluster tiles as a persistent grid that keeps its column slice's scale (and
// bias) in shared memory for all of its rows and stages each row's x there by bulk asynchronous
// copies (cp.async.bulk on an mbarrier), two rows ahead. The one-shot tiles read a CTA's float32
// parameters from L2 for every row slice of x: 4 bytes (RMSNorm) or 8 (LayerNorm) a column, beside
// 2 bytes of a 16-bit x or 4 of a float32 one. Without those reads the 16-bit one-shot kernels ran
// 1-9% (RMSNorm) and 13-29% (LayerNorm) faster (results/h100-rows.md, v25). Here they are read
// from L2 once a CTA; the copies keep the bytes in flight that one CTA an SM would not have from
// its own loads. But a CTA runs its rows' chains one after another, where the one-shot tiles
// overlap four an SM: measured against them (v26, v27), staged 16-bit RMSNorm ran 0.93x at
// 32768-65536 columns, 0.99x at 131072 and 1.04x at 262144, LayerNorm 0.99-1.02x (behind its
// one-shot tiles with the st.async exchange). Float32 rows, with twice the bytes of x a column
// and the parameters' bytes the same, gained: RMSNorm 1.05-1.48x at 16384-262144 columns, LayerNorm
// 1.02-1.24x at 16384-131072 (results/h200-f32-staged), and 16-bit RMSNorm in CTAs of 512 threads
// of 4 packs (not 256 of 8) 1.05-1.10x at 65536-262144. So the budget's staged_clusters (a mask of
// cluster sizes) name the tiles that run staged: every norm cluster tile but 16-bit LayerNorm's,
// whose longer chain a row (two-pass statistics, three values a merge, the bias) a staged CTA pays
// in full: staged in 256 x 8 CTAs it ran 0.82x its one-shot tiles, in 512 x 4 ones 0.90-0.98x
// (results/h200-wide16, h200-ln-staged).
#pragma once

#include "cuda/bulk_stage.cuh"
#include "cuda/row_reduce.cuh"
#include "cuda/row_tiles.cuh"

namespace jaxnorm {

// Dynamic shared memory: the slice's parameters (float32) that it holds, then two row slices of x.
template <class Op, int kThreads, int kPacks>
constexpr size_t staged_param_bytes() {
  return static_cast<size_t>(kPacks) * kThreads * kVecOf<typename Op::Type> * 4;
}
template <class Op, int kThreads, int kPacks>
constexpr size_t staged_row_bytes() {
  return static_cast<size_t>(kPacks) * kThreads * kVecOf<typename Op::Type> * sizeof(typename Op::Type);
}
// The parameters held: all of them, or the scale alone where LayerNorm's bias does not fit beside
// it and two row buffers (float32 at 262144 columns: 64 KB slices), its bias then read from L2 by
// store(): 1.02-1.11x the persistent tile at 512 rows, 0.92x at 64; one row buffer beside both
// lost (0.87-0.94x; results/h200-f32-staged). 0: the tile cannot run staged.
template <class Op, int kThreads, int kPacks>
constexpr int staged_held_params() {
  int k = Op::kParamFloats;
  while (k > 0 && k * staged_param_bytes<Op, kThreads, kPacks>() + 2 * staged_row_bytes<Op, kThreads, kPacks>() > kStagedSmemCap) --k;
  return k;
}
template <class Op, int kThreads, int kPacks>
constexpr size_t staged_smem() {
  return staged_held_params<Op, kThreads, kPacks>() * staged_param_bytes<Op, kThreads, kPacks>() +
         2 * staged_row_bytes<Op, kThreads, kPacks>();
}

// Whether the tile (tpr, block, packs, cluster) of Op runs staged: a norm cluster tile of a size
// in its budget's staged_clusters, with parameters to keep, of 4 or more packs a thread (16-bit
// rows held as loaded).
template <class Op, int kTPR, int kBlock, int kPacks, int kCluster>
constexpr bool staged_tile() {
  if constexpr (kCluster < 2 || (Op::kBudget.staged_clusters & kCluster) == 0 || kTPR != kBlock ||
                Op::kParamFloats == 0 || !Specializes<Op>::value) {
    return false;
  } else {
    constexpr bool shape = kPacks >= 4 && (sizeof(typename Op::Type) == 4 || holds_raw<Op, kPacks>());
    return shape && staged_held_params<Op, kBlock, kPacks>() > 0;
  }
}

template <class Op, int kThreads, int kPacks, int kCluster>
__global__ void __launch_bounds__(kThreads, 1) staged_fwd_kernel(Op op, int64_t rows, int64_t cols) {
  using T = typename Op::Type;
  using Stats = typename Op::Stats;
  constexpr int V = kVecOf<T>, W = kThreads * V, P = kPacks, S = W * kCluster;
  constexpr int kHeld = staged_held_params<Op, kThreads, kPacks>();
  extern __shared__ __align__(128) unsigned char staged_dyn[];
  float* const prm = reinterpret_cast<float*>(staged_dyn);  // [kHeld][P * W]
  T* const xs = reinterpret_cast<T*>(staged_dyn + kHeld * staged_param_bytes<Op, kThreads, kPacks>());  // [2][P * W]
  __shared__ alignas(8) unsigned long long full[2];
  __shared__ RowReduceSmem<Stats, kThreads / 32, true> red;
  const unsigned rank = blockIdx.x % kCluster;
  const int64_t worker = blockIdx.x / kCluster, workers = gridDim.x / kCluster;
  const bool split = op.split;
  const unsigned lane = threadIdx.x % 32, first = threadIdx.x * V;
  const unsigned local = split ? first - lane * (V / 2) : first;  // the thread's columns in a segment
  const unsigned col0 = rank * W + local;
  const int left = static_cast<int>(min(max(cols - static_cast<int64_t>(col0), int64_t{0}), int64_t{0x7fffffff}));
  if (threadIdx.x == 0) init_stage_barriers(full, 2);
  row_reduce_init<kCluster>(red);
  __syncthreads();  // the mbarriers initialized
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i) {
      const int64_t row = worker + i * workers;
      if (row < rows) stage_slices<kCluster, W, P>(row, cols, rank, smem_addr(&full[i]), op.x, xs + i * P * W);
    }
  }
  // The slice's parameters, once (the common call has both of LayerNorm's, RMSNorm's scale).
  const float* const src[2] = {op.has_scale ? op.gamma : nullptr, op.has_bias ? op.beta : nullptr};
#pragma unroll
  for (int k = 0; k < kHeld; ++k) {
    if (src[k] != nullptr) load_param_slice<kThreads, kCluster, W, P>(src[k], prm + k * P * W, cols, rank);
  }
  // LayerNorm's bias where shared memory holds the scale alone: in registers for the kernel's life
  // (P * V floats a thread), where store() read it from L2 after every row's reduction, on the
  // row's critical path.
  constexpr bool kBiasInRegs = kHeld < Op::kParamFloats;
  using Params = typename Op::template Params<V>;
  Params held[kBiasInRegs ? P : 1];
  if constexpr (kBiasInRegs) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (p * S < left) op.load_bias(static_cast<int64_t>(p) * S + col0, held[p]);
    }
  }
  __syncthreads();
  int iter = 0;
  for (int64_t row = worker; row < rows; row += workers, ++iter) {
    const int b = iter & 1;
    wait_phase<true>(&full[b], (iter >> 1) & 1);  // the copies' bytes landed
    const T* const xrow = xs + b * P * W;
    Pack<T, V> raw[P];
    bool ok[P];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      ok[p] = p * S < left;
      if (ok[p]) raw[p] = load_raw_split<T, V>(xrow + p * W + local, split);
    }
    const Stats mine = op.thread_stats(raw, ok);
    // Every thread's statistics (so its reads of the buffer) are in before the CTA barrier in
    // row_allreduce; after it the buffer takes the row two ahead.
    const Stats s = row_allreduce<kThreads, kCluster>(mine, typename Op::Merge{}, red, iter);
    if (threadIdx.x == 0 && row + 2 * workers < rows)
      stage_slices<kCluster, W, P>(row + 2 * workers, cols, rank, smem_addr(&full[b]), op.x, xs + b * P * W);
    const auto r = op.finalize(s, mine, row, threadIdx.x == 0 && rank == 0);
    const auto store_packs = [&](const Op& o) {
#pragma unroll
      for (int p = 0; p < P; ++p) {
        if (ok[p]) {
          const int64_t col = static_cast<int64_t>(p) * S + col0;
          // The parameters at col, from the slice in shared memory: pack p's segment starts at
          // column p * S + rank * W and sits at p * W there.
          Op q = o;
          q.gamma = prm + p * W - (static_cast<int64_t>(p) * S + rank * W);
          if constexpr (kHeld > 1) q.beta = prm + P * W + p * W - (static_cast<int64_t>(p) * S + rank * W);
          float v[V];
          unpack_again(raw[p], v);
          q.from_held(v, r);
          if constexpr (kBiasInRegs) {
            Params e = held[p];
            q.load_scale(col, e);
            q.store(row, col, v, r, &e);
          } else {
            q.store(row, col, v, r, static_cast<const Params*>(nullptr));
          }
        }
      }
    };
    op.specialize(store_packs);
  }
}

}  // namespace jaxnorm

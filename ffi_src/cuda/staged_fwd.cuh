// The 16-bit norm forwards' cluster tiles (256 threads x 8 packs a CTA, 16384 columns) as a
// persistent grid, one CTA an SM, that keeps its column slice's scale (and bias) in shared
// memory for all of its rows and stages each row's x there by bulk asynchronous copies
// (cp.async.bulk on an mbarrier), two rows ahead. The one-shot tiles read a CTA's 64 KB (RMSNorm)
// or 128 KB (LayerNorm) of float32 parameters from L2 for every 32 KB row slice of x: without
// those reads the same kernels ran 1-9% (RMSNorm) and 13-29% (LayerNorm) faster
// (results/h100-rows.md, v25). Here they are read from L2 once a CTA; the copies keep the bytes
// in flight that one CTA an SM would not have from its own loads. But a CTA runs its rows' chains
// one after another, where the one-shot tiles overlap four an SM: measured against them (v26,
// v27), staged RMSNorm ran 0.93x at 32768-65536 columns, 0.99x at 131072 and 1.04x at 262144,
// LayerNorm 0.99-1.02x (behind its one-shot tiles with the st.async exchange). So only the clusters
// of 16 of 16-bit RMSNorm run staged (the budget's staged_cluster), with the st.async exchange it
// was measured with.
#pragma once

#include "cuda/bulk_stage.cuh"
#include "cuda/row_reduce.cuh"
#include "cuda/row_tiles.cuh"

namespace jaxnorm {

constexpr int kStagedThreads = 256, kStagedPacks = 8;

// Whether the tile (tpr, block, packs, cluster) of Op runs staged: a 16-bit norm cluster tile of
// its budget's staged_cluster CTAs, holding x as loaded, with parameters to keep.
template <class Op, int kTPR, int kBlock, int kPacks, int kCluster>
constexpr bool staged_tile() {
  return kCluster == Op::kBudget.staged_cluster && kTPR == kStagedThreads && kBlock == kStagedThreads &&
         kPacks == kStagedPacks && kCluster >= 2 && Op::kParamFloats > 0 && holds_raw<Op, kPacks>() &&
         Specializes<Op>::value;
}

// Dynamic shared memory: the slice's parameters (float32), then two row slices of x.
template <class Op>
constexpr size_t staged_params_bytes() {
  return static_cast<size_t>(Op::kParamFloats) * kStagedPacks * kStagedThreads * kVecOf<typename Op::Type> * 4;
}
template <class Op>
constexpr size_t staged_row_bytes() {
  return static_cast<size_t>(kStagedPacks) * kStagedThreads * kVecOf<typename Op::Type> * sizeof(typename Op::Type);
}
template <class Op>
constexpr size_t staged_smem() {
  return staged_params_bytes<Op>() + 2 * staged_row_bytes<Op>();
}

template <class Op, int kCluster>
__global__ void __launch_bounds__(kStagedThreads, 1) staged_fwd_kernel(Op op, int64_t rows, int64_t cols) {
  using T = typename Op::Type;
  using Stats = typename Op::Stats;
  constexpr int V = kVecOf<T>, W = kStagedThreads * V, P = kStagedPacks, S = W * kCluster;
  extern __shared__ __align__(128) unsigned char staged_dyn[];
  float* const prm = reinterpret_cast<float*>(staged_dyn);  // [kParamFloats][P * W]
  T* const xs = reinterpret_cast<T*>(staged_dyn + staged_params_bytes<Op>());  // [2][P * W]
  __shared__ alignas(8) unsigned long long full[2];
  __shared__ RowReduceSmem<Stats, kStagedThreads / 32, true> red;
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
  for (int k = 0; k < Op::kParamFloats; ++k) {
    if (src[k] != nullptr) load_param_slice<kStagedThreads, kCluster, W, P>(src[k], prm + k * P * W, cols, rank);
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
    const Stats s = row_allreduce<kStagedThreads, kCluster>(mine, typename Op::Merge{}, red, iter);
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
          if constexpr (Op::kParamFloats > 1) q.beta = prm + P * W + p * W - (static_cast<int64_t>(p) * S + rank * W);
          float v[V];
          unpack_again(raw[p], v);
          q.from_held(v, r);
          q.store(row, col, v, r, static_cast<const typename Op::template Params<V>*>(nullptr));
        }
      }
    };
    op.specialize(store_packs);
  }
}

}  // namespace jaxnorm

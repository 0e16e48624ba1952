// Launch the chosen row kernel: a CTA per row span, or a grid sized to the device with as many
// workers (CTAs, or clusters) as are resident at once, each striding over rows (persistent).
#pragma once

#include <algorithm>
#include <utility>

#include "cuda/launch.cuh"
#include "cuda/row_tiles.cuh"
#include "cuda/staged_fwd.cuh"

namespace jaxnorm {

// Workers of `kernel` resident at once on the current device (0: a cluster shape that cannot be
// scheduled, so the caller must use another kernel).
template <class K>
int resident_workers(K kernel, int threads, int cluster, size_t dyn_smem = 0) {
  const DeviceFacts& d = device_facts();
  if (cluster > 1) return d.clusters ? max_active_clusters(kernel, threads, cluster, dyn_smem) : 0;
  if (allow_smem(kernel, dyn_smem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return d.sms * occupancy(kernel, threads, dyn_smem);
}

inline bool aligned16(const void* p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <class Op>
struct FwdRunner {
  Op op;
  int64_t rows, cols;
  cudaStream_t stream;
  const char* what;

  int replicas = 1;  // TileChoice::replicas: its launches load the parameters early (one wave)

  template <int kTPR, int kBlock, int kPacks, int kReplicas>
  ffi::Error replicated() {
    return launch(tile_fwd_kernel<Op, kTPR, kBlock, kPacks, 1, true, kReplicas>, dim3(rows * kReplicas), dim3(kBlock),
                  1, stream, what, op, rows, cols);
  }

  template <int kTPR, int kBlock, int kPacks, int kCluster>
  ffi::Error tile() {
    if constexpr (Op::kBudget.spread_small && replicas_fit(kTPR, kBlock, kPacks, kCluster)) {
      if (replicas == 4) return replicated<kTPR, kBlock, kPacks, 4>();
      if (replicas == 2) return replicated<kTPR, kBlock, kPacks, 2>();
    }
    if constexpr (staged_tile<Op, kTPR, kBlock, kPacks, kCluster>()) {
      auto staged = staged_fwd_kernel<Op, kBlock, kPacks, kCluster>;
      constexpr size_t smem = staged_smem<Op, kBlock, kPacks>();
      static const int staged_resident = resident_workers(staged, kBlock, kCluster, smem);
      if (staged_resident > 0) {
        const int64_t workers = std::min<int64_t>(rows, staged_resident);
        return launch_with_smem(staged, dim3(workers * kCluster), dim3(kBlock), kCluster, smem, stream, what, op, rows,
                                cols);
      }
    }
    auto kernel = tile_fwd_kernel<Op, kTPR, kBlock, kPacks, kCluster>;
    static const int resident = resident_workers(kernel, kBlock, kCluster);
    if (resident == 0) return loop<512, 512>();
    const int64_t needed = ceil_div(rows, kBlock / kTPR);
    // Cluster tiles of one pack a thread are spread_small_launch's, launched for few rows.
    if constexpr (early_params<Op, kBlock, kPacks>() && (kCluster == 1 || kPacks == 1)) {
      auto early = tile_fwd_kernel<Op, kTPR, kBlock, kPacks, kCluster, true>;
      static const int early_resident = resident_workers(early, kBlock, kCluster);
      if (needed <= early_resident)
        return launch(early, dim3(needed * kCluster), dim3(kBlock), kCluster, stream, what, op, rows, cols);
    }
    const int64_t workers = one_shot_grid<kCluster, Op::kBudget.one_shot_cluster>()
                                ? std::min<int64_t>(needed, kMaxGridX / kCluster)
                                : std::min<int64_t>(needed, resident);
    return launch(kernel, dim3(workers * kCluster), dim3(kBlock), kCluster, stream, what, op, rows, cols);
  }

  template <int kTPR, int kBlock>
  ffi::Error loop() {
    auto kernel = loop_fwd_kernel<Op, kTPR, kBlock>;
    static const int resident = resident_workers(kernel, kBlock, 1);
    const int64_t workers = std::min<int64_t>(ceil_div(rows, kBlock / kTPR), resident);
    return launch(kernel, dim3(workers), dim3(kBlock), 1, stream, what, op, rows, cols);
  }
};

// A row forward: the op's tile for the width, launches of few rows spread where the op's budget
// allows it (fwd_launch_tile, spread_small_launch: replicas, one pack a thread, clusters of 16).
template <class Op>
ffi::Error run_fwd(const Op& op, int64_t rows, int64_t cols, bool vec, cudaStream_t stream, const char* what) {
  const DeviceFacts& d = device_facts();
  const TileChoice c = fwd_launch_tile(cols, rows, kVecOf<typename Op::Type>, vec, d.clusters, d.sms, Op::kBudget);
  FwdRunner<Op> runner{op, rows, cols, stream, what};
  runner.replicas = c.replicas;
  return run_choice<Op>(c, runner);
}

// Backward over `groups` independent groups of rows; for ops with column sums (the norms'
// scale/bias gradients) each worker writes one partial row of the workspace (groups, ws_rows,
// 2, cols), then reduce_partials_kernel sums them in a fixed order.
template <class Op>
struct BwdRunner {
  Op op;
  int64_t rows_per_group, groups, cols;
  float* workspace;
  int64_t ws_rows;
  float* dscale;
  float* dbias;
  cudaStream_t stream;
  const char* what;

  // Workers of a tile launch with `resident` workers resident (0: none fit).
  template <int kTPR, int kBlock, int kPacks, int kCluster>
  int64_t tile_workers(int resident) const {
    const int64_t needed = ceil_div(rows_per_group, kBlock / kTPR);
    int64_t workers = std::min<int64_t>(needed, std::max<int64_t>(1, resident / groups));
    if constexpr (Op::kColumnSums > 0) {
      workers = std::min(workers, ws_rows);
    } else if constexpr (one_shot_bwd<Op, kBlock, kPacks, kCluster>()) {
      workers = needed;  // the kernel makes one pass: every row span needs its worker
    }
    return workers;
  }

  // The half-wide tile's shared memory is sized to the row (tile_choice.h, half_wide_smem), the
  // others' to the tile; so are the workers resident.
  template <int kTPR, int kBlock, int kPacks, int kCluster, bool kHeld, class K>
  std::pair<size_t, int> smem_and_resident(K kernel) const {
    constexpr size_t tile_smem = tile_bwd_smem<Op, kTPR, kBlock, kPacks, kCluster, kHeld>();
    if constexpr (half_wide_bwd<Op, kBlock, kPacks>()) {
      const size_t smem = half_wide_smem(cols, kVecOf<typename Op::Type>, Op::kColumnSums + (kHeld ? 1 : 0), Op::kBudget);
      return {smem, resident_workers(kernel, kBlock, kCluster, smem)};
    } else {
      static const int resident = resident_workers(kernel, kBlock, kCluster, tile_smem);
      return {tile_smem, resident};
    }
  }

  template <int kTPR, int kBlock, int kPacks, int kCluster>
  ffi::Error tile() {
    if constexpr (held_scale_bwd<Op, kTPR, kBlock, kPacks, kCluster>()) {
      // Held where a worker has several rows (row_tiles.cuh, held_scale_bwd).
      auto held = tile_bwd_kernel<Op, kTPR, kBlock, kPacks, kCluster, true>;
      const auto [smem, resident] = smem_and_resident<kTPR, kBlock, kPacks, kCluster, true>(held);
      const int64_t workers = resident > 0 ? tile_workers<kTPR, kBlock, kPacks, kCluster>(resident) : 0;
      if (workers > 0 && rows_per_group > workers) return launch_tile<kBlock, kCluster>(held, smem, workers);
    }
    auto kernel = tile_bwd_kernel<Op, kTPR, kBlock, kPacks, kCluster>;
    const auto [smem, resident] = smem_and_resident<kTPR, kBlock, kPacks, kCluster, false>(kernel);
    if (resident == 0) return loop<512, 512>();
    const int64_t workers = tile_workers<kTPR, kBlock, kPacks, kCluster>(resident);
    if (workers > kMaxGridX / kCluster)
      return ffi::Error::InvalidArgument(std::string("jaxnorm: ") + what + ": too many rows for one launch");
    return launch_tile<kBlock, kCluster>(kernel, smem, workers);
  }

  template <int kBlock, int kCluster, class K>
  ffi::Error launch_tile(K kernel, size_t smem, int64_t workers) {
    JN_RETURN_IF_ERROR(launch_with_smem(kernel, dim3(workers * kCluster, groups), dim3(kBlock), kCluster,
                                        smem, stream, what, op, rows_per_group, cols, workspace, ws_rows));
    return reduce_columns(workers);
  }

  template <int kTPR, int kBlock>
  ffi::Error loop() {
    auto kernel = loop_bwd_kernel<Op, kTPR, kBlock>;
    static const int resident = resident_workers(kernel, kBlock, 1);
    const int64_t rows = rows_per_group * groups;
    const int64_t workers = std::min<int64_t>(ceil_div(rows, kBlock / kTPR), resident);
    JN_RETURN_IF_ERROR(launch(kernel, dim3(workers), dim3(kBlock), 1, stream, what, op, rows, cols));
    if constexpr (Op::kColumnSums > 0) {
      // Enough (column block, row chunk) pairs to fill the device, within the workspace.
      const int64_t col_blocks = ceil_div(cols, 256);
      const int64_t want = ceil_div(4LL * device_facts().sms, col_blocks * groups);
      const int64_t chunks = std::max<int64_t>(1, std::min({ws_rows, rows_per_group, want}));
      JN_RETURN_IF_ERROR(launch(column_sums_kernel<Op>, dim3(col_blocks, chunks, groups), dim3(256), 1, stream,
                                what, op, rows_per_group, cols, workspace, ws_rows, chunks));
      return reduce_columns(chunks);
    }
    return ffi::Error::Success();
  }

  ffi::Error reduce_columns(int64_t workers) {
    if constexpr (Op::kColumnSums > 0) {
      return launch(reduce_partials_kernel, dim3(ceil_div(cols, 32), groups), dim3(32 * kPartialSlices), 1, stream,
                    what, static_cast<const float*>(workspace), ws_rows, workers, cols, Op::kColumnSums, dscale,
                    dbias);
    }
    return ffi::Error::Success();
  }
};

}  // namespace jaxnorm

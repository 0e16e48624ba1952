// Choosing a row kernel by row width (plain C++, so a host test can check that every choice is
// one of the instantiated tiles: tests/test_tile_choice.py).
#pragma once

#include <cstdint>
#include <initializer_list>

namespace jaxnorm {


// What an op's registers afford: packs per thread for CTA-wide and cluster tiles, threads per CTA
// for them (so enough CTAs fit per SM), a wider tile of max_block threads (0 = none), the
// smallest CTA for rows of more than 32 threads (a narrower row shares the CTA with others), the
// row span (threads, across a cluster) from which a worker's next rows are prefetched into L2,
// and whether rows wider than one CTA of block_packs take the wide tile in half as many CTAs
// (else it is the last resort, past clusters of 16). Forward cluster grids of up to
// one_shot_cluster CTAs a cluster launch a cluster a row span (one-shot) rather than a persistent
// grid (row_runners.cuh), and those clusters may have CTAs of cluster_block threads holding
// cluster_packs packs (0: the max_block, block_packs tile).
struct TileBudget {
  int block_packs;
  int max_block;
  int wide_packs;
  int min_block;
  int prefetch_threads;
  bool wide_first = false;
  int one_shot_cluster = 1;
  int cluster_block = 0;
  int cluster_packs = 0;
  bool spread_small = false;  // spread_small_launch may give a launch of few rows one pack a thread
  bool async_exchange = false;  // cluster tiles exchange by st.async (row_reduce.cuh)
  int staged_clusters = 0;  // forward cluster tiles of these sizes (a mask) run staged (staged_fwd.cuh)
  bool one_pack_rows = false;  // one_pack_rows may give CTA-wide rows twice the threads of one pack
  int warp_rows = 0;  // warp_rows may give rows of up to this many packs a warp of 2 x block_packs
  int bwd_256x2_ctas = 2;  // CTAs an SM of the backward's 256-thread tiles of 2 packs (row_tiles.cuh)
  bool wide_alone = false;  // rows of one wide tile (max_block x wide_packs) take it in one CTA
  bool cluster_cta_alone = false;  // rows of one cluster CTA's packs take that CTA, not max_block x block_packs
  int narrow_alone_min = 0, narrow_alone_max = 0;  // with it, rows of (min, max] packs take a narrower CTA alone
  bool half_wide = false;  // half_wide_rows may give the wide tile's rows max_block / 2 threads of twice the packs
};

// Forwards hold x: 4 packs (16 floats of float32, 32 of 16-bit types) at 512 threads. The L2
// prefetch paid from 512-thread rows on (bf16 LayerNorm 65536: 61 -> 75% of copy) and cost up to
// 11 points on softmax rows of one warp (results/NOTES.md v6); since v7 only the cluster tiles
// keep a persistent grid, so only they have a next row to prefetch (row_runners.cuh). Clusters of
// 2 and 4 run one-shot, as QuACK launches them, once a CTA no longer waits for its cluster before
// loading (row_reduce_init): bf16 softmax 32768-65536 6-10% faster (measured in this tile, before
// softmax moved to the held-row budget below); one-shot clusters of 8 and 16 lost 4-10%
// (results/h100-rows.md, v11). The residual-add and cross-entropy forwards, which hold floats,
// use this budget.
constexpr TileBudget kForwardBudget{4, 512, 8, 64, 512, false, 4};
// The norm and softmax forwards hold 32 registers of row a thread in 8-pack tiles (16-bit rows as
// loaded, softmax taking each exp twice; or 8 packs of float32 as floats), so their one-shot
// cluster tiles take QuACK's shape: 256-thread CTAs of 8 packs, three or four a SM (row_tiles.cuh,
// min_ctas_per_sm), up to clusters of 8. Against 512-thread CTAs of 4 packs: bf16 RMSNorm forward
// 32768-131072 2-12% and LayerNorm 4-7% faster; softmax and log-softmax 2-6%, float32 softmax 3-6%;
// persistent, the same tile lost 9-30% at 131072-262144 (results/h100-rows.md, v11). Clusters of 16
// take it one-shot too (262144 bf16 columns, 131072 float32): bf16 softmax, log-softmax and
// LayerNorm forwards 0.97-0.98, 0.94-0.95 and 0.93-0.96x the time of persistent 512-thread CTAs of
// 4 packs (two calls), float32 softmax 0.90x; but float32 LayerNorm 1.03x, so the float32 norms keep
// clusters of 16 persistent (kHeldRowPersistent16Budget; results/h100-rows.md, v14). Every norm
// cluster tile but 16-bit LayerNorm's now runs staged (staged_fwd.cuh), 16-bit RMSNorm's and the
// float32 norms' below clusters of 16 as 512 threads of 4 packs (with_cluster_tiles(.., 0, 0);
// results/h200-f32-staged, h200-f32-bwd).
constexpr TileBudget kHeldRowForwardBudget{4, 512, 8, 64, 512, false, 16, 256, 8};
constexpr TileBudget kHeldRowPersistent16Budget{4, 512, 8, 64, 512, false, 8, 256, 8};
// The norm backward holds x, dy and two column accumulators per element: 16 elements a thread
// and ~110 registers, one 512-thread CTA per SM (on H100 8K-column rows run at 84-88% of copy
// with 512-thread CTAs, 69-71% with two 256-thread CTAs in a cluster: results/NOTES.md). Each CTA
// writes one partial row of the scale/bias gradients and the workspace caps the CTAs, so rows of
// 64 or 128 threads share 256-thread CTAs: one 64-thread CTA a row left 1024-column rows with 512
// CTAs, 12% occupancy (results/h100.md). Reading two arrays at 25% occupancy, the 16-bit
// backward gained from the L2 prefetch at every width (bf16 LayerNorm fwd+bwd at 4096: 89 -> 94%
// of copy, at 256: 90 -> 98%); float32 tiles, with twice the bytes in flight per thread, lost
// 4-14 points with it below 512-thread rows (results/NOTES.md v6). On the H200 the 16-bit
// backward without it below 512-thread rows took bf16 RMSNorm fwd+bwd to 0.90-0.93x the speed at
// 1024-4096 columns, LayerNorm 0.92-0.98x at 256-4096 (results/h200-l2-prefetch, call 1).
// The wide norm backward tile (32 elements a thread; clusters of 16 hold 262144 columns) keeps the
// column partials in shared memory instead (row_tiles.cuh).
// 16-bit rows of 16K-131K columns take that wide tile too, in half as many CTAs per row (one CTA
// at 16384): bf16 norm forward+backward +0-12% against XLA in the same call, RMSNorm 16384
// 0.94 -> 1.00x, 131072 0.76 -> 0.84x (results/NOTES.md v8).
constexpr TileBudget norm_backward_budget(int elem_bytes) {
  return {elem_bytes == 4 ? 4 : 2, 512, elem_bytes == 4 ? 8 : 4, 256, elem_bytes == 4 ? 512 : 1,
          elem_bytes == 2};
}
// The softmax backward holds y and dy: 32 registers at 4 packs (16-bit as loaded, float32 as
// floats), so its 512-thread tiles fit twice a SM and run one-shot (row_tiles.cuh, one_shot_bwd).
constexpr TileBudget kSoftmaxBackwardBudget{4, 512, 8, 64, 512, false, 16};

// A budget whose rows of up to `packs` packs may take a warp each (warp_rows).
constexpr TileBudget with_warp_rows(TileBudget budget, int packs) {
  budget.warp_rows = packs;
  return budget;
}
constexpr TileBudget with_bwd_256x2_ctas(TileBudget budget, int ctas) {
  budget.bwd_256x2_ctas = ctas;
  return budget;
}

// Threads per CTA for a CTA-wide tile whose rows take `tpr` threads.
constexpr int cta_threads(int tpr, TileBudget budget) { return tpr < budget.min_block ? budget.min_block : tpr; }

struct TileChoice {
  int tpr = 0, block = 0, packs = 0, cluster = 0;  // a tile kernel, or
  int loop_tpr = 0;                                // a loop kernel when loop_tpr > 0
  int replicas = 1;  // CTAs a row, each reducing the whole row and storing 1/replicas of it
};
// A budget whose launches of few rows may be spread (spread_small_launch).
constexpr TileBudget with_small_spread(TileBudget budget) {
  budget.spread_small = true;
  return budget;
}
// A budget whose cluster tiles exchange a row's statistics by st.async (row_reduce.cuh says where).
constexpr TileBudget with_async_exchange(TileBudget budget, bool on = true) {
  budget.async_exchange = on;
  return budget;
}
// A budget whose forward cluster tiles of the sizes in `clusters` (a mask of powers of two) run
// staged (staged_fwd.cuh says where).
constexpr TileBudget with_staged_clusters(TileBudget budget, int clusters) {
  budget.staged_clusters = clusters;
  return budget;
}
// A budget whose cluster tiles are CTAs of `block` threads of `packs` packs (0: max_block threads of
// block_packs).
constexpr TileBudget with_cluster_tiles(TileBudget budget, int block, int packs) {
  budget.cluster_block = block;
  budget.cluster_packs = packs;
  return budget;
}
// A budget whose rows wider than one CTA of block_packs take the wide tile in half as many CTAs.
constexpr TileBudget with_wide_first(TileBudget budget, bool on) {
  budget.wide_first = on;
  return budget;
}
// A budget whose rows of one wide tile take it in one CTA, not a cluster of two, where wide_first
// would also widen every cluster tile: float32 RMSNorm at 16384 columns as QuACK runs it (one CTA
// a row: quack/rmsnorm.py's float32 rows take clusters only past 32768 columns), and the 16-bit
// norms at 32768 (norm_ops.cuh, norm_fwd_budget, says what each gained).
constexpr TileBudget with_wide_alone(TileBudget budget, bool on) {
  budget.wide_alone = on;
  return budget;
}
// A budget whose rows of (max_block / 2 x block_packs, cluster_block x cluster_packs] packs take
// one CTA of the cluster tiles' shape, not max_block threads of block_packs: the softmax forward's
// 256 x 8, four CTAs an SM where 512 x 4 ran two (softmax_ops.cuh says what it gained). Below 16
// rows an SM (fwd_launch_tile) the 512 x 4 tile stays, so that few rows still spread.
constexpr TileBudget with_cluster_cta_alone(TileBudget budget, bool on) {
  budget.cluster_cta_alone = on;
  return budget;
}
// With cluster_cta_alone, rows of (min_packs, max_packs] packs take one CTA of cluster_packs packs a
// thread and the fewest threads (64 or more) that hold the row: 128 x 8 where 256 x 4 ran, 64 x 8
// where 128 x 4 ran, at about the same registers a thread and about twice the CTAs an SM
// (row_tiles.cuh, min_ctas_per_sm): 7-8 rows in flight an SM at 4097-8192 16-bit columns, not 3;
// 14, not 8, at 2049-4096 (norm_ops.cuh and softmax_ops.cuh say what it gained).
constexpr TileBudget with_narrow_cta_alone(TileBudget budget, int min_packs, int max_packs) {
  budget.narrow_alone_min = min_packs;
  budget.narrow_alone_max = max_packs;
  return budget;
}
// The residual-add forward with x, r and h of one 16-bit dtype: kForwardBudget (h held as floats,
// 512 threads of 4 packs), but rows of 257-2048 packs (2049-16384 columns) in one CTA of 8 packs
// holding h as stored, as the plain 16-bit LayerNorm forward's narrow and cluster-CTA-alone tiles
// hold x (norm_ops.cuh, AddNormFwdOp, says what it gained). Its cluster tiles stay 512 x 4
// (cluster_block 0).
constexpr TileBudget kAddNormHeldForwardBudget =
    with_narrow_cta_alone(with_cluster_cta_alone(with_cluster_tiles(kForwardBudget, 0, 8), true), 256, 2048);
// A budget whose CTA-wide rows may take one pack a thread (one_pack_rows).
constexpr TileBudget with_one_pack_rows(TileBudget budget, bool on) {
  budget.one_pack_rows = on;
  return budget;
}
// Few rows (at most 128 threads a row and one 128-thread CTA of them an SM, `sms` the device's)
// get one pack a thread and packs-times as many threads a row: there a row's time is its warps'
// chain of dependent instructions (one round of loads, then the packs' arithmetic one after
// another), not the bytes in flight, which choose_tile's budget is sized for. Measured on an H100
// (results/h100-rows.md, v17): bf16 norms 0.73-0.90x the time at 1-512 rows x 128-256 and 1-64
// rows x 768; past these bounds spreading lost (512 x 768 1.02-1.04x; 512 threads a row at 4096
// columns: LayerNorm 1.01-1.04x at 1-64 rows, both norms 1.34-1.54x at 512).
constexpr int kSpreadMaxTpr = 128;
// Rows of more packs than kSpreadMaxTpr threads under 256 (4096 bf16 or 2048 float32 columns:
// 128 threads of 4 packs) spread to kSpreadWideTpr threads of 2 packs, not one (512 threads of
// one pack lost, v17): 0.966-0.987x the time at 1-64 rows x 4096 bf16 (v18).
constexpr int kSpreadWideTpr = 256;
// Few rows wider than 128 threads' packs. XLA's normalization fusions (Triton, an output tile of
// [1, 256] a CTA) spread each row over many CTAs that each reduce the whole row and write 256
// columns: an SM reads the row, but only its slice's parameters, and writes only its slice. With
// one CTA a row, one SM read and wrote it all, and jaxnorm trailed XLA by 0.4-2.8 us at 8 rows x
// 2048-16384 bf16. Rows of kReplicatedPacks-pack CTA tiles (whole CTAs a row) now take 4 CTAs a
// row (else 2) while the rows' CTAs fit the SMs once; replica j stores packs p % replicas == j
// (FwdRunner, tile_fwd_kernel). Rows of cluster tiles whose 16-CTA spread is kSpreadClusterTpr
// threads of one pack (16K-32K 16-bit columns, 8K-16K float32) take clusters of 16 while rows x 16
// fit the SMs. Measured on an H100 against the previous choice (results/h100-rows.md, v20):
// replicas 0.70-1.00x the time at 1-64 rows x 2048-16384 (bf16, float32); clusters of 16
// 0.53-0.64x at 1-8 rows x 32768 bf16, 0.57-0.75x x 16384 float32. Rows split over clusters of
// 2-8 CTAs of 64-128 threads (the sums exchanged, not replicated) lost 8-42% at 1024-4096 columns.
constexpr int kReplicatedPacks = 4;
constexpr int kSpreadClusterTpr = 256;
constexpr bool replicas_fit(int tpr, int block, int packs, int cluster) {
  return cluster == 1 && tpr == block && packs == kReplicatedPacks;
}
inline TileChoice spread_small_launch(TileChoice c, int64_t rows, int sms, TileBudget budget, bool clusters) {
  if (!budget.spread_small || c.loop_tpr > 0 || rows <= 0) return c;
  if (c.cluster > 1) {
    if (clusters && int64_t{c.tpr} * c.packs * c.cluster == int64_t{kSpreadClusterTpr} * 16 && rows * 16 <= sms)
      c.tpr = c.block = kSpreadClusterTpr, c.packs = 1, c.cluster = 16;
    return c;
  }
  if (replicas_fit(c.tpr, c.block, c.packs, c.cluster)) {
    for (int r : {4, 2}) {
      if (rows * r <= sms) {
        c.replicas = r;
        return c;
      }
    }
  }
  if (c.cluster != 1 || c.packs == 1) return c;
  int tpr = c.tpr * c.packs, packs = 1;
  if (tpr > kSpreadMaxTpr && c.tpr < kSpreadWideTpr) {
    packs = tpr / kSpreadWideTpr;
    tpr = kSpreadWideTpr;
  }
  if (tpr > kSpreadWideTpr || (packs == 1 && tpr > kSpreadMaxTpr) || rows * tpr > int64_t{sms} * kSpreadMaxTpr)
    return c;
  c.tpr = tpr, c.block = tpr <= 32 ? 128 : tpr, c.packs = packs;
  return c;
}

// CTA-wide rows of 64-256 threads of 2 packs (520-4096 16-bit columns) as twice the threads of
// one pack, 256-512 threads a CTA and 1024 threads an SM at 64 registers (row_tiles.cuh,
// bwd_min_ctas_per_sm). The residual-add RMSNorm backward with h's cotangent holds three rows
// (h, dy, the cotangent) in 104-111 registers at two packs, one 512-thread worker's worth an SM
// (bwd_min_ctas_per_sm: 2 CTAs of 256 or 1 of 512): its kernel took 0.88-0.91x the time at
// 1024-4096 bf16 and fp16 columns (H200, same-call A/B, results/h200-one-pack-addnorm). Not taken
// where it did not gain: the plain norm backward (0.99-1.06x), LayerNorm's (0.98-1.01x), a float32
// h (its rows are held as floats), no cotangent (then it holds the plain backward's two rows).
inline TileChoice one_pack_rows(TileChoice c, TileBudget budget) {
  if (!budget.one_pack_rows || c.loop_tpr > 0 || c.cluster != 1 || c.packs != 2 || c.tpr < 64 ||
      c.tpr * 2 > budget.max_block)
    return c;
  c.tpr *= 2, c.packs = 1, c.block = cta_threads(c.tpr, budget);
  return c;
}

// A budget whose one-CTA wide rows may take half the threads of twice the packs (half_wide_rows).
constexpr TileBudget with_half_wide(TileBudget budget, bool on) {
  budget.half_wide = on;
  return budget;
}
// The 16-bit norm backward's one-CTA wide tile (512 x 4, 8193-16384 columns) holds one row a CTA
// and one CTA an SM (94 registers; its column partials and held scale in shared memory sized to
// the tile): a 9000-column row is 36 KB of x and dy in flight an SM, and the backward took 1.15x
// its time at 16384 for the same bytes, DRAM 67% against 77% at the same issue rate (H200, Nsight
// Compute, results/h200-ln-staged). Rows that fill at most 5/8 of it take 256 threads of 8 packs,
// two CTAs an SM (their partials and scale, `floats_a_column` floats a column, in shared memory
// sized to the row): two rows in flight at the same warps. bf16 / fp16 RMSNorm fwd+bwd (H200, one
// build, results/h200-half-wide): 1.08x at 9000 columns, 1.04 / 1.00x at 10240, but 0.95x at
// 12288 (3/4 full: a thread's chain of 8 packs costs more than the second row gives); by rows a
// launch at 9000 (bf16): 0.89x at 64, 0.87x at 264 (two an SM), 0.98x at 1056 (8), 1.06x at 4096
// (31), 1.08x at 14913. Hence the bound and 16 rows an SM (kHalfWideRowsPerSm, between the last
// loss and the first gain).
constexpr int64_t kHalfWideSmemPerSm = 227 * 1024 - 2 * 4096;  // less each CTA's static shared memory
constexpr int64_t kHalfWideRowsPerSm = 16;
inline int64_t half_wide_smem(int64_t cols, int vec, int floats_a_column, TileBudget budget) {
  const int64_t w = int64_t{budget.max_block / 2} * vec;  // columns a pack of the CTA covers
  return (cols + w - 1) / w * w * floats_a_column * 4;
}
inline TileChoice half_wide_rows(TileChoice c, int64_t cols, int vec, int64_t rows, int sms, int floats_a_column,
                                 TileBudget budget) {
  const int64_t tile_cols = int64_t{budget.max_block} * budget.wide_packs * vec;
  if (!budget.half_wide || c.loop_tpr > 0 || c.cluster != 1 || c.tpr != budget.max_block ||
      c.packs != budget.wide_packs || 8 * cols > 5 * tile_cols || rows < kHalfWideRowsPerSm * sms ||
      2 * half_wide_smem(cols, vec, floats_a_column, budget) > kHalfWideSmemPerSm)
    return c;
  c.tpr = c.block = budget.max_block / 2, c.packs = 2 * budget.wide_packs;
  return c;
}

// Rows of 64 threads of block_packs packs in launches of many rows as one warp of twice the packs,
// four rows a 128-thread CTA: a row reduces by shuffles alone (no CTA barrier), and the SM holds
// twice the rows at the same warps. 16-bit RMSNorm backward, against 64 threads of 2 packs (H200,
// two builds in one call, results/h200-warp-rows): the kernel took 0.87x the time at 520-640
// columns, 0.91x at 768, 0.96x at 896, but 1.04-1.07x at 1024 (hence budget.warp_rows = 112
// packs) and 1.11-1.12x in launches of 2048-4096 rows (16384 x 768: 0.98x; hence 64 rows an SM).
// The tile now stages its rows and keeps its partials in registers (row_tiles.cuh,
// warp_staged_bwd); at 1024 columns it still lost (0.95x, results/h200-wide16).
constexpr int64_t kWarpRowsPerSm = 64;
inline TileChoice warp_rows(TileChoice c, int64_t cols, int vec, int64_t rows, int sms, TileBudget budget) {
  if (budget.warp_rows == 0 || c.loop_tpr > 0 || c.cluster != 1 || c.tpr != 64 || c.packs != budget.block_packs ||
      cols / vec > budget.warp_rows || rows < kWarpRowsPerSm * sms)
    return c;
  c.tpr = 32, c.block = 128, c.packs = 2 * budget.block_packs;
  return c;
}

inline TileChoice choose_tile(int64_t cols, int vec, bool vectorizable, bool clusters, TileBudget budget) {
  const int block_packs = budget.block_packs, max_block = budget.max_block, wide_packs = budget.wide_packs;
  TileChoice c;
  const int64_t packs = vectorizable ? cols / vec : 0;
  if (vectorizable && packs >= 1) {
    // Rows this short are latency bound: the bytes each thread has in flight per row set the
    // speed, so every thread gets the op's full pack budget and the row the fewest lanes (or
    // the smallest CTA) that hold it.
    int p = 1;  // packs per thread: the budget, or the power of two that holds a shorter row
    while (p < block_packs && p < packs) p *= 2;
    if (packs <= 32LL * p) {
      int tpr = 1;
      while (static_cast<int64_t>(tpr) * p < packs) tpr *= 2;
      c.tpr = tpr, c.block = 128, c.packs = p, c.cluster = 1;
      return c;
    }
    if (budget.cluster_cta_alone && packs > budget.narrow_alone_min && packs <= budget.narrow_alone_max) {
      int b = 64;
      while (static_cast<int64_t>(b) * budget.cluster_packs < packs) b *= 2;
      c.tpr = c.block = b, c.packs = budget.cluster_packs, c.cluster = 1;
      return c;
    }
    if (budget.cluster_cta_alone && packs > static_cast<int64_t>(max_block / 2) * block_packs &&
        packs <= static_cast<int64_t>(budget.cluster_block) * budget.cluster_packs) {
      c.tpr = c.block = budget.cluster_block, c.packs = budget.cluster_packs, c.cluster = 1;
      return c;
    }
    for (int b = 64; b <= max_block; b *= 2) {
      if (packs <= static_cast<int64_t>(b) * block_packs) {
        c.tpr = b, c.block = cta_threads(b, budget), c.packs = block_packs, c.cluster = 1;
        return c;
      }
    }
    if ((budget.wide_first || budget.wide_alone) && packs <= static_cast<int64_t>(max_block) * wide_packs) {
      c.tpr = max_block, c.block = max_block, c.packs = wide_packs, c.cluster = 1;
      return c;
    }
    if (clusters && budget.cluster_block > 0) {
      for (int k : {2, 4, 8, 16}) {
        if (k <= budget.one_shot_cluster && packs <= static_cast<int64_t>(budget.cluster_block) * budget.cluster_packs * k) {
          c.tpr = budget.cluster_block, c.block = budget.cluster_block, c.packs = budget.cluster_packs, c.cluster = k;
          return c;
        }
      }
    }
    if (clusters) {
      for (int k : {2, 4, 8, 16}) {
        if (budget.wide_first && packs <= static_cast<int64_t>(max_block) * wide_packs * k) {
          c.tpr = max_block, c.block = max_block, c.packs = wide_packs, c.cluster = k;
          return c;
        }
        if (packs <= static_cast<int64_t>(max_block) * block_packs * k) {
          c.tpr = max_block, c.block = max_block, c.packs = block_packs, c.cluster = k;
          return c;
        }
      }
      if (wide_packs > block_packs && packs <= static_cast<int64_t>(max_block) * wide_packs * 16) {
        c.tpr = max_block, c.block = max_block, c.packs = wide_packs, c.cluster = 16;
        return c;
      }
    }
  }
  c.loop_tpr = cols <= 2048 ? 32 : 512;
  return c;
}

// A forward launch's tile: the width's, spread where the rows are few. wide_alone's one CTA a row
// (two an SM) pays a tail wave the cluster of 2 it replaces halves; below 16 rows an SM that
// cluster runs, and wide_first's tiles give way to the narrower ones alike (not measured there).
// Float32 RMSNorm x 16384, one CTA a row against the cluster (H200, results/h200-bias-alone):
// 0.86x the speed at 64 rows, 1.04x at 264, 0.91x at 512, 0.98x at 1024, 1.05-1.06x at 8192. The
// cut at 16 (2112 rows) was not measured itself.
constexpr int kWideTileRowsPerSm = 16;
inline TileChoice fwd_launch_tile(int64_t cols, int64_t rows, int vec, bool vectorizable, bool clusters, int sms,
                                  TileBudget budget) {
  if (rows < int64_t{kWideTileRowsPerSm} * sms)
    budget.wide_alone = budget.wide_first = budget.cluster_cta_alone = false;
  return spread_small_launch(choose_tile(cols, vec, vectorizable, clusters, budget), rows, sms, budget, clusters);
}

// Whether choose_tile can return this tile for an op (so only those are compiled).
template <int kTPR, int kBlock, int kPacks, int kCluster>
constexpr bool tile_possible(TileBudget budget) {
  const int block_packs = budget.block_packs, max_block = budget.max_block, wide_packs = budget.wide_packs;
  if (kTPR <= 32 && kBlock == 128 && kCluster == 1)
    return kPacks <= block_packs || (kTPR == 32 && kPacks == 2 * block_packs && budget.warp_rows > 0);
  if (kTPR <= 32 || kBlock > max_block) return false;
  if (budget.one_pack_rows && kCluster == 1 && kPacks == 1 && kTPR >= 128 && kBlock == cta_threads(kTPR, budget))
    return true;
  if (kCluster == 1 && kPacks == 1 && kBlock == kTPR) return budget.spread_small && kTPR <= kSpreadMaxTpr;
  if (kCluster == 1 && kPacks == 2 && kBlock == kTPR && kTPR == kSpreadWideTpr && budget.spread_small) return true;
  if (kCluster == 16 && kPacks == 1 && kBlock == kTPR && kTPR == kSpreadClusterTpr) return budget.spread_small;
  const bool wide = wide_packs > block_packs && kPacks == wide_packs && kTPR == max_block && kBlock == max_block;
  if (kCluster == 1 && budget.cluster_cta_alone && kBlock == kTPR && kPacks == budget.cluster_packs &&
      (kTPR == budget.cluster_block ||
       (kTPR >= 64 && kTPR * budget.cluster_packs > budget.narrow_alone_min &&
        kTPR * budget.cluster_packs / 2 < budget.narrow_alone_max)))
    return true;
  if (budget.half_wide && kCluster == 1 && kTPR == max_block / 2 && kBlock == kTPR && kPacks == 2 * wide_packs)
    return true;
  if (kCluster == 1)
    return (kPacks == block_packs && kBlock == cta_threads(kTPR, budget)) || (wide && (budget.wide_first || budget.wide_alone));
  if (budget.cluster_block > 0 && kTPR == budget.cluster_block && kBlock == kTPR && kPacks == budget.cluster_packs &&
      kCluster <= budget.one_shot_cluster)
    return true;
  if (kTPR != kBlock || kBlock != max_block) return false;
  return kPacks == block_packs || (wide && (kCluster == 16 || budget.wide_first));
}

// Every tile choose_tile may return, as X(tpr, block, packs, cluster).
#define JN_FOR_EACH_TILE(X)                                                                            \
  X(1, 128, 1, 1) X(2, 128, 1, 1) X(4, 128, 1, 1) X(8, 128, 1, 1) X(16, 128, 1, 1) X(32, 128, 1, 1)  \
  X(1, 128, 2, 1) X(2, 128, 2, 1) X(4, 128, 2, 1) X(8, 128, 2, 1) X(16, 128, 2, 1) X(32, 128, 2, 1)  \
  X(1, 128, 4, 1) X(2, 128, 4, 1) X(4, 128, 4, 1) X(8, 128, 4, 1) X(16, 128, 4, 1) X(32, 128, 4, 1)  \
  X(64, 64, 1, 1) X(128, 128, 1, 1)                                                                    \
  X(64, 64, 2, 1) X(128, 128, 2, 1) X(256, 256, 2, 1) X(512, 512, 2, 1)                                \
  X(64, 64, 4, 1) X(128, 128, 4, 1) X(256, 256, 4, 1) X(512, 512, 4, 1)                                \
  X(64, 256, 2, 1) X(128, 256, 2, 1) X(64, 256, 4, 1) X(128, 256, 4, 1)                                \
  X(256, 256, 2, 2) X(256, 256, 2, 4) X(256, 256, 2, 8) X(256, 256, 2, 16)                             \
  X(256, 256, 4, 2) X(256, 256, 4, 4) X(256, 256, 4, 8) X(256, 256, 4, 16)                             \
  X(256, 256, 8, 2) X(256, 256, 8, 4) X(256, 256, 8, 8) X(256, 256, 8, 16)                             \
  X(512, 512, 2, 2) X(512, 512, 2, 4) X(512, 512, 2, 8) X(512, 512, 2, 16)                             \
  X(512, 512, 4, 2) X(512, 512, 4, 4) X(512, 512, 4, 8) X(512, 512, 4, 16)                             \
  X(512, 512, 8, 16) X(256, 256, 1, 16) X(128, 256, 1, 1) X(256, 256, 1, 1) X(512, 512, 1, 1)        \
  X(512, 512, 8, 1) X(512, 512, 8, 2) X(512, 512, 8, 4) X(512, 512, 8, 8) X(256, 256, 8, 1) X(128, 128, 8, 1) \
  X(64, 64, 8, 1)

}  // namespace jaxnorm

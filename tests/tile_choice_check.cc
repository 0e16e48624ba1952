// Host check of the CUDA dispatch table: for every op budget, element size and row width, the
// tile choose_tile returns (and fwd_launch_tile's, for a few row counts, one_pack_rows's, warp_rows's
// and half_wide_rows's)
// is instantiated (listed in JN_FOR_EACH_TILE and allowed by tile_possible for that budget) and
// holds the whole row. Built and run by test_host_programs.py.
#include <cstdio>

#include "cuda/tile_choice.h"

using namespace jaxnorm;

struct Listed {
  int tpr, block, packs, cluster;
  bool (*possible)(TileBudget);
};

template <int a, int b, int p, int k>
bool possible(TileBudget budget) {
  return tile_possible<a, b, p, k>(budget);
}

#define JN_LIST(a, b, p, k) {a, b, p, k, &possible<a, b, p, k>},
static const Listed kListed[] = {JN_FOR_EACH_TILE(JN_LIST)};

int main() {
  const struct {
    const char* name;
    TileBudget budget;
    int elem_bytes;
  } ops[] = {{"forward f32", kForwardBudget, 4},
             {"forward 16-bit", kForwardBudget, 2},
             {"held-row forward f32", kHeldRowForwardBudget, 4},
             {"held-row forward 16-bit", kHeldRowForwardBudget, 2},
             {"held-row forward, persistent 16, f32", kHeldRowPersistent16Budget, 4},
             {"held-row forward, persistent 16, 16-bit", kHeldRowPersistent16Budget, 2},
             {"norm backward f32", norm_backward_budget(4), 4},
             {"norm backward 16-bit", norm_backward_budget(2), 2},
             {"softmax backward f32", kSoftmaxBackwardBudget, 4},
             {"softmax backward 16-bit", kSoftmaxBackwardBudget, 2},
             {"norm forward 16-bit", with_small_spread(kHeldRowForwardBudget), 2},
             {"norm forward f32", with_small_spread(kHeldRowPersistent16Budget), 4},
             // NormFwdOp's own budgets (norm_ops.cuh): the float32 norms' and 16-bit RMSNorm's
             // cluster tiles as 512 threads of 4 packs; rows of one 512x8 tile in one CTA.
             {"norm forward f32, 512x4 clusters", with_small_spread(with_cluster_tiles(kHeldRowPersistent16Budget, 0, 0)), 4},
             {"RMSNorm forward f32, wide alone",
              with_small_spread(with_wide_alone(with_cluster_tiles(kHeldRowPersistent16Budget, 0, 0), true)), 4},
             {"norm forward f32, wide first",
              with_small_spread(with_wide_first(with_cluster_tiles(kHeldRowPersistent16Budget, 0, 0), true)), 4},
             {"RMSNorm forward 16-bit, 512x4 clusters, wide alone",
              with_small_spread(with_wide_alone(with_cluster_tiles(kHeldRowForwardBudget, 0, 0), true)), 2},
             {"LayerNorm forward 16-bit, wide alone, cluster CTA alone, narrow CTA alone",
              with_narrow_cta_alone(with_cluster_cta_alone(with_small_spread(with_wide_alone(kHeldRowForwardBudget, true)), true),
                                    256, 1024),
              2},
             {"softmax forward f32", with_cluster_cta_alone(with_small_spread(kHeldRowForwardBudget), true), 4},
             {"softmax forward 16-bit",
              with_narrow_cta_alone(with_cluster_cta_alone(with_small_spread(kHeldRowForwardBudget), true), 512, 768), 2},
             {"residual-add forward 16-bit, h held", kAddNormHeldForwardBudget, 2},
             {"residual-add norm backward 16-bit", with_one_pack_rows(norm_backward_budget(2), true), 2},
             {"norm backward 16-bit, warp rows", with_warp_rows(norm_backward_budget(2), 112), 2},
             {"norm backward 16-bit, half-wide rows", with_half_wide(norm_backward_budget(2), true), 2}};
  long passed = 0, failed = 0;
  for (const auto& op : ops) {
    const int vec = 16 / op.elem_bytes;
    for (int clusters = 0; clusters < 2; ++clusters) {
      for (long cols = 1; cols <= (1L << 20); cols += (cols < 4096 ? 1 : 7)) {
        const bool vectorizable = cols % vec == 0;
        // The choice, and for budgets that spread small launches its spread at a few row counts
        // (an H100's 132 SMs).
        for (long rows : {0L, 1L, 8L, 64L, 512L, 4096L}) {
          if (rows > 0 && !op.budget.spread_small) break;
          const TileChoice c0 = choose_tile(cols, vec, vectorizable, clusters, op.budget);
          // And one_pack_rows of it, for budgets that take one pack a thread.
          // And warp_rows of it at 1 and 2^20 rows, for budgets that may take a warp a row.
          for (int one_pack = 0; one_pack < (op.budget.one_pack_rows ? 2 : 1); ++one_pack)
          for (long warp_rows_of : {0L, 1L, 1L << 20}) {
            if (warp_rows_of > 0 && op.budget.warp_rows == 0) break;
            const TileChoice c1 = rows > 0 ? fwd_launch_tile(cols, rows, vec, vectorizable, clusters, 132, op.budget) : c0;
            const TileChoice c2 = one_pack ? one_pack_rows(c1, op.budget) : c1;
            const TileChoice c3 = warp_rows_of > 0 ? warp_rows(c2, cols, vec, warp_rows_of, 132, op.budget) : c2;
            // And half_wide_rows of it (at 2^20 rows for budgets without warp rows), for the norm
            // backward's one or two column sums (and the scale).
            const TileChoice c = half_wide_rows(c3, cols, vec, warp_rows_of > 0 ? warp_rows_of : (1L << 20), 132,
                                                2 + (cols % 2), op.budget);
            bool ok;
            if (c.loop_tpr > 0) {
              ok = c.loop_tpr == 32 || c.loop_tpr == 512;
            } else {
              ok = false;
              for (const Listed& t : kListed) {
                if (t.tpr == c.tpr && t.block == c.block && t.packs == c.packs && t.cluster == c.cluster &&
                    t.possible(op.budget)) {
                  ok = true;
                }
              }
              const long capacity = static_cast<long>(c.tpr) * c.cluster * c.packs * vec;
              ok = ok && capacity >= cols && (clusters || c.cluster == 1);
              // Replicated rows: only the tiles FwdRunner launches so, each CTA on its own SM.
              if (c.replicas > 1)
                ok = ok && replicas_fit(c.tpr, c.block, c.packs, c.cluster) && c.packs % c.replicas == 0 &&
                     rows * c.replicas <= 132;
            }
            if (ok) {
              ++passed;
            } else if (++failed <= 20) {
              std::printf("FAIL %s cols=%ld clusters=%d rows=%ld one_pack=%d warp_rows_of=%ld -> tile (%d, %d, %d, %d) loop %d\n",
                          op.name, cols, clusters, rows, one_pack, warp_rows_of, c.tpr, c.block, c.packs, c.cluster,
                          c.loop_tpr);
            }
          }
        }
      }
    }
  }
  std::printf("%ld passed, %ld failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

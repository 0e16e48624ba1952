// All-reduce of a row's statistics across the threads that hold the row: lanes of a thread group
// (xor butterfly), warps of a CTA (shared memory), CTAs of a thread-block cluster (distributed
// shared memory). Every thread of the row ends with the bitwise-identical value: the butterfly
// merges are symmetric (common/stats.h) and the shared-memory steps merge in a fixed order.
#pragma once

#include <cooperative_groups.h>

#include <type_traits>

#include "cuda/device_facts.h"
#include "cuda/smem_addr.cuh"

namespace jaxnorm {

namespace cg = cooperative_groups;

template <class S>
__device__ __forceinline__ S shfl_xor_struct(S v, int mask, int width) {
  static_assert(sizeof(S) % 4 == 0, "statistics must be made of 32-bit words");
  constexpr int kWords = sizeof(S) / 4;
  union {
    S s;
    float f[kWords];
  } u;
  u.s = v;
#pragma unroll
  for (int i = 0; i < kWords; ++i) u.f[i] = __shfl_xor_sync(0xffffffffu, u.f[i], mask, width);
  return u.s;
}

// A merge functor may all-reduce a group of lanes its own way (a static kGroupAllReduce and a
// member group<kWidth>(v)), e.g. in two cheap butterflies where merging pairs at every level
// costs more.
template <class M, class = void>
struct merge_has_group : std::false_type {};
template <class M>
struct merge_has_group<M, std::void_t<decltype(M::kGroupAllReduce)>> : std::bool_constant<M::kGroupAllReduce> {};

// The max (fmaxf: NaN skipped) and the sum over aligned groups of kWidth lanes, by butterflies:
// the pieces of merges that all-reduce (max, sum) statistics by rescaling each lane's sum once.
template <int kWidth>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int mask = kWidth / 2; mask > 0; mask /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, mask, kWidth));
  return v;
}
template <int kWidth>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int mask = kWidth / 2; mask > 0; mask /= 2) v += __shfl_xor_sync(0xffffffffu, v, mask, kWidth);
  return v;
}

// All-reduce over aligned groups of kWidth lanes (a power of two <= 32): a butterfly of merges.
template <int kWidth, class S, class Merge>
__device__ __forceinline__ S group_allreduce(S v, Merge merge) {
  if constexpr (merge_has_group<Merge>::value) {
    return merge.template group<kWidth>(v);
  } else {
#pragma unroll
    for (int mask = kWidth / 2; mask > 0; mask /= 2) v = merge(v, shfl_xor_struct(v, mask, kWidth));
    return v;
  }
}

// A cluster's CTAs exchange each row's statistics by pushing them into every peer's shared
// memory and arriving on the peer's mbarrier, so a CTA waits only until every peer's value has
// landed, not for every thread of the cluster at a barrier. Two ways to push (kAsyncPush):
// - fenced: a store, then an arrive with release at cluster scope, waited on with acquire at
//   cluster scope. These compile to a MEMBAR.ALL.GPU before every row's push and a CCTL.IVALL (the
//   SM's L1 emptied) after every wait.
// - st.async: the value's bytes are counted on the peer's mbarrier as they land (QuACK's way),
//   waited on at CTA scope: neither fence. 16-bit LayerNorm and softmax forwards take it (their
//   budgets' async_exchange): LayerNorm +2-3% at 32768-131072 bf16 columns in every call (262144
//   0.99-1.06x by machine), softmax +0-2%, few rows +3-9%. RMSNorm's forward lost 4% with it at
//   32768 in every call, and the float32 LayerNorm's 4% at 131072, with the same instructions
//   and DRAM bytes (Nsight Compute: lower DRAM throughput and occupancy, not explained), so they
//   and the kernels not measured with it keep the fenced push (results/h100-rows.md, v27).
//   The norm backward's cluster tiles take it in every dtype: in a persistent grid each row's
//   fenced push also waited for the previous row's dx stores. Forward+backward +4-11% at
//   32768-131072 bf16 columns, float32 +5-10% at 65536-262144, bf16 262144 0.99-1.00x (H200,
//   same-call A/B; results/h200-exchange-a56879a). The sampler mass_rows exchanges this way too.

// Scratch a CTA needs for row_allreduce; one instance in static shared memory per kernel. Two
// copies, used by alternate rows, so one barrier per row suffices: a copy is rewritten (by a
// thread of this CTA, or by a cluster peer's push) only two rows later. Every thread of the CTA
// reads a copy before it reaches the next row's CTA barrier, which comes before this CTA's push
// of the next row, and a peer reaches the row after that only once it has received that push.
template <class S, int kWarps, bool kAsyncPush = false>
struct RowReduceSmem {
  static constexpr bool kAsync = kAsyncPush;
  unsigned long long arrived[2];  // mbarriers: the cluster's pushes of the row with that parity
  S warp[2][kWarps > 0 ? kWarps : 1];
  S cta[2][kMaxCluster];  // cta[parity][r]: the value of cluster CTA r
};

// Before the first row_allreduce of a cluster kernel: the mbarriers expect one arrival from each
// CTA of the cluster (st.async: this CTA's expect_tx alone) and must be initialized before any
// peer arrives on them. The cluster barrier that orders the two is split: every thread arrives
// here and waits at its first row's exchange (row_allreduce), so the first row's loads are in
// flight meanwhile instead of behind a barrier.
// `ctas`: the cluster's size when the kernel learns it at run time (cluster_allreduce).
template <class Smem>
__device__ __forceinline__ void cluster_reduce_init(Smem& smem, unsigned ctas) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int b = 0; b < 2; ++b)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(&smem.arrived[b])),
                   "r"(Smem::kAsync ? 1u : ctas));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

template <int kCluster, class Smem>
__device__ __forceinline__ void row_reduce_init(Smem& smem) {
  if constexpr (kCluster > 1) cluster_reduce_init(smem, kCluster);
}

// Arrive, with release at cluster scope (the value pushed before it is visible to whoever
// observes the arrival), on the mbarrier at `local` in the shared memory of cluster CTA `rank`.
__device__ __forceinline__ void arrive_remote(unsigned long long* local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(local)), "r"(rank));
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}

// Wait for the phase with this parity of a local mbarrier: with acquire at cluster scope after
// fenced pushes; at CTA scope after st.async ones, whose bytes are visible once the phase completes.
template <bool kAsync>
__device__ __forceinline__ void wait_phase(unsigned long long* bar, unsigned phase) {
  if constexpr (kAsync) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(smem_addr(bar)),
        "r"(phase)
        : "memory");
  } else {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(smem_addr(bar)),
        "r"(phase)
        : "memory");
  }
}

// The addresses in cluster CTA `rank`'s shared memory of a local slot and a local mbarrier.
__device__ __forceinline__ void map_to_rank(const void* slot, const void* bar, unsigned rank, unsigned& remote_slot,
                                            unsigned& remote_bar) {
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_slot) : "r"(smem_addr(slot)), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_bar) : "r"(smem_addr(bar)), "r"(rank));
}

// Push v into slot `slot` of CTA `rank`'s shared memory by st.async, its bytes counted on that
// CTA's mbarrier `bar` (both local addresses).
template <class S>
__device__ __forceinline__ void push_async(const S& v, const S* slot, unsigned long long* bar, unsigned rank) {
  static_assert(sizeof(S) % 4 == 0, "statistics of 32-bit words");
  unsigned remote_slot, remote_bar;
  map_to_rank(slot, bar, rank, remote_slot, remote_bar);
  const unsigned* w = reinterpret_cast<const unsigned*>(&v);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(S) / 4); ++i)
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote_slot + 4 * i),
                 "r"(w[i]), "r"(remote_bar)
                 : "memory");
}

// Two words into the same place by one 8-byte st.async (slot 8-byte aligned), as push_async.
__device__ __forceinline__ void push_async2(uint32_t w0, uint32_t w1, const void* slot, unsigned long long* bar,
                                            unsigned rank) {
  unsigned remote_slot, remote_bar;
  map_to_rank(slot, bar, rank, remote_slot, remote_bar);
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];" ::"r"(remote_slot),
               "r"(w0), "r"(w1), "r"(remote_bar)
               : "memory");
}

// The cluster step of row_allreduce: the same across the cluster's `ctas` CTAs, through
// distributed shared memory. Each CTA pushes its value into every CTA's slot before the wait, so
// the reads after it are local: the remote latency overlaps the wait instead of following it
// (bf16 forward at 262144 columns: 0.90 -> 1.25x XLA, results/NOTES.md v6). Waiting on the
// mbarrier for the peers' values instead of a cluster barrier: forward+backward +1-7% at
// 32K-131K (v8). Every thread of the CTA calls it after the CTA barrier of its row's reduction.
// st.async needs a launch with clusters: launch_with_smem launches a cluster of one CTA without
// them, so kernels that may be launched so (cluster_allreduce's) keep the fenced push.
template <class S, int kWarps, bool kAsync>
__device__ __forceinline__ void push_and_wait(const S& v, RowReduceSmem<S, kWarps, kAsync>& smem, int iter,
                                              unsigned ctas) {
  const int parity = iter & 1;
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  if (iter == 0) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // the init's arrive
  if constexpr (kAsync) {
    if (threadIdx.x == 0)
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&smem.arrived[parity])),
                   "r"(static_cast<unsigned>(ctas * sizeof(S)))
                   : "memory");
    if (threadIdx.x < ctas) push_async(v, &smem.cta[parity][rank], &smem.arrived[parity], threadIdx.x);
  } else if (threadIdx.x < ctas) {
    *cluster.map_shared_rank(&smem.cta[parity][rank], threadIdx.x) = v;
    arrive_remote(&smem.arrived[parity], threadIdx.x);
  }
  wait_phase<kAsync>(&smem.arrived[parity], (iter >> 1) & 1);
}

// The cluster step for a cluster whose size `ctas` (<= kMaxCluster) the kernel learns at run time:
// v of every CTA, merged in the same order in each (a butterfly over kMaxCluster lanes, `identity`
// past the cluster). cluster_reduce_init() first; the CTA's own all-reduce (row_allreduce with
// kCluster 1) before each call, for the CTA barrier the reuse of the two copies relies on.
template <class S, class Merge, int kWarps>
__device__ __forceinline__ S cluster_allreduce(S v, Merge merge, RowReduceSmem<S, kWarps, false>& smem, int iter,
                                               unsigned ctas, S identity) {
  push_and_wait(v, smem, iter, ctas);
  const unsigned r = threadIdx.x % kMaxCluster;
  return group_allreduce<kMaxCluster>(r < ctas ? smem.cta[iter & 1][r] : identity, merge);
}

// All-reduce over kThreads threads of a CTA (a group of lanes if <= 32, else whole warps) and,
// when kCluster > 1, over the kCluster CTAs of the cluster. Every thread of the CTA (and cluster)
// must call it, with the worker's row count so far (0, 1, 2, ...): it contains barriers. A kernel
// using clusters must call row_reduce_init() first. It needs no cluster barrier before exiting:
// peers write a CTA's shared memory only before they arrive on its mbarrier (or the row's cluster
// barrier), which the CTA waits for, so no access to it is left once its last row is reduced.
template <int kThreads, int kCluster, class S, class Merge, int kWarps, bool kAsync>
__device__ __forceinline__ S row_allreduce(S v, Merge merge, RowReduceSmem<S, kWarps, kAsync>& smem, int iter) {
  const int parity = iter & 1;
  if constexpr (kThreads <= 32) {
    v = group_allreduce<kThreads>(v, merge);
  } else {
    // Warps' values through shared memory, then a butterfly over them: lane l of every warp
    // starts from warp (l % W)'s value, so each aligned group of W lanes holds all W values.
    constexpr int W = kThreads / 32;
    static_assert(W <= kWarps && (W & (W - 1)) == 0, "warps per row must be a power of two");
    v = group_allreduce<32>(v, merge);
    if (threadIdx.x % 32 == 0) smem.warp[parity][threadIdx.x / 32] = v;
    __syncthreads();
    const int first = (threadIdx.x / kThreads) * W;  // the row's first warp (rows may share a CTA)
    v = group_allreduce<W>(smem.warp[parity][first + threadIdx.x % W], merge);
  }
  if constexpr (kCluster > 1) {
    static_assert(kCluster <= kMaxCluster, "cluster too large");
    static_assert(kThreads > 32, "a cluster row spans whole warps (the reuse argument needs the CTA barrier)");
    push_and_wait(v, smem, iter, kCluster);
    v = group_allreduce<kCluster>(smem.cta[iter & 1][threadIdx.x % kCluster], merge);
  }
  return v;
}

}  // namespace jaxnorm

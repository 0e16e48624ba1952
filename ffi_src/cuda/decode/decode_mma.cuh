// One decoding step of attention over a KV cache on tensor cores (16-bit caches, sm_80+).
//
// A CTA takes one (sequence, kv head, group of up to 8 * NT query heads, split of the positions)
// and streams the split's K and V rows through a ring of shared-memory stages filled by cp.async,
// as decode_simt.cuh does; each of its 4 warps takes 16 rows of every stage and keeps its own
// online softmax. Computed transposed, so that the keys rather than the few query heads fill
// mma's 16-row side: the scores are S^T = K Q^T (16 keys x 8 heads per mma, Q^T held in
// registers), and the output O^T = V^T P^T (16 dims x 8 heads per mma, V^T by ldmatrix.trans).
// The probabilities P^T leave the score mma as C fragments (key rows) and enter the second as
// B fragments (head columns): one movmatrix transpose per 8x8 block, no shared memory.
// Probabilities are rounded to the cache dtype for the second mma, as FlashAttention does; the
// sums, the maxima and both accumulations are float32.
#pragma once

#include <cstdint>

#include "cuda/decode/decode_common.cuh"
#include "cuda/mma_sync.cuh"

namespace jaxnorm {
namespace decode {

template <class T, int D, int NT>
struct MmaShape {
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kRows = 16 * kWarps;  // positions per stage
  static constexpr int kHeads = 8 * NT;      // query heads per CTA
  static constexpr int kSteps = D / 16;      // 16-wide steps along head_dim
  // 16 KB (D = 64) to 64 KB (D = 256) a stage: at least two stages in flight per CTA, and 128 KB
  // or more per SM, for every head_dim.
  static constexpr int kStages = D == 64 ? 4 : 3;
  static constexpr int kStageElems = 2 * kRows * D;  // K rows, then V rows
  static constexpr size_t kSmemBytes = size_t{kStages} * kStageElems * sizeof(T);
  static_assert(sizeof(T) == 2 && D % 64 == 0, "16-bit caches, head_dim a multiple of 64 (swizzle of 8 pieces)");
  static_assert(size_t{kWarps} * kHeads * D * sizeof(float) <= kSmemBytes, "the warp merge reuses the stages");
};

// Element offset of 16-byte piece `piece` of row r in a swizzled stage (see load_stage).
template <int D>
__device__ __forceinline__ int swizzled(int r, int piece) {
  return r * D + ((piece ^ (r % 8)) << 3);
}

template <class T, int D, int NT>
__global__ void __launch_bounds__(kThreads) decode_mma_kernel(DecodeParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using S = MmaShape<T, D, NT>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* stages = reinterpret_cast<T*>(smem_raw);
  __shared__ float sm_max[S::kWarps][S::kHeads], sm_sum[S::kWarps][S::kHeads];

  Work w;
  const bool valid = work_of(p, S::kHeads, S::kRows, &w);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const Rows<T> src = rows_of<T, D>(p, w);
  if (valid) write_new_token<T, D>(p, w, src);

  // Q^T as B fragments: head nt * 8 + g, dims 16 * kk + 2t (+1) and + 8 (+9); absent heads are 0.
  uint32_t qf[NT][S::kSteps][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int head = nt * 8 + g;
    const T* qrow = static_cast<const T*>(p.q) + (int64_t{w.b} * p.q_heads + w.h0 + head) * D + 2 * t;
#pragma unroll
    for (int kk = 0; kk < S::kSteps; ++kk) {
      const bool here = valid && head < w.heads;
      qf[nt][kk][0] = here ? *reinterpret_cast<const uint32_t*>(qrow + 16 * kk) : 0u;
      qf[nt][kk][1] = here ? *reinterpret_cast<const uint32_t*>(qrow + 16 * kk + 8) : 0u;
    }
  }

  // O^T as C fragments: dims 16 * md + g (+8), heads nt * 8 + 2t (+1). m, l: heads 2t, 2t + 1.
  float o[NT][S::kSteps][4], m[NT][2], l[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      m[nt][i] = -INFINITY;
      l[nt][i] = 0.f;
    }
#pragma unroll
    for (int md = 0; md < S::kSteps; ++md) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[nt][md][e] = 0.f;
    }
  }

  const int n_stages = valid ? (w.end - w.start + S::kRows - 1) / S::kRows : 0;
#pragma unroll
  for (int st = 0; st < S::kStages - 1; ++st) {
    if (st < n_stages) {
      load_stage<S::kRows, D, true>(stages + st * S::kStageElems, src, p.pos_stride, w.start + st * S::kRows, w.end);
    }
    cp_async_commit();
  }
  const int r0 = 16 * warp;  // this warp's rows of every stage
  for (int it = 0; it < n_stages; ++it) {
    const int next = it + S::kStages - 1;
    if (next < n_stages) {
      load_stage<S::kRows, D, true>(stages + (next % S::kStages) * S::kStageElems, src, p.pos_stride,
                                    w.start + next * S::kRows, w.end);
    }
    cp_async_commit();
    cp_async_wait<S::kStages - 1>();
    __syncthreads();
    const T* kbuf = stages + (it % S::kStages) * S::kStageElems;
    const T* vbuf = kbuf + S::kRows * D;
    const int pos0 = w.start + it * S::kRows + r0;
    if (pos0 < w.end) {
      // Scores S^T: keys r0 + g and r0 + g + 8, heads 2t and 2t + 1 of each n-tile.
      float s[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
      }
      {
        const int r = r0 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int kk = 0; kk < S::kSteps; ++kk) {
          uint32_t a[4];
          ldmatrix_x4(a, kbuf + swizzled<D>(r, 2 * kk + (lane >> 4)));
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mma_16816<T>(s[nt], a, qf[nt][kk][0], qf[nt][kk][1]);
        }
      }
      const bool in_lo = pos0 + g < w.end, in_hi = pos0 + g + 8 < w.end;
      uint32_t pb[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        float pr[4];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float lo = in_lo ? s[nt][i] * p.scale_log2 : -INFINITY;
          const float hi = in_hi ? s[nt][2 + i] * p.scale_log2 : -INFINITY;
          float mx = fmaxf(lo, hi);
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
          const float m_new = fmaxf(m[nt][i], mx);
          const float base = m_new == -INFINITY ? 0.f : m_new;  // nothing seen yet: no NaN
          const float corr = exp2f(m[nt][i] - base);
          pr[i] = exp2f(lo - base);
          pr[2 + i] = exp2f(hi - base);
          l[nt][i] = fmaf(l[nt][i], corr, pr[i] + pr[2 + i]);
          m[nt][i] = m_new;
#pragma unroll
          for (int md = 0; md < S::kSteps; ++md) {
            o[nt][md][i] *= corr;
            o[nt][md][2 + i] *= corr;
          }
        }
        pb[nt][0] = movmatrix_trans(pack2<T>(pr[0], pr[1]));
        pb[nt][1] = movmatrix_trans(pack2<T>(pr[2], pr[3]));
      }
      // O^T += V^T P^T.
      const int r = r0 + (lane & 7) + (lane >> 4) * 8;
#pragma unroll
      for (int md = 0; md < S::kSteps; ++md) {
        uint32_t a[4];
        ldmatrix_x4_trans(a, vbuf + swizzled<D>(r, 2 * md + ((lane >> 3) & 1)));
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma_16816<T>(o[nt][md], a, pb[nt][0], pb[nt][1]);
      }
    }
    __syncthreads();  // the next iteration refills this stage
  }
  cp_async_wait<0>();
  __syncthreads();

  // Each warp's state to shared memory (the stages are free now), then the merge in warp order.
  float* sm_acc = reinterpret_cast<float*>(smem_raw);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float sum = l[nt][i];
      sum += __shfl_xor_sync(0xffffffffu, sum, 4);
      sum += __shfl_xor_sync(0xffffffffu, sum, 8);
      sum += __shfl_xor_sync(0xffffffffu, sum, 16);
      const int head = nt * 8 + 2 * t + i;
      if (g == 0) {
        sm_max[warp][head] = m[nt][i];
        sm_sum[warp][head] = sum;
      }
      float* acc = sm_acc + (warp * S::kHeads + head) * D;
#pragma unroll
      for (int md = 0; md < S::kSteps; ++md) {
        acc[16 * md + g] = o[nt][md][i];
        acc[16 * md + g + 8] = o[nt][md][2 + i];
      }
    }
  }
  __syncthreads();
  merge_and_store<T, D, S::kWarps, S::kHeads>(p, w, valid, &sm_max[0][0], &sm_sum[0][0], sm_acc);
#endif
}

}  // namespace decode
}  // namespace jaxnorm

// Causal linear attention on CUDA cores, for float32 operands (computed in float32 throughout),
// in chunks of 32 positions with the same walk, parts and state as la_mma.cuh: per chunk the
// masked scores a b^T go to shared memory, out = a S + P c, den = a . z + row sums of P, then
// S += b^T c and z += sum b (and the rank-1 term's w, u). The state lives in shared memory, each
// element owned by one thread.
#pragma once

#include <cstdint>

#include "cuda/linear_attention/la_common.cuh"

namespace jaxnorm {
namespace linattn {

constexpr int kSimtChunk = 32;
constexpr int kSimtThreads = 256;

template <int K, int NV>
struct SimtShape {
  static constexpr int kLdK = K + 1;  // odd strides: rows read by neighbouring threads spread over banks
  static constexpr int kLdP = kSimtChunk + 1;
  static constexpr size_t kSmemFloats =
      2 * kSimtChunk * kLdK + kSimtChunk * NV + size_t{K} * NV + K + kSimtChunk * kLdP + 3 * kSimtChunk + NV + 1;
  static constexpr size_t kSmemBytes = kSmemFloats * sizeof(float);
};

template <int K, int NV>
__global__ void __launch_bounds__(kSimtThreads) linear_attention_simt_kernel(Params p) {
  using S = SimtShape<K, NV>;
  constexpr int C = kSimtChunk;
  extern __shared__ __align__(16) float fsm[];
  float* ta = fsm;
  float* tb = ta + C * S::kLdK;
  float* tc = tb + C * S::kLdK;  // (C, NV)
  float* ss = tc + C * NV;       // the state (K, NV)
  float* zs = ss + K * NV;
  float* sp = zs + K;            // masked scores (C, kLdP)
  float* dsum = sp + C * S::kLdP;
  float* tal = dsum + C;  // alpha, beta of the chunk's rows
  float* tbe = tal + C;
  float* ws = tbe + C;  // w (NV), then u
  const bool rank1 = p.alpha != nullptr;

  const Work w = work_of(p);
  for (int i = threadIdx.x; i < K * NV; i += kSimtThreads) ss[i] = 0.f;
  for (int k = threadIdx.x; k < K; k += kSimtThreads) zs[k] = 0.f;
  for (int v = threadIdx.x; v <= NV; v += kSimtThreads) ws[v] = 0.f;
  if (!p.state_only && p.parts > 1 && w.part != first_part(p)) {  // the parts before this one (part_prefix_kernel)
    const float* src = part_state<K>(p, w.row, w.part);
    for (int i = threadIdx.x; i < K * NV; i += kSimtThreads) ss[i] = src[state_offset(p, i / NV, w.slice * NV + i % NV)];
    for (int k = threadIdx.x; k < K; k += kSimtThreads) zs[k] = src[state_offset(p, k, p.v_dim)];
    for (int v = threadIdx.x; v <= NV; v += kSimtThreads) ws[v] = src[state_offset(p, K, v < NV ? w.slice * NV + v : p.v_dim)];
  }
  const float* ga = static_cast<const float*>(p.a) + w.row * p.len * int64_t{K};
  const float* gb = static_cast<const float*>(p.b) + w.row * p.len * int64_t{K};
  const float* gc = static_cast<const float*>(p.c) + w.row * p.len * int64_t{p.v_dim} + w.slice * NV;

  for (int it = 0; it < w.count; ++it) {
    const int pos0 = chunk_at(p, w, it) * C;
    __syncthreads();  // the previous chunk is done with the tiles and the state
    for (int i = threadIdx.x; i < C * K; i += kSimtThreads) {
      const int r = i / K, k = i % K, pos = pos0 + r;
      const bool in = pos < p.len;
      if (!p.state_only) ta[r * S::kLdK + k] = in ? ga[int64_t{pos} * K + k] : 0.f;
      tb[r * S::kLdK + k] = in ? gb[int64_t{pos} * K + k] : 0.f;
    }
    for (int i = threadIdx.x; i < C * NV; i += kSimtThreads) {
      const int r = i / NV, pos = pos0 + r;
      tc[i] = pos < p.len ? gc[int64_t{pos} * p.v_dim + i % NV] : 0.f;
    }
    if (rank1 && threadIdx.x < C) {
      const int pos = pos0 + threadIdx.x;
      tal[threadIdx.x] = pos < p.len ? p.alpha[w.row * p.len + pos] : 0.f;
      tbe[threadIdx.x] = pos < p.len ? p.beta[w.row * p.len + pos] : 0.f;
    }
    __syncthreads();
    if (!p.state_only) {
      for (int e = threadIdx.x; e < C * C; e += kSimtThreads) {
        const int i = e / C, j = e % C;
        float s = 0.f;
        if (p.reverse ? j >= i : j <= i) {
          for (int k = 0; k < K; ++k) s += ta[i * S::kLdK + k] * tb[j * S::kLdK + k];
          if (rank1) s += tal[i] * tbe[j];
        }
        sp[i * S::kLdP + j] = s;
      }
      __syncthreads();
      for (int i = threadIdx.x; i < C; i += kSimtThreads) {
        float d = 0.f;
        for (int k = 0; k < K; ++k) d += ta[i * S::kLdK + k] * zs[k];
        for (int j = 0; j < C; ++j) d += sp[i * S::kLdP + j];
        if (rank1) d += tal[i] * ws[NV];
        dsum[i] = d;
        const int pos = pos0 + i;
        if (pos < p.len && w.slice == 0) p.den[w.row * p.len + pos] = d;
      }
      __syncthreads();
      for (int e = threadIdx.x; e < C * NV; e += kSimtThreads) {
        const int i = e / NV, n = e % NV, pos = pos0 + i;
        float o = 0.f;
        for (int k = 0; k < K; ++k) o += ta[i * S::kLdK + k] * ss[k * NV + n];
        for (int j = 0; j < C; ++j) o += sp[i * S::kLdP + j] * tc[j * NV + n];
        if (rank1) o += tal[i] * ws[n];
        if (pos < p.len) {
          if (p.normalize) o /= dsum[i] + p.eps;
          static_cast<float*>(p.out)[(w.row * p.len + pos) * int64_t{p.v_dim} + w.slice * NV + n] = o;
        }
      }
      __syncthreads();  // the state is read
    }
    for (int e = threadIdx.x; e < K * NV; e += kSimtThreads) {
      const int k = e / NV, n = e % NV;
      float s = 0.f;
      for (int j = 0; j < C; ++j) s += tb[j * S::kLdK + k] * tc[j * NV + n];
      ss[e] += s;
    }
    for (int k = threadIdx.x; k < K; k += kSimtThreads) {
      float s = 0.f;
      for (int j = 0; j < C; ++j) s += tb[j * S::kLdK + k];
      zs[k] += s;
    }
    if (rank1) {
      for (int v = threadIdx.x; v <= NV; v += kSimtThreads) {
        float s = 0.f;
        for (int j = 0; j < C; ++j) s += tbe[j] * (v < NV ? tc[j * NV + v] : 1.f);
        ws[v] += s;
      }
    }
  }

  if (p.state_only) {
    __syncthreads();
    float* dst = part_state<K>(p, w.row, w.part);
    for (int e = threadIdx.x; e < K * NV; e += kSimtThreads) {
      dst[state_offset(p, e / NV, w.slice * NV + e % NV)] = ss[e];
    }
    for (int v = threadIdx.x; v < NV; v += kSimtThreads) dst[state_offset(p, K, w.slice * NV + v)] = ws[v];
    if (w.slice == 0) {
      for (int k = threadIdx.x; k < K; k += kSimtThreads) dst[state_offset(p, k, p.v_dim)] = zs[k];
      if (threadIdx.x == 0) dst[state_offset(p, K, p.v_dim)] = ws[NV];
    }
  }
}

}  // namespace linattn
}  // namespace jaxnorm

// Causal linear attention on tensor cores (16-bit operands, sm_80+), in chunks of 64 positions.
//
// Per chunk (a, b, c tiles in shared memory by cp.async, the next chunk's in flight while this
// one is computed), each of the 4 warps takes 16 rows of the chunk:
//   scores  P = a b^T (16 x 64, float32), masked to j <= i (j >= i if reverse): row sums -> den;
//   out     = a S + P c,  den += a . z  (S and z the state before the chunk, rounded to T in
//                                         shared memory: z is 8 more columns of S);
// then the state S += b^T c (each warp owns a tile of S in registers, float32) and z += sum b
// (an mma of b^T against ones; the running z is float32).
// The rank-1 form adds alpha_i beta_j to the scores, alpha_i w to out and alpha_i u to den.
// P leaves its mma as C fragments and enters the next as A fragments (no shared memory).
// float16 has no exponent range to spare: P's rows and S are scaled by powers of two before
// rounding (exact), so long sequences and large scores do not overflow; bfloat16 needs none.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/linear_attention/la_common.cuh"
#include "cuda/mma_sync.cuh"

namespace jaxnorm {
namespace linattn {

constexpr int kChunk = 64;
constexpr int kMmaThreads = 128;

template <class T, int K, int NV>
struct MmaShape {
  static constexpr int kWarps = kMmaThreads / 32;
  static constexpr int kLdK = K + 8;   // padded rows: conflict-free ldmatrix at every width
  static constexpr int kLdV = NV + 8;
  static constexpr int kStageElems = 2 * kChunk * kLdK + kChunk * kLdV + 2 * kChunk;  // a, b, c, beta (f32)
  static constexpr int kStages = K >= 256 ? 1 : 2;
  // Resident CTAs an SM the register budget must allow, so shared memory alone sets the
  // residency (without it ptxas gave K = 64 183 registers: 2 CTAs an SM instead of 3, 1.13x
  // slower). One stage with a fourth or third CTA (K = 64, 128) was measured too: within -9% to
  // +5%, not kept.
  static constexpr int kMinCtas = K <= 32 ? 4 : K <= 64 ? 3 : K <= 128 ? 2 : 1;
  static constexpr int kNT = NV / 8;  // n-tiles of c's slice
  // The state's (K / 16) x (NV / 8) tiles over the warps: split along K when K >= 64.
  static constexpr int kWarpsM = K / 16 < kWarps ? K / 16 : kWarps;
  static constexpr int kWarpsN = kWarps / kWarpsM;
  static constexpr int kWM = K / 16 / kWarpsM;  // m-tiles of S per warp
  static constexpr int kWN = kNT / kWarpsN;     // n-tiles of S per warp
  static constexpr bool kScaled = std::is_same_v<T, __half>;
  static constexpr size_t kSmemBytes =
      (size_t{kStages} * kStageElems + size_t{K} * kLdV) * sizeof(T) + (K + NV + 1) * sizeof(float);
  static_assert(kWN % 2 == 0 && kNT % 2 == 0, "c's n-tiles come in pairs (ldmatrix x4)");
};

// 2^e as a float, e in [-126, 127].
__device__ __forceinline__ float exp2i(int e) { return __int_as_float((e + 127) << 23); }

// The power of two that brings |x| <= m under 2^14 (float16's top binade is 2^15): 0 for small m.
__device__ __forceinline__ int f16_shift(float m) {
  const int e = ((__float_as_int(m) >> 23) & 0xff) - 127;
  return m > 0.f && e > 13 ? min(e - 13, 126) : 0;
}

// Issues the copies of chunk `ci`'s rows: a (unless state-only), b, and c's slice (cp.async), and
// beta (plain loads); rows past the sequence are zeros. A thread copies the same 16-byte column
// of rows a fixed stride apart in every chunk, so a chunk costs one base address and unrolled
// copies at constant offsets; only a chunk reaching past the sequence clamps its rows.
template <class T, int K, int NV>
__device__ __forceinline__ void load_chunk(T* st, const Params& p, const Work& w, int ci) {
  using S = MmaShape<T, K, NV>;
  constexpr int kPK = K / 8, kPV = NV / 8;                                // 16-byte pieces per row
  constexpr int kStrideK = kMmaThreads / kPK, kStrideV = kMmaThreads / kPV;  // rows apart
  static_assert(kMmaThreads % kPK == 0 && kChunk % kStrideK == 0 && kMmaThreads % kPV == 0 && kChunk % kStrideV == 0);
  const int pos0 = ci * kChunk;
  const int rk = threadIdx.x / kPK, ck = threadIdx.x % kPK * 8;
  const int rv = threadIdx.x / kPV, cv = threadIdx.x % kPV * 8;
  const T* a = static_cast<const T*>(p.a) + w.row * p.len * int64_t{K} + ck;
  const T* b = static_cast<const T*>(p.b) + w.row * p.len * int64_t{K} + ck;
  const T* c = static_cast<const T*>(p.c) + w.row * p.len * int64_t{p.v_dim} + w.slice * NV + cv;
  T* ta = st + rk * S::kLdK + ck;
  T* tb = ta + kChunk * S::kLdK;
  T* tc = st + 2 * kChunk * S::kLdK + rv * S::kLdV + cv;
  auto issue = [&](auto whole) {
    constexpr bool kWhole = decltype(whole)::value;
    auto at = [&](int pos) { return kWhole ? pos : min(pos, p.len - 1); };
    auto bytes = [&](int pos) { return kWhole || pos < p.len ? 16 : 0; };
#pragma unroll
    for (int u = 0; u < kChunk / kStrideK; ++u) {
      const int pos = pos0 + rk + u * kStrideK;
      if (!p.state_only) cp_async_16(ta + u * kStrideK * S::kLdK, a + int64_t{at(pos)} * K, bytes(pos));
      cp_async_16(tb + u * kStrideK * S::kLdK, b + int64_t{at(pos)} * K, bytes(pos));
    }
#pragma unroll
    for (int u = 0; u < kChunk / kStrideV; ++u) {
      const int pos = pos0 + rv + u * kStrideV;
      cp_async_16(tc + u * kStrideV * S::kLdV, c + int64_t{at(pos)} * p.v_dim, bytes(pos));
    }
  };
  if (int64_t{pos0} + kChunk <= p.len) {
    issue(std::true_type{});
  } else {
    issue(std::false_type{});
  }
  cp_async_commit();
  if (p.beta != nullptr && threadIdx.x < kChunk) {
    const int pos = pos0 + threadIdx.x;
    reinterpret_cast<float*>(st + 2 * kChunk * S::kLdK + kChunk * S::kLdV)[threadIdx.x] =
        pos < p.len ? p.beta[w.row * p.len + pos] : 0.f;
  }
}

template <class T, int K, int NV>
__global__ void __launch_bounds__(kMmaThreads, (MmaShape<T, K, NV>::kMinCtas)) linear_attention_mma_kernel(Params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using S = MmaShape<T, K, NV>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* stages = reinterpret_cast<T*>(smem_raw);
  // The state rounded to T, (K, kLdV): columns [0, NV) hold S, the 8 after them z (so a . z comes
  // out of the same mma as a S).
  T* s16 = stages + S::kStages * S::kStageElems;
  float* zs = reinterpret_cast<float*>(s16 + K * S::kLdV);  // z, float32
  float* ws = zs + K;                                        // w (NV), then u: the rank-1 state
  const bool rank1 = p.alpha != nullptr;
  __shared__ float red[S::kWarps];
  __shared__ int shift_s;

  const Work w = work_of(p);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wm = warp % S::kWarpsM, wn = warp / S::kWarpsM;
  const uint32_t ones = pack2<T>(1.f, 1.f);

  // The warp's tiles of S: rows 16 (wm * kWM + mi) + g (+8), columns 8 (wn * kWN + ni) + 2t (+1).
  // Rows of z and columns of w belong to the lanes that hold them in the same fragments.
  float sacc[S::kWM][S::kWN][4];
  auto s_row = [&](int mi, int h) { return 16 * (wm * S::kWM + mi) + g + 8 * h; };
  auto s_col = [&](int ni, int e) { return 8 * (wn * S::kWN + ni) + 2 * t + e; };
#pragma unroll
  for (int mi = 0; mi < S::kWM; ++mi)
#pragma unroll
    for (int ni = 0; ni < S::kWN; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) sacc[mi][ni][e] = 0.f;
  for (int k = threadIdx.x; k < K; k += kMmaThreads) zs[k] = 0.f;
  for (int v = threadIdx.x; v <= NV; v += kMmaThreads) ws[v] = 0.f;
  // f(element of sacc, its offset in a part's state) for each of the warp's elements of S.
  auto for_state = [&](auto f) {
#pragma unroll
    for (int mi = 0; mi < S::kWM; ++mi)
#pragma unroll
      for (int ni = 0; ni < S::kWN; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) f(sacc[mi][ni][e], state_offset(p, s_row(mi, e / 2), w.slice * NV + s_col(ni, e % 2)));
  };

  if (!p.state_only && p.parts > 1 && w.part != first_part(p)) {  // the parts before this one (part_prefix_kernel)
    const float* src = part_state<K>(p, w.row, w.part);
    for_state([&](float& x, int64_t at) { x = src[at]; });
    for (int k = threadIdx.x; k < K; k += kMmaThreads) zs[k] = src[state_offset(p, k, p.v_dim)];
    for (int v = threadIdx.x; v <= NV; v += kMmaThreads) ws[v] = src[state_offset(p, K, v < NV ? w.slice * NV + v : p.v_dim)];
  }
  __syncthreads();  // zs and ws are read by other threads from here on

  // The lanes that own z's rows: t == 0 of the warps with wn == 0 (rows g and g + 8 of each m-tile).
  const bool z_owner = wn == 0 && t == 0;
  // Writes S and z (times 2^-shift for float16) to s16; float16 first finds the shift from max |S|.
  auto publish_state = [&]() {
    int shift = 0;
    if constexpr (S::kScaled) {
      float m = 0.f;
#pragma unroll
      for (int mi = 0; mi < S::kWM; ++mi) {
#pragma unroll
        for (int ni = 0; ni < S::kWN; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) m = fmaxf(m, fabsf(sacc[mi][ni][e]));
        if (z_owner) m = fmaxf(m, fmaxf(fabsf(zs[s_row(mi, 0)]), fabsf(zs[s_row(mi, 1)])));
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      if (lane == 0) red[warp] = m;
      __syncthreads();
      for (int i = 0; i < S::kWarps; ++i) m = fmaxf(m, red[i]);
      shift = f16_shift(m);
      if (threadIdx.x == 0) shift_s = shift;
    }
    const float scale = exp2i(-shift);
#pragma unroll
    for (int mi = 0; mi < S::kWM; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int ni = 0; ni < S::kWN; ++ni) {
          *reinterpret_cast<uint32_t*>(s16 + s_row(mi, h) * S::kLdV + s_col(ni, 0)) =
              pack2<T>(sacc[mi][ni][2 * h] * scale, sacc[mi][ni][2 * h + 1] * scale);
        }
        if (z_owner) {
          const float z = zs[s_row(mi, h)] * scale;
          const uint32_t zz = pack2<T>(z, z);
          uint4 row8 = make_uint4(zz, zz, zz, zz);
          *reinterpret_cast<uint4*>(s16 + s_row(mi, h) * S::kLdV + NV) = row8;
        }
      }
  };
  if (!p.state_only) publish_state();

  if (w.count > 0) load_chunk<T, K, NV>(stages, p, w, chunk_at(p, w, 0));
  for (int it = 0; it < w.count; ++it) {
    const int ci = chunk_at(p, w, it);
    T* st = stages + (S::kStages == 2 ? it % 2 : 0) * S::kStageElems;
    if (S::kStages == 1 && it > 0) {
      __syncthreads();  // everyone is done with the previous chunk's tiles
      load_chunk<T, K, NV>(st, p, w, ci);
    }
    cp_async_wait<0>();
    __syncthreads();  // the chunk's tiles, s16, zs, ws and shift_s are ready; the other stage is free
    if (S::kStages == 2 && it + 1 < w.count) {
      load_chunk<T, K, NV>(stages + ((it + 1) % 2) * S::kStageElems, p, w, chunk_at(p, w, it + 1));
    }
    const T* ta = st;
    const T* tb = st + kChunk * S::kLdK;
    const T* tc = st + 2 * kChunk * S::kLdK;
    const float* tbeta = reinterpret_cast<const float*>(tc + kChunk * S::kLdV);

    if (!p.state_only) {
      const int r0 = 16 * warp;  // the warp's rows within the chunk
      auto kept_pair = [&](int jp) { return p.reverse ? jp >= warp : jp <= warp; };
      // One pass over a's k-steps: the scores P = a b^T (pairs of n-tiles jp, only those on the
      // kept side of the diagonal), out = a S and a . z (the extra n-tile).
      float sc[8][4], o[S::kNT][4], dz[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[j][e] = 0.f;
#pragma unroll
      for (int n = 0; n < S::kNT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[n][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) {
        const int m = lane / 8;
        uint32_t af[4];
        ldmatrix_x4(af, ta + (r0 + lane % 8 + 8 * (m % 2)) * S::kLdK + 16 * kk + 8 * (m / 2));
#pragma unroll
        for (int jp = 0; jp < 4; ++jp) {
          if (!kept_pair(jp)) continue;
          uint32_t bf[4];
          ldmatrix_x4(bf, tb + (16 * jp + lane % 8 + 8 * (m / 2)) * S::kLdK + 16 * kk + 8 * (m % 2));
          mma_16816<T>(sc[2 * jp], af, bf[0], bf[1]);
          mma_16816<T>(sc[2 * jp + 1], af, bf[2], bf[3]);
        }
#pragma unroll
        for (int np = 0; np < S::kNT / 2; ++np) {
          uint32_t bf[4];
          ldmatrix_x4_trans(bf, s16 + (16 * kk + lane % 8 + 8 * (m % 2)) * S::kLdV + 16 * np + 8 * (m / 2));
          mma_16816<T>(o[2 * np], af, bf[0], bf[1]);
          mma_16816<T>(o[2 * np + 1], af, bf[2], bf[3]);
        }
        uint32_t zf[2];
        ldmatrix_x2_trans(zf, s16 + (16 * kk + lane % 8 + 8 * ((lane / 8) % 2)) * S::kLdV + NV);
        mma_16816<T>(dz, af, zf[0], zf[1]);
      }
      float al[2] = {0.f, 0.f};  // alpha of rows g and g + 8
      if (rank1) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int pos = ci * kChunk + r0 + g + 8 * h;
          al[h] = pos < p.len ? p.alpha[w.row * p.len + pos] : 0.f;
        }
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) sc[j][e] += al[e / 2] * tbeta[8 * j + 2 * t + e % 2];
      }
      // Mask the diagonal pair; row sums (rows g and g + 8) for den; float16 row shifts.
      float rsum[2] = {0.f, 0.f}, rmax[2] = {0.f, 0.f};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (!kept_pair(j / 2)) continue;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = r0 + g + 8 * (e / 2), col = 8 * j + 2 * t + e % 2;
          if (j / 2 == warp && (p.reverse ? col < i : col > i)) sc[j][e] = 0.f;
          rsum[e / 2] += sc[j][e];
          rmax[e / 2] = fmaxf(rmax[e / 2], fabsf(sc[j][e]));
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int o2 = 1; o2 < 4; o2 *= 2) {
          rsum[h] += __shfl_xor_sync(0xffffffffu, rsum[h], o2);
          rmax[h] = fmaxf(rmax[h], __shfl_xor_sync(0xffffffffu, rmax[h], o2));
        }
      float rscale[2] = {1.f, 1.f}, rback[2] = {1.f, 1.f};
      float sback = 1.f;
      if constexpr (S::kScaled) {
        sback = exp2i(shift_s);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int e = f16_shift(rmax[h]);
          rscale[h] = exp2i(-e);
          rback[h] = exp2i(e);
        }
      }
      if (S::kScaled || rank1) {
#pragma unroll
        for (int n = 0; n < S::kNT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[n][e] = (o[n][e] * sback + al[e / 2] * ws[8 * n + 2 * t + e % 2]) * rscale[e / 2];
      }
      // out += P c.
#pragma unroll
      for (int jp = 0; jp < 4; ++jp) {
        if (!kept_pair(jp)) continue;
        uint32_t af[4];
        af[0] = pack2<T>(sc[2 * jp][0] * rscale[0], sc[2 * jp][1] * rscale[0]);
        af[1] = pack2<T>(sc[2 * jp][2] * rscale[1], sc[2 * jp][3] * rscale[1]);
        af[2] = pack2<T>(sc[2 * jp + 1][0] * rscale[0], sc[2 * jp + 1][1] * rscale[0]);
        af[3] = pack2<T>(sc[2 * jp + 1][2] * rscale[1], sc[2 * jp + 1][3] * rscale[1]);
#pragma unroll
        for (int np = 0; np < S::kNT / 2; ++np) {
          uint32_t bf[4];
          const int m = lane / 8;
          ldmatrix_x4_trans(bf, tc + (16 * jp + lane % 8 + 8 * (m % 2)) * S::kLdV + 16 * np + 8 * (m / 2));
          mma_16816<T>(o[2 * np], af, bf[0], bf[1]);
          mma_16816<T>(o[2 * np + 1], af, bf[2], bf[3]);
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float den = dz[2 * h] * sback + rsum[h] + al[h] * ws[NV];
        const int pos = ci * kChunk + r0 + g + 8 * h;
        if (pos >= p.len) continue;
        const float inv = p.normalize ? 1.f / (den + p.eps) : 1.f;
        const float back = rback[h] * inv;
        const int64_t at = (w.row * p.len + pos) * int64_t{p.v_dim} + w.slice * NV + 2 * t;
#pragma unroll
        for (int n = 0; n < S::kNT; ++n) {
          if (p.f32_out) {
            *reinterpret_cast<float2*>(static_cast<float*>(p.out) + at + 8 * n) =
                make_float2(o[n][2 * h] * back, o[n][2 * h + 1] * back);
          } else {
            *reinterpret_cast<uint32_t*>(static_cast<T*>(p.out) + at + 8 * n) =
                pack2<T>(o[n][2 * h] * back, o[n][2 * h + 1] * back);
          }
        }
        if (w.slice == 0 && t == 0) p.den[w.row * p.len + pos] = den;
      }
      __syncthreads();  // s16, zs and ws are read; the state may move on
    }

    // S += b^T c over the chunk's 64 positions; the chunk's sums of b (z, by an mma against ones)
    // and, in the rank-1 form, of beta c and beta (w and u: an A fragment whose row 0 is beta).
    float zc[S::kWM][4], wc[S::kWN][4], uc[4];
#pragma unroll
    for (int mi = 0; mi < S::kWM; ++mi)
#pragma unroll
      for (int e = 0; e < 4; ++e) zc[mi][e] = 0.f;
#pragma unroll
    for (int e = 0; e < 4; ++e) uc[e] = 0.f;
#pragma unroll
    for (int ni = 0; ni < S::kWN; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) wc[ni][e] = 0.f;
    const bool w_warp = rank1 && wm == 0;
#pragma unroll
    for (int kk = 0; kk < kChunk / 16; ++kk) {
      const int m = lane / 8;
      uint32_t bfr[S::kWN / 2][4];
#pragma unroll
      for (int np = 0; np < S::kWN / 2; ++np) {
        ldmatrix_x4_trans(bfr[np], tc + (16 * kk + lane % 8 + 8 * (m % 2)) * S::kLdV + 8 * (wn * S::kWN + 2 * np) +
                                       8 * (m / 2));
      }
#pragma unroll
      for (int mi = 0; mi < S::kWM; ++mi) {
        uint32_t af[4];
        ldmatrix_x4_trans(af, tb + (16 * kk + lane % 8 + 8 * (m / 2)) * S::kLdK + 16 * (wm * S::kWM + mi) +
                                  8 * (m % 2));
#pragma unroll
        for (int np = 0; np < S::kWN / 2; ++np) {
          mma_16816<T>(sacc[mi][2 * np], af, bfr[np][0], bfr[np][1]);
          mma_16816<T>(sacc[mi][2 * np + 1], af, bfr[np][2], bfr[np][3]);
        }
        if (wn == 0) mma_16816<T>(zc[mi], af, ones, ones);
      }
      if (w_warp) {
        const float* be = tbeta + 16 * kk + 2 * t;
        uint32_t af[4];
        af[0] = g == 0 ? pack2<T>(be[0], be[1]) : 0u;
        af[1] = 0u;
        af[2] = g == 0 ? pack2<T>(be[8], be[9]) : 0u;
        af[3] = 0u;
#pragma unroll
        for (int np = 0; np < S::kWN / 2; ++np) {
          mma_16816<T>(wc[2 * np], af, bfr[np][0], bfr[np][1]);
          mma_16816<T>(wc[2 * np + 1], af, bfr[np][2], bfr[np][3]);
        }
        if (wn == 0) mma_16816<T>(uc, af, ones, ones);
      }
    }
    if (z_owner) {
#pragma unroll
      for (int mi = 0; mi < S::kWM; ++mi) {
        zs[s_row(mi, 0)] += zc[mi][0];
        zs[s_row(mi, 1)] += zc[mi][2];
      }
    }
    if (w_warp && g == 0) {
#pragma unroll
      for (int ni = 0; ni < S::kWN; ++ni) {
        ws[s_col(ni, 0)] += wc[ni][0];
        ws[s_col(ni, 1)] += wc[ni][1];
      }
      if (wn == 0 && t == 0) ws[NV] += uc[0];
    }
    if (!p.state_only) publish_state();
  }

  if (p.state_only) {  // this part's own sums, for the parts after it
    __syncthreads();
    float* dst = part_state<K>(p, w.row, w.part);
    for_state([&](float& x, int64_t at) { dst[at] = x; });
    for (int v = threadIdx.x; v < NV; v += kMmaThreads) dst[state_offset(p, K, w.slice * NV + v)] = ws[v];
    if (w.slice == 0) {
      for (int k = threadIdx.x; k < K; k += kMmaThreads) dst[state_offset(p, k, p.v_dim)] = zs[k];
      if (threadIdx.x == 0) dst[state_offset(p, K, p.v_dim)] = ws[NV];
    }
  }
#endif
}

}  // namespace linattn
}  // namespace jaxnorm

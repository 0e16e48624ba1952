// CUDA handlers of decode attention: with and without appending the new token to the caches.
// 16-bit caches run on tensor cores (decode_mma.cuh), float32 caches on CUDA cores
// (decode_simt.cuh); both split the sequences so that the grid fills the GPU once.
#include <algorithm>
#include <type_traits>

#include "common/decode_args.h"
#include "common/signatures.h"
#include "cuda/decode/decode_mma.cuh"
#include "cuda/decode/decode_simt.cuh"
#include "cuda/launch.cuh"

namespace jaxnorm {
namespace {

using namespace decode;

// Query heads per CTA of the CUDA-core kernel: the group rounded up to a power of two, at most 8;
// larger groups take several CTAs per kv head (each re-reads the rows, mostly from L2).
int heads_per_cta(int group) { return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8; }

// Splits of each sequence: as many as make the grid one full wave of resident CTAs (a CTA per
// resident slot streams its part of the cache with nothing left for a second wave), at most the
// workspace's `bound`, and at least `grain` positions of the longest sequence each.
int splits_for(int64_t units, int ctas_per_sm, int bound, int max_len, int grain) {
  const int64_t slots = int64_t{device_facts().sms} * ctas_per_sm;
  const int64_t by_rows = std::max<int64_t>(1, (max_len + grain - 1) / grain);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({slots / std::max<int64_t>(units, 1), bound, by_rows})));
}

// Launches `kernel` on (splits, kv heads x head groups of `per_cta`, batch), then the split merge.
template <class T, int D, class K>
ffi::Error launch_split(K kernel, size_t smem, int per_cta, int grain, int ctas_per_sm, cudaStream_t stream,
                        DecodeParams p, int64_t batch) {
  const int groups = (p.group + per_cta - 1) / per_cta;
  p.splits = splits_for(batch * p.kv_heads * groups, ctas_per_sm, std::min(p.splits, kMaxSplits), p.max_len, grain);
  p.partial_stats = p.splits > 1 ? p.partials + batch * p.q_heads * int64_t{p.splits} * D : nullptr;
  const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(p.kv_heads * groups),
                  static_cast<unsigned>(batch));
  JN_RETURN_IF_ERROR(launch_with_smem(kernel, grid, dim3(kThreads), 1, smem, stream, "decode_attention", p));
  if (p.splits == 1) return ffi::Error::Success();
  return launch(combine_kernel<T, D>, dim3(static_cast<unsigned>(batch * p.q_heads)), dim3(kCombineThreads), 1, stream,
                "decode_attention (merging splits)", p);
}

// Resident CTAs per SM of a kernel instantiation (asked once).
template <class K>
int resident(K kernel, size_t smem) {
  allow_smem(kernel, smem);
  return occupancy(kernel, kThreads, smem);
}

template <class T, int D, int G>
ffi::Error launch_simt(cudaStream_t stream, const DecodeParams& p, int64_t batch) {
  using S = Shape<T, D, G>;
  static const int ctas = resident(decode_kernel<T, D, G>, S::kSmemBytes);
  return launch_split<T, D>(decode_kernel<T, D, G>, S::kSmemBytes, G, S::kStageRows, ctas, stream, p, batch);
}

template <class T, int D, int NT>
ffi::Error launch_mma(cudaStream_t stream, const DecodeParams& p, int64_t batch) {
  using S = MmaShape<T, D, NT>;
  static const int ctas = resident(decode_mma_kernel<T, D, NT>, S::kSmemBytes);
  return launch_split<T, D>(decode_mma_kernel<T, D, NT>, S::kSmemBytes, S::kHeads, S::kRows, ctas, stream, p, batch);
}

template <class T, int D>
ffi::Error dispatch_group(cudaStream_t stream, const DecodeParams& p, int64_t batch) {
  if constexpr (sizeof(T) == 2) {
    // Tensor cores from sm_80, where the stages fit (head_dim 256 takes 192 KB: not on sm_8x).
    if (device_facts().cc_major >= 8 && MmaShape<T, D, 1>::kSmemBytes <= size_t(device_facts().max_smem_optin)) {
      return p.group <= 8 ? launch_mma<T, D, 1>(stream, p, batch) : launch_mma<T, D, 2>(stream, p, batch);
    }
  }
  switch (heads_per_cta(p.group)) {
    case 1: return launch_simt<T, D, 1>(stream, p, batch);
    case 2: return launch_simt<T, D, 2>(stream, p, batch);
    case 4: return launch_simt<T, D, 4>(stream, p, batch);
    default: return launch_simt<T, D, 8>(stream, p, batch);
  }
}

template <class T>
ffi::Error dispatch_head_dim(cudaStream_t stream, const DecodeParams& p, const DecodeArgs& a) {
  switch (a.head_dim) {
    case 64: return dispatch_group<T, 64>(stream, p, a.batch);
    case 128: return dispatch_group<T, 128>(stream, p, a.batch);
    case 256: return dispatch_group<T, 256>(stream, p, a.batch);
    default: return ffi::Error::InvalidArgument("jaxnorm: decode_attention: head_dim must be 64, 128 or 256");
  }
}

// When XLA could not alias a cache with its result, the result starts as a copy of the cache.
ffi::Error copy_unaliased(cudaStream_t stream, const void* in, void* out, int64_t bytes) {
  if (in == out || bytes == 0) return ffi::Error::Success();
  cudaError_t e = cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream);
  return e == cudaSuccess ? ffi::Error::Success() : cuda_error(e, "decode_attention (copying a cache)");
}

ffi::Error run(cudaStream_t stream, const DecodeArgs& a) {
  if (a.batch > 65535 || a.kv_heads * ((a.group + 7) / 8) > 65535) {
    return ffi::Error::InvalidArgument("jaxnorm: decode_attention: at most 65535 sequences and kv heads");
  }
  if (a.has_new) {
    JN_RETURN_IF_ERROR(copy_unaliased(stream, a.k, a.k_out, a.cache_bytes()));
    JN_RETURN_IF_ERROR(copy_unaliased(stream, a.v, a.v_out, a.cache_bytes()));
  }
  DecodeParams p;
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.k_new = a.k_new;
  p.v_new = a.v_new;
  p.lengths = a.lengths;
  p.out = a.out;
  p.k_out = a.k_out;
  p.v_out = a.v_out;
  p.partials = a.partials;
  p.batch_stride = a.batch_stride;
  p.head_stride = a.head_stride;
  p.pos_stride = a.pos_stride;
  p.q_heads = static_cast<int>(a.q_heads);
  p.kv_heads = static_cast<int>(a.kv_heads);
  p.group = static_cast<int>(a.group);
  p.max_len = static_cast<int>(a.max_len);
  p.splits = static_cast<int>(a.splits);
  p.scale_log2 = a.scale * kLog2e;
  p.has_new = a.has_new;
  if (a.batch == 0 || a.q_heads == 0) return ffi::Error::Success();
  return dispatch_float<CudaTypes>(a.dtype, "the caches", [&](auto tag) {
    return dispatch_head_dim<typename decltype(tag)::type>(stream, p, a);
  });
}

ffi::Error DecodeAttentionCuda(cudaStream_t stream, ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                               ffi::AnyBuffer lengths, ffi::Result<ffi::AnyBuffer> out,
                               ffi::Result<ffi::AnyBuffer> partials, float scale, int64_t splits, bool blhd) {
  DecodeArgs a;
  JN_RETURN_IF_ERROR(decode_args(q, k, v, lengths, nullptr, nullptr, *out, nullptr, nullptr, *partials, scale,
                                 splits, blhd, &a));
  return run(stream, a);
}

ffi::Error DecodeAttentionAppendCuda(cudaStream_t stream, ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                                     ffi::AnyBuffer lengths, ffi::AnyBuffer k_new, ffi::AnyBuffer v_new,
                                     ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> k_out,
                                     ffi::Result<ffi::AnyBuffer> v_out, ffi::Result<ffi::AnyBuffer> partials,
                                     float scale, int64_t splits, bool blhd) {
  DecodeArgs a;
  JN_RETURN_IF_ERROR(decode_args(q, k, v, lengths, &k_new, &v_new, *out, &*k_out, &*v_out, *partials, scale, splits,
                                 blhd, &a));
  return run(stream, a);
}

}  // namespace

#define JN_CUDA_BIND ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormDecodeAttentionCuda, DecodeAttentionCuda,
                              decode_attention_signature<false>(JN_CUDA_BIND), {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormDecodeAttentionAppendCuda, DecodeAttentionAppendCuda,
                              decode_attention_signature<true>(JN_CUDA_BIND), {ffi::Traits::kCmdBufferCompatible});
#undef JN_CUDA_BIND

}  // namespace jaxnorm

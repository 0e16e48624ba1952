// CUDA handler of causal linear attention: 16-bit operands on tensor cores (la_mma.cuh), float32
// on CUDA cores (la_simt.cuh). The sequences are cut into parts so the grid fills the GPU once;
// with more than one part, a state-only launch first sums each part (see la_common.cuh).
#include <algorithm>
#include <type_traits>

#include "common/linear_attention_args.h"
#include "common/signatures.h"
#include "cuda/launch.cuh"
#include "cuda/linear_attention/la_mma.cuh"
#include "cuda/linear_attention/la_simt.cuh"

namespace jaxnorm {
namespace {

using namespace linattn;

// c's columns per CTA: all of them up to 64; the state of a warp stays within 64 registers
// (K = 256 takes 32 columns).
int slice_width(int64_t k_dim, int64_t v_dim) { return static_cast<int>(std::min<int64_t>(v_dim, k_dim >= 256 ? 32 : 64)); }

template <class Kernel>
int resident(Kernel kernel, int threads, size_t smem) {
  allow_smem(kernel, smem);
  return occupancy(kernel, threads, smem);
}

// Runs the two launches of one instantiation: the parts' states (when cut), then the outputs.
template <class Kernel>
ffi::Error run_kernel(Kernel kernel, int threads, size_t smem, int ctas_per_sm, int chunk, cudaStream_t stream,
                      Params p, int64_t max_parts) {
  const int64_t units = p.rows * p.slices;
  const int64_t slots = int64_t{device_facts().sms} * ctas_per_sm;
  p.chunks = static_cast<int>((int64_t{p.len} + chunk - 1) / chunk);
  // Parts for one wave of resident CTAs, rounded down: a CTA walks its part's chunks in sequence,
  // so one CTA left over for a second wave doubles the launch's time (measured: rounding up made
  // every benchmarked shape 1.2-1.45x slower).
  const int64_t want = std::max<int64_t>(1, slots / std::max<int64_t>(units, 1));
  int parts = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, max_parts, p.chunks})));
  p.chunks_per_part = (p.chunks + parts - 1) / parts;
  p.parts = static_cast<int>((p.chunks + p.chunks_per_part - 1) / p.chunks_per_part);  // no empty parts
  if (units * p.parts >= (int64_t{1} << 31)) return linear_attention_error("too many rows for one launch");
  if (p.parts > 1) {
    p.state_only = true;
    JN_RETURN_IF_ERROR(launch_with_smem(kernel, dim3(static_cast<unsigned>(units * (p.parts - 1))), dim3(threads), 1,
                                        smem, stream, "linear_attention (part states)", p));
  }
  if (p.parts > 1) {
    const int64_t elems = p.rows * int64_t{p.k_dim + 1} * (p.v_dim + 1);
    JN_RETURN_IF_ERROR(launch(part_prefix_kernel, dim3(static_cast<unsigned>((elems + 255) / 256)), dim3(256), 1,
                              stream, "linear_attention (part prefixes)", p));
  }
  p.state_only = false;
  return launch_with_smem(kernel, dim3(static_cast<unsigned>(units * p.parts)), dim3(threads), 1, smem, stream,
                          "linear_attention", p);
}

template <class T, int K, int NV>
ffi::Error launch_dims(cudaStream_t stream, const Params& p, int64_t max_parts) {
  if constexpr (std::is_same_v<T, float>) {
    using S = SimtShape<K, NV>;
    static const int ctas = resident(linear_attention_simt_kernel<K, NV>, kSimtThreads, S::kSmemBytes);
    return run_kernel(linear_attention_simt_kernel<K, NV>, kSimtThreads, S::kSmemBytes, ctas, kSimtChunk, stream, p,
                      max_parts);
  } else {
    using S = MmaShape<T, K, NV>;
    static const int ctas = resident(linear_attention_mma_kernel<T, K, NV>, kMmaThreads, S::kSmemBytes);
    return run_kernel(linear_attention_mma_kernel<T, K, NV>, kMmaThreads, S::kSmemBytes, ctas, kChunk, stream, p,
                      max_parts);
  }
}

template <class T, int K>
ffi::Error dispatch_slice(cudaStream_t stream, const Params& p, int nv, int64_t max_parts) {
  if (nv == 32) return launch_dims<T, K, 32>(stream, p, max_parts);
  if constexpr (K < 256) {
    if (nv == 64) return launch_dims<T, K, 64>(stream, p, max_parts);
  }
  return linear_attention_error("unsupported slice width");
}

template <class T>
ffi::Error dispatch_k(cudaStream_t stream, const Params& p, int64_t k_dim, int nv, int64_t max_parts) {
  switch (k_dim) {
    case 32:
      return dispatch_slice<T, 32>(stream, p, nv, max_parts);
    case 64:
      return dispatch_slice<T, 64>(stream, p, nv, max_parts);
    case 128:
      return dispatch_slice<T, 128>(stream, p, nv, max_parts);
    case 256:
      return dispatch_slice<T, 256>(stream, p, nv, max_parts);
    default:
      return linear_attention_error("head dims must be 32, 64, 128 or 256");
  }
}

ffi::Error run(cudaStream_t stream, const LinearAttentionArgs& x) {
  if (x.rows == 0 || x.len == 0) return ffi::Error::Success();
  Params p = {};
  p.a = x.a;
  p.b = x.b;
  p.c = x.c;
  p.alpha = x.alpha;
  p.beta = x.beta;
  p.out = x.out;
  p.den = x.den;
  p.states = x.states;
  p.rows = x.rows;
  p.len = static_cast<int>(x.len);
  p.k_dim = static_cast<int>(x.k_dim);
  p.v_dim = static_cast<int>(x.v_dim);
  p.eps = x.eps;
  p.normalize = x.normalize;
  p.reverse = x.reverse;
  p.f32_out = x.f32_out;
  const int nv = slice_width(x.k_dim, x.v_dim);
  p.slices = static_cast<int>(x.v_dim / nv);
  const int64_t max_parts = x.states == nullptr ? 1 : std::min<int64_t>(x.parts, kMaxParts);
  return dispatch_float<CudaTypes>(x.dtype, "linear_attention's operands", [&](auto tag) {
    return dispatch_k<typename decltype(tag)::type>(stream, p, x.k_dim, nv, max_parts);
  });
}

ffi::Error LinearAttentionCuda(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer c,
                               ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> den,
                               ffi::Result<ffi::AnyBuffer> workspace, bool normalize, float eps, bool reverse,
                               bool f32_out, int64_t parts) {
  LinearAttentionArgs x;
  JN_RETURN_IF_ERROR(linear_attention_args(a, b, c, nullptr, nullptr, *out, *den, *workspace, normalize, eps, reverse,
                                           f32_out, parts, &x));
  return run(stream, x);
}

ffi::Error LinearAttentionRank1Cuda(cudaStream_t stream, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer c,
                                    ffi::AnyBuffer alpha, ffi::AnyBuffer beta, ffi::Result<ffi::AnyBuffer> out,
                                    ffi::Result<ffi::AnyBuffer> den, ffi::Result<ffi::AnyBuffer> workspace,
                                    bool normalize, float eps, bool reverse, bool f32_out, int64_t parts) {
  LinearAttentionArgs x;
  JN_RETURN_IF_ERROR(linear_attention_args(a, b, c, &alpha, &beta, *out, *den, *workspace, normalize, eps, reverse,
                                           f32_out, parts, &x));
  return run(stream, x);
}

}  // namespace

#define JN_CUDA_BIND ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormLinearAttentionCuda, LinearAttentionCuda, linear_attention_signature<false>(JN_CUDA_BIND),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormLinearAttentionRank1Cuda, LinearAttentionRank1Cuda,
                              linear_attention_signature<true>(JN_CUDA_BIND), {ffi::Traits::kCmdBufferCompatible});
#undef JN_CUDA_BIND

}  // namespace jaxnorm

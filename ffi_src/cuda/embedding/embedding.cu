// CUDA handlers of the embedding family (kernels in embedding.cuh).
#include <algorithm>

#include "common/embedding_args.h"
#include "common/signatures.h"
#include "cuda/embedding/embedding.cuh"
#include "cuda/launch.cuh"

namespace jaxnorm {
namespace {

using namespace embedding;

// Elements per pack: the widest (<= 16 bytes) dividing `n` elements, so that every pack of a row
// (rows start at multiples of n elements) is aligned to its size.
template <class T>
int pack_elems(int64_t n) {
  int e = kVecOf<T>;
  while (e > 1 && n % e != 0) e /= 2;
  return e;
}

// Calls f(std::integral_constant<int, N>) for N = e, one of T's pack sizes.
template <class T, class F>
ffi::Error with_pack(int e, F&& f) {
  switch (e) {
    case 8:
      if constexpr (kVecOf<T> >= 8) return f(std::integral_constant<int, 8>{});
      break;
    case 4: return f(std::integral_constant<int, 4>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 1: return f(std::integral_constant<int, 1>{});
  }
  return ffi::Error::Internal("jaxnorm: embed_with_position: bad pack size");
}

// Warps for `work` rows: one each, at most what keeps every SM full (8 CTAs of 8 warps).
dim3 grid_for(int64_t work) {
  const int64_t most = 8 * static_cast<int64_t>(std::max(device_facts().sms, 1));
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min(ceil_div(work, kWarps), most))));
}

ffi::Error EmbedFwdCuda(cudaStream_t stream, ffi::AnyBuffer ids, ffi::AnyBuffer positions, ffi::AnyBuffer table,
                        ffi::AnyBuffer pos_table, ffi::AnyBuffer inv, ffi::Result<ffi::AnyBuffer> out, float scale,
                        bool has_pos_table) {
  EmbedFwdArgs a;
  JN_RETURN_IF_ERROR(embed_fwd_args(ids, positions, table, pos_table, inv, *out, scale, has_pos_table, &a));
  if (a.tokens == 0 || a.dim == 0) return ffi::Error::Success();
  return dispatch_float<CudaTypes>(table.element_type(), "table", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int e = pack_elems<T>(has_pos_table ? a.dim : a.dim / 2);
    return with_pack<T>(e, [&](auto n) {
      constexpr int N = decltype(n)::value;
      if (has_pos_table) {
        return launch(embed_table_kernel<T, N>, grid_for(a.tokens), dim3(kThreads), 1, stream,
                      "embed_with_position", a);
      }
      return launch(embed_sine_kernel<T, N>, grid_for(a.tokens), dim3(kThreads), 1, stream, "embed_with_position", a);
    });
  });
}

ffi::Error EmbedBwdCuda(cudaStream_t stream, ffi::AnyBuffer dout, ffi::AnyBuffer order, ffi::AnyBuffer sorted,
                        ffi::Result<ffi::AnyBuffer> dtable, float scale) {
  EmbedBwdArgs a;
  JN_RETURN_IF_ERROR(embed_bwd_args(dout, order, sorted, *dtable, scale, &a));
  if (a.rows == 0 || a.dim == 0) return ffi::Error::Success();
  const cudaError_t err = cudaMemsetAsync(a.dtable, 0, static_cast<size_t>(a.rows * a.dim * a.elem_bytes), stream);
  if (err != cudaSuccess) return cuda_error(err, "embed_with_position gradient (zeroing)");
  if (a.tokens == 0) return ffi::Error::Success();
  return dispatch_float<CudaTypes>(dout.element_type(), "dout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_pack<T>(pack_elems<T>(a.dim), [&](auto n) {
      return launch(embed_bwd_kernel<T, decltype(n)::value>, grid_for(a.tokens), dim3(kThreads), 1, stream,
                    "embed_with_position gradient", a);
    });
  });
}

}  // namespace

#define JN_CUDA_BIND ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormEmbedFwdCuda, EmbedFwdCuda, embed_fwd_signature(JN_CUDA_BIND),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormEmbedBwdCuda, EmbedBwdCuda, embed_bwd_signature(JN_CUDA_BIND),
                              {ffi::Traits::kCmdBufferCompatible});
#undef JN_CUDA_BIND

}  // namespace jaxnorm

// CUDA handlers of the padding family: offsets, unpack (rebuild), pack (remove); kernels in
// pad_kernels.cuh.
#include <type_traits>

#include "common/signatures.h"
#include "cuda/launch.cuh"
#include "cuda/padding/pad_kernels.cuh"

namespace jaxnorm {
namespace {

using namespace padding;

ffi::Error PadOffsetsCuda(cudaStream_t stream, ffi::AnyBuffer lengths, ffi::Result<ffi::AnyBuffer> source,
                          ffi::Result<ffi::AnyBuffer> position, ffi::Result<ffi::AnyBuffer> starts,
                          ffi::Result<ffi::AnyBuffer> counts) {
  PadOffsetsArgs a;
  JN_RETURN_IF_ERROR(pad_offsets_args(lengths, source, position, starts, counts, &a));
  const size_t smem = static_cast<size_t>(a.batch + 1) * sizeof(int32_t);
  if (smem > static_cast<size_t>(device_facts().max_smem_optin) - 8192) {
    return ffi::Error::InvalidArgument("jaxnorm: padding_offsets: too many sequences for one CTA's prefix sum");
  }
  const int64_t work = std::max(a.batch * a.max_len, a.capacity);
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(ceil_div(work, kOffsetsThreads), 2 * device_facts().sms));
  return launch_with_smem(offsets_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kOffsetsThreads), 1, smem, stream,
                          "padding_offsets", a);
}

// The widest unit (<= 16 bytes) dividing a head_dim segment; every segment starts at a multiple
// of the segment size, so units are aligned.
int unit_bytes(int64_t segment_bytes) {
  int b = 16;
  while (segment_bytes % b != 0) b /= 2;
  return b;
}

template <class I>
UnitLayout<I> unit_layout(const PadLayout& l, int unit, int64_t map_bound) {
  return {Divisor<I>(static_cast<I>(l.head_dim * l.elem_bytes / unit)), Divisor<I>(static_cast<I>(l.heads)),
          Divisor<I>(static_cast<I>(l.max_len)), Divisor<I>(static_cast<I>(l.parts * l.heads)), map_bound};
}

// Calls f(std::integral_constant<int, kBytes>) for the unit size.
template <class F>
ffi::Error with_unit_bytes(int bytes, F&& f) {
  switch (bytes) {
    case 16: return f(std::integral_constant<int, 16>{});
    case 8: return f(std::integral_constant<int, 8>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 2: return f(std::integral_constant<int, 2>{});
    default: return f(std::integral_constant<int, 1>{});
  }
}

template <class Op>
ffi::Error launch_unpack(cudaStream_t stream, const PadLayout& l, const void* packed, void* const* outs, int unit) {
  using Unit = typename Op::Unit;
  const int64_t total = l.padded_segments() * l.head_dim * l.elem_bytes / unit;
  const dim3 grid(static_cast<unsigned>(ceil_div(total, kThreads * kUnroll)), static_cast<unsigned>(l.parts));
  auto args = [&](auto index) {
    using I = decltype(index);
    return launch(unpack_kernel<Op, I>, grid, dim3(kThreads), 1, stream, "rebuild_padding",
                  static_cast<const Unit*>(packed), l.bias, l.position, static_cast<Unit*>(outs[0]),
                  static_cast<Unit*>(outs[1]), static_cast<Unit*>(outs[2]), unit_layout<I>(l, unit, l.capacity),
                  static_cast<I>(total));
  };
  return total < (int64_t{1} << 32) ? args(uint32_t{}) : args(uint64_t{});
}

// The bias path: units of N = unit / sizeof(T) elements (a segment of whole elements always
// gives a unit of at least one element).
template <class T>
ffi::Error launch_unpack_bias(cudaStream_t stream, const PadLayout& l, const void* packed, void* const* outs,
                              int unit) {
  return with_unit_bytes(unit, [&](auto bytes) -> ffi::Error {
    constexpr int N = decltype(bytes)::value / static_cast<int>(sizeof(T));
    if constexpr (N >= 1) {
      return launch_unpack<AddBias<T, N>>(stream, l, packed, outs, unit);
    } else {
      return ffi::Error::Internal("jaxnorm: rebuild_padding: unit smaller than an element");
    }
  });
}

template <int P>
ffi::Error PadUnpackCuda(cudaStream_t stream, ffi::AnyBuffer packed, ffi::AnyBuffer bias, ffi::AnyBuffer position,
                         ffi::AnyBuffer source, ffi::Result<ffi::AnyBuffer> out0, ffi::Result<ffi::AnyBuffer> out1,
                         ffi::Result<ffi::AnyBuffer> out2, int64_t heads) {
  PadLayout l;
  JN_RETURN_IF_ERROR(pad_unpack_layout(P, packed, bias, position, source, heads, &l));
  void* outs[3] = {out0->untyped_data(), out1->untyped_data(), out2->untyped_data()};
  const int unit = unit_bytes(l.head_dim * l.elem_bytes);
  if (!l.bias) {
    return with_unit_bytes(unit, [&](auto bytes) {
      return launch_unpack<Move<decltype(bytes)::value>>(stream, l, packed.untyped_data(), outs, unit);
    });
  }
  return dispatch_float<CudaTypes>(packed.element_type(), "packed (with a bias)", [&](auto tag) {
    return launch_unpack_bias<typename decltype(tag)::type>(stream, l, packed.untyped_data(), outs, unit);
  });
}

ffi::Error PadUnpack1Cuda(cudaStream_t stream, ffi::AnyBuffer packed, ffi::AnyBuffer bias, ffi::AnyBuffer position,
                          ffi::AnyBuffer source, ffi::Result<ffi::AnyBuffer> out, int64_t heads) {
  return PadUnpackCuda<1>(stream, packed, bias, position, source, out, out, out, heads);
}

template <int P>
ffi::Error pad_pack(cudaStream_t stream, const ffi::AnyBuffer* const* parts, const ffi::AnyBuffer& source,
                    const ffi::AnyBuffer& position, ffi::Result<ffi::AnyBuffer>& packed) {
  PadLayout l;
  JN_RETURN_IF_ERROR(pad_pack_layout(parts, P, source, position, *packed, &l));
  const int unit = unit_bytes(l.head_dim * l.elem_bytes);
  const int64_t total = l.capacity * l.width() * l.elem_bytes / unit;
  const void* in[3] = {parts[0]->untyped_data(), parts[P == 3 ? 1 : 0]->untyped_data(),
                       parts[P == 3 ? 2 : 0]->untyped_data()};
  return with_unit_bytes(unit, [&](auto bytes) {
    using Unit = typename Word<decltype(bytes)::value>::type;
    auto run = [&](auto index) {
      using I = decltype(index);
      return launch(pack_kernel<Unit, I>, dim3(static_cast<unsigned>(ceil_div(total, kThreads * kUnroll))), dim3(kThreads), 1,
                    stream, "remove_padding", static_cast<const Unit*>(in[0]), static_cast<const Unit*>(in[1]),
                    static_cast<const Unit*>(in[2]), l.source, static_cast<Unit*>(packed->untyped_data()),
                    unit_layout<I>(l, unit, l.batch * l.max_len), static_cast<I>(total));
    };
    return total < (int64_t{1} << 32) ? run(uint32_t{}) : run(uint64_t{});
  });
}

ffi::Error PadPack1Cuda(cudaStream_t stream, ffi::AnyBuffer part, ffi::AnyBuffer source, ffi::AnyBuffer position,
                        ffi::Result<ffi::AnyBuffer> packed) {
  const ffi::AnyBuffer* parts[1] = {&part};
  return pad_pack<1>(stream, parts, source, position, packed);
}

ffi::Error PadPack3Cuda(cudaStream_t stream, ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                        ffi::AnyBuffer source, ffi::AnyBuffer position, ffi::Result<ffi::AnyBuffer> packed) {
  const ffi::AnyBuffer* parts[3] = {&q, &k, &v};
  return pad_pack<3>(stream, parts, source, position, packed);
}

}  // namespace

#define JN_CUDA_BIND ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormPadOffsetsCuda, PadOffsetsCuda, pad_offsets_signature(JN_CUDA_BIND),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormPadUnpackCuda, PadUnpack1Cuda, pad_unpack_signature<1>(JN_CUDA_BIND),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormPadUnpack3Cuda, PadUnpackCuda<3>, pad_unpack_signature<3>(JN_CUDA_BIND),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormPadPackCuda, PadPack1Cuda, pad_pack_signature<1>(JN_CUDA_BIND),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormPadPack3Cuda, PadPack3Cuda, pad_pack_signature<3>(JN_CUDA_BIND),
                              {ffi::Traits::kCmdBufferCompatible});
#undef JN_CUDA_BIND

}  // namespace jaxnorm

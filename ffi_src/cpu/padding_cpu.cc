// Padding removal CPU handlers: the maps by one sequential scan, the copies as memcpy of whole
// head_dim segments (bias added in float), segments spread over XLA's intra-op thread pool.
#include <algorithm>
#include <cstring>

#include "common/signatures.h"
#include "cpu/host_float.h"
#include "cpu/parallel_chunks.h"
#include "cpu/prefault.h"

namespace jaxnorm {
namespace {

ffi::Error PadOffsetsCpu(ffi::AnyBuffer lengths, ffi::Result<ffi::AnyBuffer> source,
                         ffi::Result<ffi::AnyBuffer> position, ffi::Result<ffi::AnyBuffer> starts,
                         ffi::Result<ffi::AnyBuffer> counts) {
  PadOffsetsArgs a;
  JN_RETURN_IF_ERROR(pad_offsets_args(lengths, source, position, starts, counts, &a));
  int64_t next = 0;  // unclamped: the tokens before sequence b
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t len = std::clamp<int64_t>(a.lengths[b], 0, a.max_len);
    a.starts[b] = static_cast<int32_t>(std::min(next, a.capacity));
    for (int64_t l = 0; l < a.max_len; ++l) {
      const int64_t row = next + l;
      const bool kept = l < len && row < a.capacity;
      a.position[b * a.max_len + l] = kept ? static_cast<int32_t>(row) : -1;
      if (kept) a.source[row] = static_cast<int32_t>(b * a.max_len + l);
    }
    next += len;
  }
  for (int64_t t = std::min(next, a.capacity); t < a.capacity; ++t) a.source[t] = -1;
  a.counts[0] = static_cast<int32_t>(std::min(next, a.capacity));
  a.counts[1] = static_cast<int32_t>(next - a.counts[0]);
  return ffi::Error::Success();
}

// Adds the bias to one head_dim segment of T in float (the no-bias copy is a memcpy of the
// segment's bytes, whatever the dtype).
template <class T>
void add_bias_segment(const char* src, const float* bias, char* dst, int64_t n) {
  const T* s = reinterpret_cast<const T*>(src);
  T* d = reinterpret_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = from_float<T>(to_float(s[i]) + bias[i]);
}

using BiasFn = void (*)(const char*, const float*, char*, int64_t);

ffi::Error bias_fn(const ffi::AnyBuffer& x, BiasFn* fn) {
  return dispatch_float<CpuTypes>(x.element_type(), "packed (with a bias)", [&](auto tag) {
    *fn = add_bias_segment<typename decltype(tag)::type>;
    return ffi::Error::Success();
  });
}

// Segments per chunk: about 64K elements.
int64_t grain(const PadLayout& l) { return chunk_rows(l.head_dim); }

template <int P>
ffi::Error PadUnpackCpu(ffi::ThreadPool pool, ffi::AnyBuffer packed, ffi::AnyBuffer bias, ffi::AnyBuffer position,
                        ffi::AnyBuffer source, ffi::Result<ffi::AnyBuffer> out0, ffi::Result<ffi::AnyBuffer> out1,
                        ffi::Result<ffi::AnyBuffer> out2, int64_t heads) {
  PadLayout l;
  JN_RETURN_IF_ERROR(pad_unpack_layout(P, packed, bias, position, source, heads, &l));
  BiasFn add_bias = nullptr;
  if (l.bias) JN_RETURN_IF_ERROR(bias_fn(packed, &add_bias));
  char* outs[3] = {static_cast<char*>(out0->untyped_data()), P == 3 ? static_cast<char*>(out1->untyped_data()) : nullptr,
                   P == 3 ? static_cast<char*>(out2->untyped_data()) : nullptr};
  const char* in = static_cast<const char*>(packed.untyped_data());
  const int64_t seg_bytes = l.head_dim * l.elem_bytes, n = l.padded_segments();
  // Outputs the size of the padded batch are usually fresh pages (prefault.h).
  const OutputPrefault prefault[3] = {OutputPrefault(outs[0], n * seg_bytes),
                                      OutputPrefault(outs[1], P == 3 ? n * seg_bytes : 0),
                                      OutputPrefault(outs[2], P == 3 ? n * seg_bytes : 0)};
  parallel_chunks(pool, n, grain(l), [&](int64_t, int64_t begin, int64_t end) {
    for (int p = 0; p < P; ++p) prefault[p].chunk(outs[p] + begin * seg_bytes, (end - begin) * seg_bytes);
    for (int64_t s = begin; s < end; ++s) {  // s = (b * H + h) * L + pos_in_seq
      const int64_t t = s % l.max_len, bh = s / l.max_len, h = bh % l.heads, b = bh / l.heads;
      const int32_t row = l.position[b * l.max_len + t];
      for (int p = 0; p < P; ++p) {
        char* dst = outs[p] + s * seg_bytes;
        if (row < 0 || row >= l.capacity) {  // padding, or a hand-built map's stray value
          std::memset(dst, 0, seg_bytes);
          continue;
        }
        const int64_t col = (p * l.heads + h) * l.head_dim;
        const char* src = in + (row * l.width() + col) * l.elem_bytes;
        if (add_bias) {
          add_bias(src, l.bias + col, dst, l.head_dim);
        } else {
          std::memcpy(dst, src, seg_bytes);
        }
      }
    }
  });
  return ffi::Error::Success();
}

ffi::Error PadUnpack1Cpu(ffi::ThreadPool pool, ffi::AnyBuffer packed, ffi::AnyBuffer bias, ffi::AnyBuffer position,
                         ffi::AnyBuffer source, ffi::Result<ffi::AnyBuffer> out, int64_t heads) {
  return PadUnpackCpu<1>(pool, packed, bias, position, source, out, out, out, heads);
}

template <int P>
ffi::Error PadPackCpu(ffi::ThreadPool pool, const ffi::AnyBuffer* const* parts, const ffi::AnyBuffer& source,
                      const ffi::AnyBuffer& position, ffi::Result<ffi::AnyBuffer>& packed) {
  PadLayout l;
  JN_RETURN_IF_ERROR(pad_pack_layout(parts, P, source, position, *packed, &l));
  char* out = static_cast<char*>(packed->untyped_data());
  const int64_t seg_bytes = l.head_dim * l.elem_bytes, segs_per_row = P * l.heads;
  const OutputPrefault prefault(out, l.capacity * segs_per_row * seg_bytes);  // usually fresh pages
  parallel_chunks(pool, l.capacity * segs_per_row, grain(l), [&](int64_t, int64_t begin, int64_t end) {
    prefault.chunk(out + begin * seg_bytes, (end - begin) * seg_bytes);
    for (int64_t s = begin; s < end; ++s) {  // s = row * P * H + p * H + h
      const int64_t row = s / segs_per_row, ph = s % segs_per_row, p = ph / l.heads, h = ph % l.heads;
      const int32_t src = l.source[row];
      char* dst = out + s * seg_bytes;
      if (src < 0 || src >= l.batch * l.max_len) {  // padding, or a hand-built map's stray value
        std::memset(dst, 0, seg_bytes);
        continue;
      }
      const int64_t b = src / l.max_len, t = src % l.max_len;
      const char* in = static_cast<const char*>(parts[p]->untyped_data());
      std::memcpy(dst, in + ((b * l.heads + h) * l.max_len + t) * seg_bytes, seg_bytes);
    }
  });
  return ffi::Error::Success();
}

ffi::Error PadPack1Cpu(ffi::ThreadPool pool, ffi::AnyBuffer part, ffi::AnyBuffer source, ffi::AnyBuffer position,
                       ffi::Result<ffi::AnyBuffer> packed) {
  const ffi::AnyBuffer* parts[1] = {&part};
  return PadPackCpu<1>(pool, parts, source, position, packed);
}

ffi::Error PadPack3Cpu(ffi::ThreadPool pool, ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                       ffi::AnyBuffer source, ffi::AnyBuffer position, ffi::Result<ffi::AnyBuffer> packed) {
  const ffi::AnyBuffer* parts[3] = {&q, &k, &v};
  return PadPackCpu<3>(pool, parts, source, position, packed);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormPadOffsetsCpu, PadOffsetsCpu, pad_offsets_signature(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormPadUnpackCpu, PadUnpack1Cpu,
                              pad_unpack_signature<1>(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormPadUnpack3Cpu, PadUnpackCpu<3>,
                              pad_unpack_signature<3>(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormPadPackCpu, PadPack1Cpu,
                              pad_pack_signature<1>(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormPadPack3Cpu, PadPack3Cpu,
                              pad_pack_signature<3>(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

}  // namespace jaxnorm

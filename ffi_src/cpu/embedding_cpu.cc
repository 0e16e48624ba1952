// Embedding lookup + position encoding CPU handlers: the forward one token row at a time, the
// table gradient as sums over runs of sorted ids. Plain float32 arithmetic (sinf/cosf of libm),
// work spread over XLA's intra-op thread pool in chunks fixed by the shape.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/embedding_args.h"
#include "common/signatures.h"
#include "cpu/host_float.h"
#include "cpu/parallel_chunks.h"
#include "cpu/prefault.h"

namespace jaxnorm {
namespace {

template <class T>
void embed_tokens(const EmbedFwdArgs& a, int64_t begin, int64_t end) {
  const T* table = static_cast<const T*>(a.table);
  const T* pos_table = static_cast<const T*>(a.pos_table);
  T* out = static_cast<T*>(a.out);
  const int64_t d = a.dim, half = d / 2;
  for (int64_t t = begin; t < end; ++t) {
    const int64_t id = std::clamp<int64_t>(a.ids[t], 0, a.vocab - 1);
    const T* row = table + id * d;
    T* o = out + t * d;
    if (pos_table) {
      const T* pe = pos_table + std::clamp<int64_t>(a.positions[t], 0, a.max_pos - 1) * d;
      for (int64_t c = 0; c < d; ++c) o[c] = from_float<T>(to_float(row[c]) * a.scale + to_float(pe[c]));
    } else {
      const float pos = static_cast<float>(a.positions[t]);
      for (int64_t c = 0; c < half; ++c) {
        const float angle = pos * a.inv_timescales[c];
        o[c] = from_float<T>(to_float(row[c]) * a.scale + std::sin(angle));
        o[c + half] = from_float<T>(to_float(row[c + half]) * a.scale + std::cos(angle));
      }
    }
  }
}

ffi::Error EmbedFwdCpu(ffi::ThreadPool pool, ffi::AnyBuffer ids, ffi::AnyBuffer positions, ffi::AnyBuffer table,
                       ffi::AnyBuffer pos_table, ffi::AnyBuffer inv, ffi::Result<ffi::AnyBuffer> out, float scale,
                       bool has_pos_table) {
  EmbedFwdArgs a;
  JN_RETURN_IF_ERROR(embed_fwd_args(ids, positions, table, pos_table, inv, *out, scale, has_pos_table, &a));
  if (a.tokens == 0 || a.dim == 0) return ffi::Error::Success();
  return dispatch_float<CpuTypes>(table.element_type(), "table", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = static_cast<T*>(a.out);
    const OutputPrefault prefault(out, a.tokens * a.dim * sizeof(T));  // usually fresh pages
    parallel_chunks(pool, a.tokens, chunk_rows(a.dim), [&](int64_t, int64_t begin, int64_t end) {
      prefault.chunk(out + begin * a.dim, (end - begin) * a.dim * sizeof(T));
      embed_tokens<T>(a, begin, end);
    });
    return ffi::Error::Success();
  });
}

// Rows [begin, end) of the gradient: each row's run of sorted ids summed in sorted order.
template <class T>
void segment_rows(const EmbedBwdArgs& a, int64_t begin, int64_t end, std::vector<float>& acc) {
  const T* dout = static_cast<const T*>(a.dout);
  T* g = static_cast<T*>(a.dtable);
  const int64_t d = a.dim;
  const int32_t* s = a.sorted;
  int64_t j = std::lower_bound(s, s + a.tokens, static_cast<int32_t>(begin)) - s;
  for (int64_t v = begin; v < end; ++v) {
    T* o = g + v * d;
    if (j >= a.tokens || s[j] != v) {
      std::memset(o, 0, static_cast<size_t>(d) * sizeof(T));  // +0.0 in every float format
      continue;
    }
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (; j < a.tokens && s[j] == v; ++j) {
      const T* r = dout + static_cast<int64_t>(a.order[j]) * d;
      for (int64_t c = 0; c < d; ++c) acc[c] += to_float(r[c]) * a.scale;
    }
    for (int64_t c = 0; c < d; ++c) o[c] = from_float<T>(acc[c]);
  }
}

ffi::Error EmbedBwdCpu(ffi::ThreadPool pool, ffi::AnyBuffer dout, ffi::AnyBuffer order, ffi::AnyBuffer sorted,
                       ffi::Result<ffi::AnyBuffer> dtable, float scale) {
  EmbedBwdArgs a;
  JN_RETURN_IF_ERROR(embed_bwd_args(dout, order, sorted, *dtable, scale, &a));
  if (a.rows == 0 || a.dim == 0) return ffi::Error::Success();
  return dispatch_float<CpuTypes>(dout.element_type(), "dout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* g = static_cast<T*>(a.dtable);
    const OutputPrefault prefault(g, a.rows * a.dim * sizeof(T));  // usually fresh pages
    parallel_chunks(pool, a.rows, chunk_rows(a.dim), [&](int64_t, int64_t begin, int64_t end) {
      prefault.chunk(g + begin * a.dim, (end - begin) * a.dim * sizeof(T));
      std::vector<float> acc(static_cast<size_t>(a.dim));
      segment_rows<T>(a, begin, end, acc);
    });
    return ffi::Error::Success();
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormEmbedFwdCpu, EmbedFwdCpu, embed_fwd_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormEmbedBwdCpu, EmbedBwdCpu, embed_bwd_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

}  // namespace jaxnorm

// The embedding family's operands, checked once for both platforms (layouts in signatures.h).
#pragma once

#include <cstdint>
#include <string>

#include "common/ffi_util.h"

namespace jaxnorm {

// embed_fwd: out[t] = table[clamp(ids[t], 0, vocab - 1)] * scale + PE(t), in float32, rounded
// once; PE(t) = pos_table[clamp(positions[t], 0, max_pos - 1)] when max_pos > 0, else the sine
// encoding [sin(p * inv[i]) for i < D/2, cos(p * inv[i]) for i < D/2] with p = float(positions[t]).
struct EmbedFwdArgs {
  int64_t tokens = 0, vocab = 0, dim = 0, max_pos = 0;  // max_pos 0: the computed encoding
  const int32_t* ids = nullptr;
  const int32_t* positions = nullptr;
  const void* table = nullptr;
  const void* pos_table = nullptr;
  const float* inv_timescales = nullptr;  // (dim / 2)
  void* out = nullptr;
  float scale = 1.0f;
};

inline ffi::Error embed_fwd_args(const ffi::AnyBuffer& ids, const ffi::AnyBuffer& positions,
                                 const ffi::AnyBuffer& table, const ffi::AnyBuffer& pos_table,
                                 const ffi::AnyBuffer& inv, const ffi::AnyBuffer& out, float scale,
                                 bool has_pos_table, EmbedFwdArgs* a) {
  JN_RETURN_IF_ERROR(check_dtype(ids, ffi::DataType::S32, "ids"));
  JN_RETURN_IF_ERROR(check_dtype(positions, ffi::DataType::S32, "positions"));
  a->tokens = static_cast<int64_t>(ids.element_count());
  JN_RETURN_IF_ERROR(check_size(positions, a->tokens, "positions"));
  Rows t;
  JN_RETURN_IF_ERROR(rows_of(table, "table", &t));
  a->vocab = t.rows;
  a->dim = t.cols;
  if (a->dim % 2 != 0 || (a->tokens > 0 && a->vocab < 1) || a->tokens >= (int64_t{1} << 31) ||
      a->vocab >= (int64_t{1} << 31)) {
    return ffi::Error::InvalidArgument("jaxnorm: embed_with_position needs an even width, a non-empty table, "
                                       "and fewer than 2^31 tokens and table rows");
  }
  if (out.element_type() != table.element_type()) {
    return ffi::Error::InvalidArgument("jaxnorm: embed_with_position: out must have the table's dtype");
  }
  JN_RETURN_IF_ERROR(check_size(out, a->tokens * a->dim, "out"));
  if (has_pos_table) {
    Rows p;
    JN_RETURN_IF_ERROR(rows_of(pos_table, "pos_table", &p));
    if (p.cols != a->dim || p.rows < 1 || p.rows >= (int64_t{1} << 31) ||
        pos_table.element_type() != table.element_type()) {
      return ffi::Error::InvalidArgument("jaxnorm: pos_table must be (max_pos >= 1, d) of the table's dtype");
    }
    a->max_pos = p.rows;
    a->pos_table = pos_table.untyped_data();
  } else {
    JN_RETURN_IF_ERROR(check_dtype(inv, ffi::DataType::F32, "inv_timescales"));
    JN_RETURN_IF_ERROR(check_size(inv, a->dim / 2, "inv_timescales"));
    a->inv_timescales = static_cast<const float*>(inv.untyped_data());
  }
  a->ids = static_cast<const int32_t*>(ids.untyped_data());
  a->positions = static_cast<const int32_t*>(positions.untyped_data());
  a->table = table.untyped_data();
  a->out = out.untyped_data();
  a->scale = scale;
  return ffi::Error::Success();
}

// embed_bwd: sorted (N) ascending indices in [0, rows), order (N) the permutation that sorted them
// (stably); dtable[v] = sum over j of the run sorted[j] == v, in increasing j, of
// dout[order[j]] * scale (float32, rounded once); zero rows where v does not occur.
struct EmbedBwdArgs {
  int64_t tokens = 0, rows = 0, dim = 0;
  const void* dout = nullptr;
  const int32_t* order = nullptr;
  const int32_t* sorted = nullptr;
  void* dtable = nullptr;
  float scale = 1.0f;
  int64_t elem_bytes = 0;
};

inline ffi::Error embed_bwd_args(const ffi::AnyBuffer& dout, const ffi::AnyBuffer& order,
                                 const ffi::AnyBuffer& sorted, const ffi::AnyBuffer& dtable, float scale,
                                 EmbedBwdArgs* a) {
  Rows d, g;
  JN_RETURN_IF_ERROR(rows_of(dout, "dout", &d));
  JN_RETURN_IF_ERROR(rows_of(dtable, "dtable", &g));
  JN_RETURN_IF_ERROR(check_dtype(order, ffi::DataType::S32, "order"));
  JN_RETURN_IF_ERROR(check_dtype(sorted, ffi::DataType::S32, "sorted ids"));
  JN_RETURN_IF_ERROR(check_size(order, d.rows, "order"));
  JN_RETURN_IF_ERROR(check_size(sorted, d.rows, "sorted ids"));
  if (g.cols != d.cols || dtable.element_type() != dout.element_type() || d.rows >= (int64_t{1} << 31) ||
      g.rows >= (int64_t{1} << 31)) {
    return ffi::Error::InvalidArgument("jaxnorm: embed_with_position's gradient must be (rows, d) of dout's dtype, "
                                       "with fewer than 2^31 tokens and rows");
  }
  a->tokens = d.rows;
  a->rows = g.rows;
  a->dim = d.cols;
  a->dout = dout.untyped_data();
  a->order = static_cast<const int32_t*>(order.untyped_data());
  a->sorted = static_cast<const int32_t*>(sorted.untyped_data());
  a->dtable = dtable.untyped_data();
  a->scale = scale;
  a->elem_bytes = static_cast<int64_t>(ffi::ByteWidth(dout.element_type()));
  return ffi::Error::Success();
}

}  // namespace jaxnorm

// The FFI signatures of jaxnorm's handlers, shared by the CPU and CUDA registrations so the two
// platforms can never disagree on operand order or attribute names. Each function appends the
// operands, results and attributes to a binding that already holds the platform's context.
//
// Layouts (the Python primitives in jaxnorm/_ops.py build exactly these):
//   norm_fwd:    x (R, C), scale (C | 0) f32, bias (C | 0) f32
//                -> y (R, C), mean (R) f32, rstd (R) f32
//   norm_bwd:    xin (R, C) [x, or y when memory_efficient], dy (R, C), mean (R), rstd (R),
//                scale (C | 0) f32, bias (C | 0) f32
//                -> dx (R, C), dscale (G, C) f32, dbias (G, C) f32, workspace (G, P, 2, C) f32
//                   G = independent row groups (vmap folds its axis into rows and groups)
//   add_norm_fwd: x (R, C), residual (R, C) [x's dtype or h's], scale (C | 0) f32, bias (C | 0) f32
//                -> y (R, C) [x's dtype], h = x + residual (R, C) [x's dtype or f32], mean (R) f32,
//                   rstd (R) f32; attributes as norm_fwd
//   add_norm_bwd: hin (R, C) [h, or y when memory_efficient], dy (R, C) [y's dtype],
//                dh (R, C | 0) [h's dtype; absent unless has_dh], mean (R), rstd (R),
//                scale (C | 0) f32, bias (C | 0) f32
//                -> dx (R, C) [h's dtype] = norm_bwd's dx + dh, dscale (G, C) f32, dbias (G, C) f32,
//                   workspace (G, P, 2, C) f32; attributes as norm_bwd, and has_dh
//   softmax_fwd: x (R, C), mask (R, C | 0) pred -> y (R, C)
//   softmax_bwd: y (R, C), dy (R, C), mask (R, C | 0) pred -> dx (R, C)
//   sample:      logits (R, V), keys (G, W) u32, temperature (P) f32, top_k (P) s32, top_p (P) f32,
//                log_min_p (P) f32 -> tokens (R) s32   [kept for artifacts before FFI version 4]
//   sample_v2:   sample's operands, then bias (V | 0) f32, finished (P | 0) pred, end_id (P | 0) s32
//                -> tokens (R) s32; the logits are read as logits + bias, and a finished row
//                returns its end_id (as given) without drawing
//   filter:      logits (R, V), top_k (P) s32, top_p (P) f32, log_min_p (P) f32 -> filtered (R, V)
//                [kept for artifacts before FFI version 4]
//   filter_v2:   filter's operands, then bias (V | 0) f32 -> filtered (R, V): logits + bias rounded
//                to the logits' dtype where kept
//   top_k:       x (R, V) -> indices (R, k) s32; attribute k
//   pad_offsets: lengths (B) s32 -> source (T) s32, position (B, L) s32, starts (B) s32,
//                counts (2) s32 = (tokens kept, tokens dropped)
//   pad_unpack, pad_unpack3 (P = 1, 3 parts):
//                packed (T, W), bias (W | 0) f32, position (B, L) s32, source (T) s32
//                -> P parts (B, H, L, D), W = P * H * D; attribute heads (H)
//   pad_pack, pad_pack3:
//                P parts (B, H, L, D), source (T) s32, position (B, L) s32 -> packed (T, P * H * D)
//                source[t] = b * L + l, the padded position of packed row t, or -1 (a zero row);
//                position[b, l] = the packed row of (b, l), or -1 (padding, zeros).
//                Each copy takes both maps so that its transpose (the other copy) has the one
//                it needs; it reads only its own.
//                "Grouped" operands (keys and the per-row parameters, each its own G or P) have a
//                first dimension dividing R: row r reads entry r / (R / G), so one entry serves
//                every row and vmap folds a batch axis into them as into the rows.
//   embed_fwd:   ids (N) s32, positions (N) s32, table (V, D), pos_table (P, D | 0) [table's dtype],
//                inv_timescales (D/2 | 0) f32 -> out (N, D) [table's dtype]; attributes scale,
//                has_pos_table (common/embedding_args.h states the arithmetic)
//   embed_bwd:   dout (N, D), order (N) s32, sorted ids (N) s32 -> dtable (rows, D) [dout's dtype];
//                attribute scale: per row, the scaled sum of its run of sorted ids, in sorted order
//   cross_entropy_fwd: logits (R, C), labels (R) s32, mask (R, C | 0) pred
//                -> loss (R) f32, stats (R, 2) f32 = (lse, kept classes)
//   cross_entropy_fwd_v2: the same plus a workspace result, partials (R, K, 4) f32
//   cross_entropy_bwd: logits (R, C), labels (R) s32, stats (R, 2) f32, dloss (R) f32,
//                mask (R, C | 0) pred -> dlogits (R, C)
//   cross_entropy_fwd_grad: logits (R, C), labels (R) s32, mask (R, C | 0) pred, weight (R) f32
//                -> loss (R) f32, dlogits (R, C) = weight * dloss/dlogits, workspace stats
//                (R, 2) f32 and partials (R, K, 4) f32
//                all four with attributes label_smoothing, z_loss, ignore_index, has_mask
//                (common/cross_entropy_math.h states the arithmetic)
#pragma once

#include <utility>

#include "common/ffi_util.h"
#include "common/sampling_math.h"

namespace jaxnorm {

// N more AnyBuffer operands or results (N >= 1). A Binding cannot be moved: it is taken by
// reference and each step returns the next one as a prvalue (so N == 1 ends the recursion).
template <int N, class B>
auto buffer_args(B&& b) {
  if constexpr (N == 1) {
    return std::move(b).template Arg<ffi::AnyBuffer>();
  } else {
    return buffer_args<N - 1>(std::move(b).template Arg<ffi::AnyBuffer>());
  }
}

template <int N, class B>
auto buffer_rets(B&& b) {
  if constexpr (N == 1) {
    return std::move(b).template Ret<ffi::AnyBuffer>();
  } else {
    return buffer_rets<N - 1>(std::move(b).template Ret<ffi::AnyBuffer>());
  }
}

// The attributes of every norm target.
template <class B>
auto norm_attrs(B&& b) {
  return std::move(b).template Attr<float>("epsilon")
      .template Attr<bool>("centered")
      .template Attr<bool>("has_scale")
      .template Attr<bool>("has_bias");
}

template <class B>
auto norm_fwd_signature(B b) {
  return norm_attrs(buffer_rets<3>(buffer_args<3>(std::move(b))));
}

template <class B>
auto norm_bwd_signature(B b) {
  return norm_attrs(buffer_rets<4>(buffer_args<6>(std::move(b)))).template Attr<bool>("memory_efficient");
}

template <class B>
auto add_norm_fwd_signature(B b) {
  return norm_attrs(buffer_rets<4>(buffer_args<4>(std::move(b))));
}

template <class B>
auto add_norm_bwd_signature(B b) {
  return norm_attrs(buffer_rets<4>(buffer_args<7>(std::move(b))))
      .template Attr<bool>("memory_efficient")
      .template Attr<bool>("has_dh");
}

template <class B>
auto softmax_fwd_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Attr<bool>("log")
      .template Attr<bool>("has_mask");
}

template <class B>
auto softmax_bwd_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Attr<bool>("log")
      .template Attr<bool>("has_mask");
}

// The operands the first sampling targets take (logits, keys, temperature, top_k, top_p,
// log_min_p; filter: logits, top_k, top_p, log_min_p); the v2 targets append theirs after them.
template <class B>
auto sample_operands(B&& b) {  // by reference: a Binding cannot be moved into a parameter
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>();
}

template <class B>
auto filter_operands(B&& b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>();
}

template <class B>
auto sample_signature(B b) {
  return sample_operands(std::move(b)).template Ret<ffi::AnyBuffer>();
}

template <class B>
auto sample_v2_signature(B b) {  // + bias, finished, end_id
  return sample_operands(std::move(b))
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>();
}

template <class B>
auto filter_signature(B b) {
  return filter_operands(std::move(b)).template Ret<ffi::AnyBuffer>();
}

template <class B>
auto filter_v2_signature(B b) {  // + bias
  return filter_operands(std::move(b)).template Arg<ffi::AnyBuffer>().template Ret<ffi::AnyBuffer>();
}

template <class B>
auto top_k_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>().template Ret<ffi::AnyBuffer>().template Attr<int64_t>("k");
}

template <class B>
auto pad_offsets_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>();
}

template <int P, class B>
auto pad_unpack_signature(B b) {
  auto args = std::move(b).template Arg<ffi::AnyBuffer>()
                  .template Arg<ffi::AnyBuffer>()
                  .template Arg<ffi::AnyBuffer>()
                  .template Arg<ffi::AnyBuffer>()
                  .template Ret<ffi::AnyBuffer>();
  if constexpr (P == 3) {
    return std::move(args).template Ret<ffi::AnyBuffer>().template Ret<ffi::AnyBuffer>().template Attr<int64_t>("heads");
  } else {
    return std::move(args).template Attr<int64_t>("heads");
  }
}

template <int P, class B>
auto pad_pack_signature(B b) {
  auto parts = std::move(b).template Arg<ffi::AnyBuffer>();
  if constexpr (P == 3) {
    return std::move(parts).template Arg<ffi::AnyBuffer>()
        .template Arg<ffi::AnyBuffer>()
        .template Arg<ffi::AnyBuffer>()
        .template Arg<ffi::AnyBuffer>()
        .template Ret<ffi::AnyBuffer>();
  } else {
    return std::move(parts).template Arg<ffi::AnyBuffer>().template Arg<ffi::AnyBuffer>().template Ret<ffi::AnyBuffer>();
  }
}

// decode_attention (Append: k_new, v_new after lengths; the caches as results, aliased):
//   q, k_cache, v_cache, lengths [, k_new, v_new] -> out [, k_cache, v_cache], partials;
//   layout and workspace in common/decode_args.h.
template <bool Append, class B>
auto decode_attention_signature(B b) {
  auto ins = std::move(b).template Arg<ffi::AnyBuffer>()
                 .template Arg<ffi::AnyBuffer>()
                 .template Arg<ffi::AnyBuffer>()
                 .template Arg<ffi::AnyBuffer>();
  auto attrs = [](auto outs) {
    return std::move(outs).template Attr<float>("scale").template Attr<int64_t>("splits").template Attr<bool>("blhd");
  };
  if constexpr (Append) {
    return attrs(std::move(ins).template Arg<ffi::AnyBuffer>()
                     .template Arg<ffi::AnyBuffer>()
                     .template Ret<ffi::AnyBuffer>()
                     .template Ret<ffi::AnyBuffer>()
                     .template Ret<ffi::AnyBuffer>()
                     .template Ret<ffi::AnyBuffer>());
  } else {
    return attrs(std::move(ins).template Ret<ffi::AnyBuffer>().template Ret<ffi::AnyBuffer>());
  }
}

// linear_attention: a, b, c [, alpha, beta (f32) when Rank1] -> out, den (f32), workspace (f32);
// see common/linear_attention_args.h.
template <bool Rank1, class B>
auto linear_attention_signature(B b) {
  auto outs = [](auto in) {
    return std::move(in).template Ret<ffi::AnyBuffer>()
        .template Ret<ffi::AnyBuffer>()
        .template Ret<ffi::AnyBuffer>()
        .template Attr<bool>("normalize")
        .template Attr<float>("eps")
        .template Attr<bool>("reverse")
        .template Attr<bool>("f32_out")
        .template Attr<int64_t>("parts");
  };
  auto ins = std::move(b).template Arg<ffi::AnyBuffer>().template Arg<ffi::AnyBuffer>();
  if constexpr (Rank1) {
    return outs(std::move(ins).template Arg<ffi::AnyBuffer>().template Arg<ffi::AnyBuffer>().template Arg<ffi::AnyBuffer>());
  } else {
    return outs(std::move(ins).template Arg<ffi::AnyBuffer>());
  }
}

template <class B>
auto embed_fwd_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Attr<float>("scale")
      .template Attr<bool>("has_pos_table");
}

template <class B>
auto embed_bwd_signature(B b) {
  return std::move(b).template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Arg<ffi::AnyBuffer>()
      .template Ret<ffi::AnyBuffer>()
      .template Attr<float>("scale");
}

template <class B>
auto cross_entropy_attrs(B b) {
  return std::move(b).template Attr<float>("label_smoothing")
      .template Attr<float>("z_loss")
      .template Attr<int64_t>("ignore_index")
      .template Attr<bool>("has_mask");
}

template <class B>
auto cross_entropy_fwd_signature(B b) {
  return cross_entropy_attrs(buffer_rets<2>(buffer_args<3>(std::move(b))));
}

// Version 2 adds a workspace result: the partial statistics of the chunks of wide rows, (rows,
// chunks, 4) f32, the chunk count chosen by the lowering (0: rows are not split).
template <class B>
auto cross_entropy_fwd_v2_signature(B b) {
  return cross_entropy_attrs(buffer_rets<3>(buffer_args<3>(std::move(b))));
}

template <class B>
auto cross_entropy_bwd_signature(B b) {
  return cross_entropy_attrs(buffer_rets<1>(buffer_args<5>(std::move(b))));
}

// The reduced losses' forward and gradient in one: logits, labels, mask, weight (R) f32 ->
// loss (R) f32, dlogits (R, C) = weight * d loss / d logits, and two workspace results for rows
// the handler takes by the forward and backward kernels: stats (R, 2) f32, partials (R, K, 4).
template <class B>
auto cross_entropy_fwd_grad_signature(B b) {
  return cross_entropy_attrs(buffer_rets<4>(buffer_args<4>(std::move(b))));
}

// The shapes one padding copy moves between: P parts (B, H, L, D) <-> packed (T, P * H * D), of
// elements of `elem_bytes`; `bias` (P * H * D floats) only when unpacking with one.
struct PadLayout {
  int64_t parts = 1, batch = 0, heads = 1, max_len = 0, head_dim = 0, capacity = 0, elem_bytes = 0;
  const int32_t* source = nullptr;    // (T)
  const int32_t* position = nullptr;  // (B, L)
  const float* bias = nullptr;
  int64_t width() const { return parts * heads * head_dim; }
  int64_t padded_segments() const { return batch * heads * max_len; }  // per part
};

inline ffi::Error pad_maps(const ffi::AnyBuffer& position, const ffi::AnyBuffer& source, PadLayout* l) {
  JN_RETURN_IF_ERROR(check_dtype(position, ffi::DataType::S32, "position"));
  JN_RETURN_IF_ERROR(check_dtype(source, ffi::DataType::S32, "source"));
  Rows pos;
  JN_RETURN_IF_ERROR(rows_of(position, "position", &pos));
  l->batch = pos.rows;
  l->max_len = pos.cols;
  l->capacity = static_cast<int64_t>(source.element_count());
  l->position = static_cast<const int32_t*>(position.untyped_data());
  l->source = static_cast<const int32_t*>(source.untyped_data());
  return ffi::Error::Success();
}

// A (B, H, L, D) part of `like`'s dtype matching the maps' B and L.
inline ffi::Error pad_part(const ffi::AnyBuffer& part, const ffi::AnyBuffer& like, PadLayout* l) {
  auto d = part.dimensions();
  if (d.size() != 4 || d[0] != l->batch || d[2] != l->max_len || part.element_type() != like.element_type()) {
    return ffi::Error::InvalidArgument("jaxnorm: padding parts must be (batch, heads, max_len, head_dim) of one dtype");
  }
  l->heads = d[1];
  l->head_dim = d[3];
  l->elem_bytes = static_cast<int64_t>(ffi::ByteWidth(part.element_type()));
  return ffi::Error::Success();
}

inline ffi::Error pad_unpack_layout(int parts, const ffi::AnyBuffer& packed, const ffi::AnyBuffer& bias,
                                    const ffi::AnyBuffer& position, const ffi::AnyBuffer& source, int64_t heads,
                                    PadLayout* l) {
  JN_RETURN_IF_ERROR(pad_maps(position, source, l));
  Rows p;
  JN_RETURN_IF_ERROR(rows_of(packed, "packed", &p));
  l->parts = parts;
  l->heads = heads;
  if (p.rows != l->capacity || heads < 1 || p.cols % (parts * heads) != 0) {
    return ffi::Error::InvalidArgument("jaxnorm: packed rows must be (capacity, parts * heads * head_dim)");
  }
  l->head_dim = p.cols / (parts * heads);
  l->elem_bytes = static_cast<int64_t>(ffi::ByteWidth(packed.element_type()));
  if (bias.element_count() != 0) {
    JN_RETURN_IF_ERROR(check_dtype(bias, ffi::DataType::F32, "bias"));
    JN_RETURN_IF_ERROR(check_size(bias, p.cols, "bias"));
    l->bias = static_cast<const float*>(bias.untyped_data());
  }
  return ffi::Error::Success();
}

// The packing direction's layout: P parts of one shape, the result (T, P * H * D).
inline ffi::Error pad_pack_layout(const ffi::AnyBuffer* const* parts, int n_parts, const ffi::AnyBuffer& source,
                                  const ffi::AnyBuffer& position, const ffi::AnyBuffer& packed, PadLayout* l) {
  JN_RETURN_IF_ERROR(pad_maps(position, source, l));
  l->parts = n_parts;
  JN_RETURN_IF_ERROR(pad_part(*parts[0], *parts[0], l));
  for (int p = 1; p < n_parts; ++p) {
    PadLayout q = *l;
    JN_RETURN_IF_ERROR(pad_part(*parts[p], *parts[0], &q));
    if (q.heads != l->heads || q.head_dim != l->head_dim) {
      return ffi::Error::InvalidArgument("jaxnorm: padding parts must share one shape");
    }
  }
  return check_size(packed, l->capacity * l->width(), "packed");
}

// Every offsets handler's work: lengths clamped to [0, L], their exclusive prefix sums in
// `starts` (clamped to the capacity), the maps, and (tokens kept, tokens dropped).
struct PadOffsetsArgs {
  int64_t batch = 0, max_len = 0, capacity = 0;
  const int32_t* lengths = nullptr;
  int32_t *source = nullptr, *position = nullptr, *starts = nullptr, *counts = nullptr;
};

inline ffi::Error pad_offsets_args(const ffi::AnyBuffer& lengths, ffi::Result<ffi::AnyBuffer>& source,
                                   ffi::Result<ffi::AnyBuffer>& position, ffi::Result<ffi::AnyBuffer>& starts,
                                   ffi::Result<ffi::AnyBuffer>& counts, PadOffsetsArgs* a) {
  JN_RETURN_IF_ERROR(check_dtype(lengths, ffi::DataType::S32, "lengths"));
  Rows pos;
  JN_RETURN_IF_ERROR(rows_of(*position, "position", &pos));
  a->batch = static_cast<int64_t>(lengths.element_count());
  a->max_len = pos.cols;
  a->capacity = static_cast<int64_t>(source->element_count());
  if (pos.rows != a->batch || a->batch * a->max_len >= (int64_t{1} << 31) || a->capacity >= (int64_t{1} << 31)) {
    return ffi::Error::InvalidArgument("jaxnorm: padding_offsets needs batch * max_len and capacity below 2^31");
  }
  a->lengths = static_cast<const int32_t*>(lengths.untyped_data());
  a->source = static_cast<int32_t*>(source->untyped_data());
  a->position = static_cast<int32_t*>(position->untyped_data());
  a->starts = static_cast<int32_t*>(starts->untyped_data());
  a->counts = static_cast<int32_t*>(counts->untyped_data());
  return ffi::Error::Success();
}

// A grouped operand (see the layouts above): `dtype`, rank <= 2, its first dimension G >= 1
// dividing `rows`. Returns G and the trailing width through the pointers.
inline ffi::Error check_grouped(const ffi::AnyBuffer& b, ffi::DataType dtype, int64_t rows, const char* what,
                                int64_t* groups, int64_t* width = nullptr) {
  JN_RETURN_IF_ERROR(check_dtype(b, dtype, what));
  auto dims = b.dimensions();
  const int64_t g = dims.size() == 0 ? 1 : dims[0];
  const int64_t w = dims.size() == 2 ? dims[1] : 1;
  if (dims.size() > 2 || g < 1 || w < 1 || (rows > 0 && rows % g != 0)) {
    return ffi::Error::InvalidArgument(std::string("jaxnorm: ") + what + " must have a first dimension dividing " +
                                       std::to_string(rows) + " rows");
  }
  *groups = g;
  if (width) *width = w;
  return ffi::Error::Success();
}

// A grouped operand's data, entry count G and trailing width, checked by check_grouped.
struct Grouped {
  const void* data = nullptr;
  int64_t n = 1, width = 1;
};

inline ffi::Error grouped(const ffi::AnyBuffer& b, ffi::DataType dt, int64_t rows, const char* what, Grouped* g) {
  JN_RETURN_IF_ERROR(check_grouped(b, dt, rows, what, &g->n, &g->width));
  g->data = b.untyped_data();
  return ffi::Error::Success();
}

// The sampling handlers' operands after the logits (keys and temperature: sample only; bias:
// the v2 targets; finished and end_id: sample_v2). An absent optional operand is a (0,)
// placeholder, or no buffer at all for the targets that predate it.
struct SamplingOperands {
  Rows shape;
  Grouped keys, temps, top_k, top_p, log_min_p, finished, end_id;
  bool has_keys = false, has_temps = false, has_finished = false;
  const float* bias = nullptr;
};

struct LogitsUpdate {
  const ffi::AnyBuffer* bias = nullptr;
  const ffi::AnyBuffer* finished = nullptr;
  const ffi::AnyBuffer* end_id = nullptr;
};

// `filters`: false for jaxnorm_sample_by_mass, whose top_k and top_p must be absent (0,) placeholders
// (left null: no row has either filter).
inline ffi::Error sampling_operands(const ffi::AnyBuffer& x, const ffi::AnyBuffer* keys,
                                    const ffi::AnyBuffer* temps, const ffi::AnyBuffer& top_k,
                                    const ffi::AnyBuffer& top_p, const ffi::AnyBuffer& log_min_p,
                                    SamplingOperands* o, LogitsUpdate u = {}, bool filters = true) {
  JN_RETURN_IF_ERROR(rows_of(x, "logits", &o->shape));
  if (o->shape.cols > sampling::kMaxVocab) {
    return ffi::Error::InvalidArgument("jaxnorm: sampling takes rows of at most 2^25 logits (64-bit mass sums)");
  }
  const int64_t rows = o->shape.rows;
  o->has_keys = keys != nullptr;
  o->has_temps = temps != nullptr;
  if (keys) JN_RETURN_IF_ERROR(grouped(*keys, ffi::DataType::U32, rows, "keys", &o->keys));
  if (temps) JN_RETURN_IF_ERROR(grouped(*temps, ffi::DataType::F32, rows, "temperature", &o->temps));
  if (filters) {
    JN_RETURN_IF_ERROR(grouped(top_k, ffi::DataType::S32, rows, "top_k", &o->top_k));
    JN_RETURN_IF_ERROR(grouped(top_p, ffi::DataType::F32, rows, "top_p", &o->top_p));
  } else if (top_k.element_count() != 0 || top_p.element_count() != 0) {
    return ffi::Error::InvalidArgument("jaxnorm: jaxnorm_sample_by_mass takes no top_k or top_p (pass (0,) placeholders)");
  }
  JN_RETURN_IF_ERROR(grouped(log_min_p, ffi::DataType::F32, rows, "min_p", &o->log_min_p));
  if (u.bias && u.bias->element_count() > 0) {
    JN_RETURN_IF_ERROR(check_dtype(*u.bias, ffi::DataType::F32, "bias"));
    JN_RETURN_IF_ERROR(check_size(*u.bias, o->shape.cols, "bias"));
    o->bias = static_cast<const float*>(u.bias->untyped_data());
  }
  o->has_finished = u.finished && u.finished->element_count() > 0;
  if (o->has_finished) {
    JN_RETURN_IF_ERROR(grouped(*u.finished, ffi::DataType::PRED, rows, "finished", &o->finished));
    if (!u.end_id) return ffi::Error::InvalidArgument("jaxnorm: finished needs end_id");
    JN_RETURN_IF_ERROR(grouped(*u.end_id, ffi::DataType::S32, rows, "end_id", &o->end_id));
  }
  return ffi::Error::Success();
}

// Validates the norm operands shared by both directions; fills `shape`.
inline ffi::Error check_norm_operands(const ffi::AnyBuffer& x, const ffi::AnyBuffer& scale,
                                      const ffi::AnyBuffer& bias, bool has_scale, bool has_bias,
                                      Rows* shape) {
  JN_RETURN_IF_ERROR(rows_of(x, "x", shape));
  if (has_scale) {
    JN_RETURN_IF_ERROR(check_dtype(scale, ffi::DataType::F32, "scale"));
    JN_RETURN_IF_ERROR(check_size(scale, shape->cols, "scale"));
  }
  if (has_bias) {
    JN_RETURN_IF_ERROR(check_dtype(bias, ffi::DataType::F32, "bias"));
    JN_RETURN_IF_ERROR(check_size(bias, shape->cols, "bias"));
  }
  return ffi::Error::Success();
}

// Validates the optional softmax mask: absent, or a PRED buffer with one entry per element.
inline ffi::Error check_mask(const ffi::AnyBuffer& mask, bool has_mask, const Rows& shape) {
  if (!has_mask) return ffi::Error::Success();
  JN_RETURN_IF_ERROR(check_dtype(mask, ffi::DataType::PRED, "mask"));
  return check_size(mask, shape.size(), "mask");
}

// The cross-entropy operands both directions share (logits, labels, mask; the backward's stats
// and dloss when given); fills `shape`.
inline ffi::Error check_cross_entropy(const ffi::AnyBuffer& logits, const ffi::AnyBuffer& labels,
                                      const ffi::AnyBuffer& mask, bool has_mask, const ffi::AnyBuffer* stats,
                                      const ffi::AnyBuffer* dloss, Rows* shape) {
  JN_RETURN_IF_ERROR(rows_of(logits, "logits", shape));
  JN_RETURN_IF_ERROR(check_dtype(labels, ffi::DataType::S32, "labels"));
  JN_RETURN_IF_ERROR(check_size(labels, shape->rows, "labels"));
  JN_RETURN_IF_ERROR(check_mask(mask, has_mask, *shape));
  if (stats) {
    JN_RETURN_IF_ERROR(check_dtype(*stats, ffi::DataType::F32, "stats"));
    JN_RETURN_IF_ERROR(check_size(*stats, 2 * shape->rows, "stats"));
  }
  if (dloss) {
    JN_RETURN_IF_ERROR(check_dtype(*dloss, ffi::DataType::F32, "dloss"));
    JN_RETURN_IF_ERROR(check_size(*dloss, shape->rows, "dloss"));
  }
  return ffi::Error::Success();
}

}  // namespace jaxnorm

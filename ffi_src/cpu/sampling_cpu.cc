// Sampling CPU handlers: exact thresholds by selection and sorting per row, chunks of rows on
// XLA's intra-op thread pool. The same definitions as the CUDA kernels (common/sampling_math.h):
// the same fixed-point masses and the same Philox noise, so both draw the same tokens up to the
// rounding of exp/log.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/sampling_math.h"
#include "common/signatures.h"
#include "cpu/host_float.h"
#include "cpu/parallel_chunks.h"
#include "cpu/sampling_rows.h"

namespace jaxnorm {
namespace {

using sampling::RowParams;

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Token c's mass exp(s) in the kernels' fixed point.
uint64_t token_mass(const RowView& rv, const RowParams& q, int64_t c) {
  return static_cast<uint64_t>(
      std::nearbyint(static_cast<double>(std::exp((rv.v[c] - rv.m) * q.inv_t)) * sampling::kMassScale));
}

// The smallest key of the kept set under top-k then top-p (0 keeps every key).
uint32_t key_threshold(const RowView& rv, const RowParams& q) {
  const int64_t cols = static_cast<int64_t>(rv.key.size());
  uint32_t t = 0;
  if (q.use_k) {  // the k-th largest key; ties with it are kept
    std::vector<uint32_t> k(rv.key);
    std::nth_element(k.begin(), k.begin() + (q.k - 1), k.end(), std::greater<uint32_t>());
    t = k[q.k - 1];
  }
  if (q.use_p) {
    std::vector<int64_t> idx;
    for (int64_t c = 0; c < cols; ++c) {
      if (rv.key[c] >= t) idx.push_back(c);
    }
    std::vector<uint64_t> mass(cols, 0);
    uint64_t z = 0;
    for (int64_t c : idx) {
      mass[c] = token_mass(rv, q, c);
      z += mass[c];
    }
    std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return rv.key[a] > rv.key[b]; });
    const uint64_t target = sampling::top_p_target(q.p, z);
    uint64_t above = 0;  // mass of the values strictly larger than the current one
    uint32_t tp = t;
    for (size_t i = 0; i < idx.size();) {
      if (above >= target) break;
      const uint32_t k = rv.key[idx[i]];
      tp = k;
      for (; i < idx.size() && rv.key[idx[i]] == k; ++i) above += mass[idx[i]];
    }
    t = std::max(t, tp);
  }
  return t;
}

// Top-p alone: the inverse-transform draw of jaxnorm/sampling.py, round by round as the CUDA
// kernel's draw_top_p takes it (`theta`, the smallest kept key, decides its test). -1 when
// kPickRounds draws were rejected: the Gumbel draw over the kept tokens decides.
int64_t draw_top_p(const RowView& rv, const RowParams& q, uint32_t theta) {
  using sampling::kValueBins;
  const int64_t cols = static_cast<int64_t>(rv.v.size());
  std::vector<uint64_t> mass(cols);
  std::vector<uint32_t> bin(cols);
  std::vector<uint64_t> bin_mass(kValueBins, 0);
  uint64_t z = 0;
  for (int64_t c = 0; c < cols; ++c) {
    bin[c] = sampling::value_bin((rv.v[c] - rv.m) * q.inv_t);
    mass[c] = token_mass(rv, q, c);
    bin_mass[bin[c]] += mass[c];
    z += mass[c];
  }
  // The crossing bin: the first from the top whose running mass reaches the target.
  const uint64_t target = sampling::top_p_target(q.p, z);
  uint32_t bound = kValueBins - 1;
  uint64_t above = 0;
  while (bound > 0 && above + bin_mass[bound] < target) above += bin_mass[bound--];
  uint64_t sub = bin_mass[bound];  // the mass of the crossing bin's tokens above the pivot
  uint32_t pivot = 0;
  for (uint32_t round = 0; round < sampling::kPickRounds; ++round) {
    uint64_t r = sampling::scale_word(sampling::pick_word(round, q.row_in_key, q.key0, q.key1), above + sub);
    if (r < above) {  // above the crossing bin: kept
      uint32_t b = kValueBins - 1;
      while (r >= bin_mass[b]) r -= bin_mass[b--];
      for (int64_t c = 0; c < cols; ++c) {
        if (bin[c] != b) continue;
        if (r < mass[c]) return c;
        r -= mass[c];
      }
    }
    r -= above;
    int64_t t = -1;
    for (int64_t c = 0; c < cols && t < 0; ++c) {
      if (bin[c] != bound || rv.key[c] <= pivot) continue;
      if (r < mass[c]) t = c;
      r -= mass[c];
    }
    if (t < 0 || rv.key[t] >= theta) return t;
    pivot = rv.key[t];
    sub = 0;
    for (int64_t c = 0; c < cols; ++c) sub += bin[c] == bound && rv.key[c] > pivot ? mass[c] : 0;
  }
  return -1;
}

// The exact score of a kept token: libm's logs, compiled outside the vector clones (where the
// subtraction could fuse with the product into one rounding).
float gumbel_score(const RowView& rv, const RowParams& q, int64_t c) {
  const sampling::Philox4 w = sampling::token_words(static_cast<uint32_t>(c >> 2), q.row_in_key, q.key0, q.key1);
  const float u = sampling::open_uniform(w.v[c & 3]);
  return (rv.v[c] - rv.m) * q.inv_t - std::log(-std::log(u));
}

// A row without top-k or top-p (no filter, or min-p alone): the inverse-transform draw of
// jaxnorm/sampling.py, R = the first pick word scaled to the kept tokens' total mass, a position in
// their masses in index order (the CUDA kernels' draw_by_mass).
int32_t draw_by_mass(const RowView& rv, const RowParams& q, std::vector<uint64_t>* mass) {
  const int64_t cols = static_cast<int64_t>(rv.v.size());
  mass->resize(cols);
  uint64_t z = 0;
  for (int64_t c = 0; c < cols; ++c) {
    (*mass)[c] = (rv.v[c] - rv.m) * q.inv_t >= q.log_min_p ? token_mass(rv, q, c) : 0;
    z += (*mass)[c];
  }
  uint64_t r = sampling::scale_word(sampling::pick_word(0, q.row_in_key, q.key0, q.key1), z);
  for (int64_t c = 0; c < cols; ++c) {
    if (r < (*mass)[c]) return static_cast<int32_t>(c);
    r -= (*mass)[c];
  }
  return -1;  // not reached: the maximum's mass is 2^38
}

// The first token of the largest score among the kept tokens of a row with top-k or top-p (or
// whose top-p draw rejected every round); the other rows draw by inverse transform.
template <class T>
int32_t sample_row(const T* x, const float* bias, int64_t cols, const RowParams& q, RowView* rv) {
  const bool keys = q.use_k || q.use_p;
  load_row(x, bias, cols, keys, rv);
  if (rv->m == -INFINITY) return -1;
  if (q.greedy) {
    int64_t best = 0;
    for (int64_t c = 1; c < cols; ++c) {
      if (rv->v[c] > rv->v[best]) best = c;
    }
    return static_cast<int32_t>(best);
  }
  if (!keys) return draw_by_mass(*rv, q, &rv->mass);
  const uint32_t t = key_threshold(*rv, q);
  if (q.use_p && !q.use_k && q.log_min_p == -INFINITY) {
    const int64_t c = draw_top_p(*rv, q, t);
    if (c >= 0) return static_cast<int32_t>(c);
  }
  float best = -INFINITY;
  int32_t token = -1;
  for (int64_t c = 0; c < cols; ++c) {
    if (!kept(*rv, q, t, true, c)) continue;
    const float score = gumbel_score(*rv, q, c);
    if (score > best) {
      best = score;
      token = static_cast<int32_t>(c);
    }
  }
  return token;
}

RowParams params_of(int64_t r, const SamplingOperands& o) {
  return sampling::row_params(
      r, o.shape.rows, o.shape.cols, o.has_temps ? static_cast<const float*>(o.temps.data) : nullptr, o.temps.n,
      static_cast<const int32_t*>(o.top_k.data), o.top_k.n, static_cast<const float*>(o.top_p.data), o.top_p.n,
      static_cast<const float*>(o.log_min_p.data), o.log_min_p.n,
      o.has_keys ? static_cast<const uint32_t*>(o.keys.data) : nullptr, o.keys.n, o.keys.width);
}

ffi::Error sample_rows(ffi::ThreadPool& pool, const ffi::AnyBuffer& x, const SamplingOperands& o,
                       ffi::Result<ffi::AnyBuffer>& tokens) {
  const Rows s = o.shape;
  int32_t* out = static_cast<int32_t*>(tokens->untyped_data());
  const bool* fin = o.has_finished ? static_cast<const bool*>(o.finished.data) : nullptr;
  const int32_t* end_id = static_cast<const int32_t*>(o.end_id.data);
  return dispatch_float<CpuTypes>(x.element_type(), "logits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.untyped_data());
    parallel_chunks(pool, s.rows, chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
      RowView rv;
      for (int64_t r = begin; r < end; ++r) {
        if (sampling::forced_token(r, s.rows, fin, o.finished.n, end_id, o.end_id.n, &out[r])) continue;
        out[r] = sample_row(xp + r * s.cols, o.bias, s.cols, params_of(r, o), &rv);
      }
    });
    return ffi::Error::Success();
  });
}

ffi::Error SampleCpu(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer keys, ffi::AnyBuffer temps,
                     ffi::AnyBuffer top_k, ffi::AnyBuffer top_p, ffi::AnyBuffer log_min_p,
                     ffi::Result<ffi::AnyBuffer> tokens) {
  SamplingOperands o;
  JN_RETURN_IF_ERROR(sampling_operands(x, &keys, &temps, top_k, top_p, log_min_p, &o));
  return sample_rows(pool, x, o, tokens);
}

ffi::Error SampleV2Cpu(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer keys, ffi::AnyBuffer temps,
                       ffi::AnyBuffer top_k, ffi::AnyBuffer top_p, ffi::AnyBuffer log_min_p, ffi::AnyBuffer bias,
                       ffi::AnyBuffer finished, ffi::AnyBuffer end_id, ffi::Result<ffi::AnyBuffer> tokens) {
  SamplingOperands o;
  JN_RETURN_IF_ERROR(
      sampling_operands(x, &keys, &temps, top_k, top_p, log_min_p, &o, {&bias, &finished, &end_id}));
  return sample_rows(pool, x, o, tokens);
}

ffi::Error SampleByMassCpu(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer keys, ffi::AnyBuffer temps,
                           ffi::AnyBuffer top_k, ffi::AnyBuffer top_p, ffi::AnyBuffer log_min_p, ffi::AnyBuffer bias,
                           ffi::AnyBuffer finished, ffi::AnyBuffer end_id, ffi::Result<ffi::AnyBuffer> tokens) {
  SamplingOperands o;
  JN_RETURN_IF_ERROR(sampling_operands(x, &keys, &temps, top_k, top_p, log_min_p, &o, {&bias, &finished, &end_id},
                                       /*filters=*/false));
  return sample_rows(pool, x, o, tokens);
}

ffi::Error filter_rows(ffi::ThreadPool& pool, const ffi::AnyBuffer& x, const SamplingOperands& o,
                       ffi::Result<ffi::AnyBuffer>& filtered) {
  const Rows s = o.shape;
  const float* bias = o.bias;
  return dispatch_float<CpuTypes>(x.element_type(), "logits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.untyped_data());
    T* yp = static_cast<T*>(filtered->untyped_data());
    parallel_chunks(pool, s.rows, chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
      RowView rv;
      for (int64_t r = begin; r < end; ++r) {
        const RowParams q = params_of(r, o);
        const T* xr = xp + r * s.cols;
        T* yr = yp + r * s.cols;
        const bool keys = q.use_k || q.use_p;
        if (!keys && q.log_min_p == -INFINITY && filter_nan(xr, bias, s.cols, yr) != INFINITY) continue;
        load_row(xr, bias, s.cols, keys, &rv);
        const uint32_t t = rv.m == -INFINITY || !keys ? 0 : key_threshold(rv, q);
        write_filtered(xr, bias, rv, q, t, keys, s.cols, yr);
      }
    });
    return ffi::Error::Success();
  });
}

ffi::Error FilterCpu(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer top_k, ffi::AnyBuffer top_p,
                     ffi::AnyBuffer log_min_p, ffi::Result<ffi::AnyBuffer> filtered) {
  SamplingOperands o;
  JN_RETURN_IF_ERROR(sampling_operands(x, nullptr, nullptr, top_k, top_p, log_min_p, &o));
  return filter_rows(pool, x, o, filtered);
}

ffi::Error FilterV2Cpu(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer top_k, ffi::AnyBuffer top_p,
                       ffi::AnyBuffer log_min_p, ffi::AnyBuffer bias, ffi::Result<ffi::AnyBuffer> filtered) {
  SamplingOperands o;
  JN_RETURN_IF_ERROR(sampling_operands(x, nullptr, nullptr, top_k, top_p, log_min_p, &o, {&bias}));
  return filter_rows(pool, x, o, filtered);
}

ffi::Error TopKCpu(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> indices, int64_t k) {
  Rows s;
  JN_RETURN_IF_ERROR(rows_of(x, "x", &s));
  if (k < 0 || k > s.cols) return ffi::Error::InvalidArgument("jaxnorm: top_k's k must lie in [0, columns]");
  int32_t* out = static_cast<int32_t*>(indices->untyped_data());
  return dispatch_float<CpuTypes>(x.element_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.untyped_data());
    parallel_chunks(pool, s.rows, chunk_rows(s.cols), [&](int64_t, int64_t begin, int64_t end) {
      std::vector<uint32_t> key(s.cols);
      std::vector<int32_t> idx(s.cols);
      for (int64_t r = begin; r < end; ++r) {
        for (int64_t c = 0; c < s.cols; ++c) key[c] = sampling::order_key(float_bits(to_float(xp[r * s.cols + c])));
        std::iota(idx.begin(), idx.end(), 0);
        // lax.top_k's order: larger first, the lower index first among equal values.
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
          return key[a] != key[b] ? key[a] > key[b] : a < b;
        });
        std::copy(idx.begin(), idx.begin() + k, out + r * k);
      }
    });
    return ffi::Error::Success();
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormSampleCpu, SampleCpu, sample_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormSampleV2Cpu, SampleV2Cpu,
                              sample_v2_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormSampleByMassCpu, SampleByMassCpu,
                              sample_v2_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormFilterCpu, FilterCpu, filter_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormFilterV2Cpu, FilterV2Cpu,
                              filter_v2_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormTopKCpu, TopKCpu, top_k_signature(ffi::Ffi::Bind().Ctx<ffi::ThreadPool>()));

}  // namespace jaxnorm

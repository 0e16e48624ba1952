// CUDA handlers of the sampling family: sample, filter, top_k (kernels in row_select.cuh,
// launched by select_launch_typed.cuh; the register-held sampler of jaxnorm_sample_by_mass in
// mass_rows.cuh).
#include <algorithm>
#include <cstdlib>

#include "common/signatures.h"
#include "cuda/device_types.cuh"
#include "cuda/sampling/mass_rows.h"
#include "cuda/sampling/select_launch.h"

namespace jaxnorm {
namespace {

using namespace sampling;

// top_k's plan: whether its first pass bins the keys in a window below the row's largest (an extra
// cluster barrier for the row's maximum key) and how many candidates CTA 0 may gather (2k lets a
// pass stop where k alone would not, for a sort of twice the length and 8 KB more shared memory
// a CTA at k = 1024). Each choice is the one that won the same-call A/B at 1-256 x 32000 and
// 128256 (h100-sampling.md, 065b248/ca9e78f): the window lost ~5% at 32000 columns and k = 50
// (its first key byte already fits there); in float32 at k > 512 the window needs the 2k slots
// (the quarter binade at the boundary holds ~1.2k keys), which win 14-20% at 64-256 x 128256
// and lose 10-30% at batch 1-8 or 32000 columns (the sort, then occupancy).
struct TopKPlan {
  bool window = false;
  int64_t slots = kCand;
};

template <class T>
TopKPlan top_k_plan(int64_t rows, int64_t cols, int64_t kp) {
  constexpr int64_t kWindowMinCols = 64 << 10;
  constexpr int64_t kWideMinRows = 64;
  const bool wide_k = 2 * kp > kCand;
  TopKPlan p;
  if (sizeof(T) == 2) {
    p.window = cols >= kWindowMinCols || wide_k;
    p.slots = std::max<int64_t>(2 * kp, kCand);
  } else {
    p.window = cols >= kWindowMinCols && (!wide_k || rows >= kWideMinRows);
    p.slots = std::max<int64_t>(p.window ? 2 * kp : kp, kCand);
  }
  return p;
}

template <class T>
SelectArgs<T> select_args(const ffi::AnyBuffer& x, const SamplingOperands& o, void* out) {
  SelectArgs<T> a{};
  a.x = static_cast<const T*>(x.untyped_data());
  a.rows = o.shape.rows, a.cols = o.shape.cols;
  if (o.has_keys) a.keys = static_cast<const uint32_t*>(o.keys.data), a.n_keys = o.keys.n, a.key_width = o.keys.width;
  if (o.has_temps) a.temps = static_cast<const float*>(o.temps.data), a.n_temps = o.temps.n;
  a.top_k = static_cast<const int32_t*>(o.top_k.data), a.n_k = o.top_k.n;
  a.top_p = static_cast<const float*>(o.top_p.data), a.n_p = o.top_p.n;
  a.log_min_p = static_cast<const float*>(o.log_min_p.data), a.n_m = o.log_min_p.n;
  a.bias = o.bias;
  if (o.has_finished) {
    a.finished = static_cast<const bool*>(o.finished.data), a.n_fin = o.finished.n;
    a.end_id = static_cast<const int32_t*>(o.end_id.data), a.n_end = o.end_id.n;
  }
  a.out = out;
  a.gather_cap = radix_only() ? 0 : kCand;
  a.local_cap = kLocalCap, a.comp_cap = kCompCap;
  return a;
}

// The sampling modes, with the kernel that holds logits + bias when there is a bias.
// `with_top_k`: the caller's rows have top-k (the jaxnorm_sample_with_top_k target), so the sampler may
// take the one-read kernel.
template <int kMode>
ffi::Error launch_sampling(cudaStream_t stream, const ffi::AnyBuffer& x, const SamplingOperands& o, void* out,
                           const char* what, bool with_top_k = false) {
  return dispatch_float<CudaTypes>(x.element_type(), "logits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    SelectArgs<T> a = select_args<T>(x, o, out);
    a.stream = kMode == kSample && with_top_k && !radix_only() && one_read_switch() != 0;
    constexpr int64_t gather_bytes = kCand * sizeof(unsigned long long);
    return o.bias ? launch_select<T, kMode, true>(stream, a, gather_bytes, what)
                  : launch_select<T, kMode, false>(stream, a, gather_bytes, what);
  });
}

ffi::Error SampleCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer keys, ffi::AnyBuffer temps,
                      ffi::AnyBuffer top_k, ffi::AnyBuffer top_p, ffi::AnyBuffer log_min_p,
                      ffi::Result<ffi::AnyBuffer> tokens) {
  SamplingOperands o;
  JN_RETURN_IF_ERROR(sampling_operands(x, &keys, &temps, top_k, top_p, log_min_p, &o));
  return launch_sampling<kSample>(stream, x, o, tokens->untyped_data(), "sample");
}

// kWithTopK: the jaxnorm_sample_with_top_k target (sample_v2 for calls with top-k), which may take
// the one-read kernel.
template <bool kWithTopK>
ffi::Error SampleV2Cuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer keys, ffi::AnyBuffer temps,
                        ffi::AnyBuffer top_k, ffi::AnyBuffer top_p, ffi::AnyBuffer log_min_p, ffi::AnyBuffer bias,
                        ffi::AnyBuffer finished, ffi::AnyBuffer end_id, ffi::Result<ffi::AnyBuffer> tokens) {
  SamplingOperands o;
  JN_RETURN_IF_ERROR(
      sampling_operands(x, &keys, &temps, top_k, top_p, log_min_p, &o, {&bias, &finished, &end_id}));
  return launch_sampling<kSample>(stream, x, o, tokens->untyped_data(), "sample", kWithTopK);
}

// JAXNORM_SAMPLING_BY_MASS=0: jaxnorm_sample_by_mass's rows take the general kernel (read at each
// call, so a test can hold both kernels to the same tokens).
bool by_mass_off() {
  const char* v = std::getenv("JAXNORM_SAMPLING_BY_MASS");
  return v != nullptr && v[0] == '0';
}

// Calls with neither top-k nor top-p: every row's kept set follows from its maximum, so rows that
// fit it take the register-held kernel (mass_rows.cuh), the others the general one.
ffi::Error SampleByMassCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer keys, ffi::AnyBuffer temps,
                            ffi::AnyBuffer top_k, ffi::AnyBuffer top_p, ffi::AnyBuffer log_min_p, ffi::AnyBuffer bias,
                            ffi::AnyBuffer finished, ffi::AnyBuffer end_id, ffi::Result<ffi::AnyBuffer> tokens) {
  SamplingOperands o;
  JN_RETURN_IF_ERROR(sampling_operands(x, &keys, &temps, top_k, top_p, log_min_p, &o, {&bias, &finished, &end_id},
                                       /*filters=*/false));
  if (!by_mass_off()) {
    bool launched = false;
    ffi::Error e = dispatch_float<CudaTypes>(x.element_type(), "logits", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const SelectArgs<T> a = select_args<T>(x, o, tokens->untyped_data());
      return o.bias ? launch_mass_rows<T, true>(stream, a, "sample", &launched)
                    : launch_mass_rows<T, false>(stream, a, "sample", &launched);
    });
    if (e.failure() || launched) return e;
  }
  return launch_sampling<kSample>(stream, x, o, tokens->untyped_data(), "sample");
}

ffi::Error FilterCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer top_k, ffi::AnyBuffer top_p,
                      ffi::AnyBuffer log_min_p, ffi::Result<ffi::AnyBuffer> filtered) {
  SamplingOperands o;
  JN_RETURN_IF_ERROR(sampling_operands(x, nullptr, nullptr, top_k, top_p, log_min_p, &o));
  return launch_sampling<kFilter>(stream, x, o, filtered->untyped_data(), "filter_logits");
}

ffi::Error FilterV2Cuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer top_k, ffi::AnyBuffer top_p,
                        ffi::AnyBuffer log_min_p, ffi::AnyBuffer bias, ffi::Result<ffi::AnyBuffer> filtered) {
  SamplingOperands o;
  JN_RETURN_IF_ERROR(sampling_operands(x, nullptr, nullptr, top_k, top_p, log_min_p, &o, {&bias}));
  return launch_sampling<kFilter>(stream, x, o, filtered->untyped_data(), "filter_logits");
}

ffi::Error TopKCuda(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> indices, int64_t k) {
  Rows s;
  JN_RETURN_IF_ERROR(rows_of(x, "x", &s));
  if (k < 1 || k > s.cols || k > kTopKMax) {
    return ffi::Error::InvalidArgument("jaxnorm: top_k's k must lie in [1, min(columns, 2048)]");
  }
  return dispatch_float<CudaTypes>(x.element_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    SelectArgs<T> a{};
    a.x = static_cast<const T*>(x.untyped_data());
    a.rows = s.rows, a.cols = s.cols;
    a.k = k;
    a.out = indices->untyped_data();
    int64_t kp = 1;
    while (kp < k) kp <<= 1;  // the bitonic sort's padded length
    // The passes stop once the keys at or above their bin fit the gather buffer. 16-bit rows tie
    // heavily (k = 1024 of 128256: the passes went on into index bits) and always take 2k slots
    // (bf16, 64 x 128256, k = 1024: 120 -> 86 us before the window).
    const TopKPlan p = top_k_plan<T>(s.rows, s.cols, kp);
    a.topk_window = p.window;
    a.gather_cap = radix_only() ? 0 : p.slots;
    // The one-read path: its lists hold about k entries at or above theta and take in about
    // k ln(chunk / first round) with the rising floor, which compacts at half the list.
    a.stream = k <= kStreamKMax && !radix_only() && one_read_switch() != 0;
    a.local_cap = std::max<int64_t>(kLocalCap, 4 * kp), a.comp_cap = std::max<int64_t>(kCompCap, 2 * kp);
    return launch_select<T, kTopK, false>(stream, a, p.slots * 8, "top_k");
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormSampleCuda, SampleCuda,
                              sample_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormSampleV2Cuda, SampleV2Cuda<false>,
                              sample_v2_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormSampleWithTopKCuda, SampleV2Cuda<true>,
                              sample_v2_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormSampleByMassCuda, SampleByMassCuda,
                              sample_v2_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormFilterCuda, FilterCuda,
                              filter_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormFilterV2Cuda, FilterV2Cuda,
                              filter_v2_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormTopKCuda, TopKCuda,
                              top_k_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxnorm

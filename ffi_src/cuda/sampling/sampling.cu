// CUDA handlers of the sampling family: sample, filter, top_k (kernels in row_select.cuh; the
// register-held sampler of jaxnorm_sample_by_mass in mass_rows.cuh).
#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "common/signatures.h"
#include "cuda/launch.cuh"
#include "cuda/sampling/mass_rows.h"
#include "cuda/sampling/row_select.cuh"

namespace jaxnorm {
namespace {

using namespace sampling;

// Columns of one CTA's share of a row: about 32 KB, so a cluster of up to 16 CTAs spreads a wide
// row over many SMs and several clusters fit on an SM; rows past 16 CTAs of 160 KB are not copied
// into shared memory (the passes then re-read global memory, mostly from L2). cluster_for_batch
// revises the cluster from the batch.
constexpr int64_t kChunkBytes = 32 << 10;
constexpr int64_t kMaxResidentBytes = 160 << 10;
constexpr int64_t kChunkElemsQueued = 16 << 10;  // float32 rows that queue: 64 KB chunks
constexpr int64_t kMinChunkElems = 4 << 10;
constexpr int64_t kLongChunk = 32 << 10;  // tokens: the one-read sampler's chunks from here

struct Plan {
  int cluster = 1;
  size_t dyn_smem = 0;
};

int default_cluster(int64_t cols, int64_t elem_bytes) {
  int c = 1;
  while (c < kMaxCluster && cols * elem_bytes > kChunkBytes * c) c *= 2;
  return c;
}

// The chunks of a cluster of `cluster` CTAs, sized by the logits' element type and aligned for
// 16-byte loads.
// `copy`: whether the chunks may be held in shared memory (the one-read kernel holds none).
template <class T>
Plan plan_rows(SelectArgs<T>* a, int64_t extra_smem, int cluster, bool copy = true) {
  Plan p;
  p.cluster = cluster;
  constexpr int64_t N = kVecOf<T>;
  a->chunk = ceil_div(ceil_div(a->cols, p.cluster), N) * N;
  const int64_t chunk_bytes = a->chunk * static_cast<int64_t>(sizeof(T));
  a->resident = copy && chunk_bytes <= kMaxResidentBytes;
  a->vec = a->cols * static_cast<int64_t>(sizeof(T)) % 16 == 0;
  a->cand_offset = a->resident ? ceil_div(chunk_bytes, 16) * 16 : 0;
  p.dyn_smem = static_cast<size_t>(a->cand_offset + extra_smem);
  return p;
}

// select_rows at one CTA size: its attributes, its cluster launch, and its resident clusters.
template <class T, int kMode, bool kBias, int kThreads, bool kStream = false>
struct Launch {
  static cudaError_t prepare(const Plan& p) {
    cudaError_t e = allow_smem(select_rows<T, kMode, kBias, kThreads, kStream>, p.dyn_smem);
    return e == cudaSuccess ? allow_cluster(select_rows<T, kMode, kBias, kThreads, kStream>, p.cluster) : e;
  }
  static cudaLaunchConfig_t config(int64_t rows, const Plan& p, cudaStream_t stream, cudaLaunchAttribute* attr) {
    const dim3 grid(p.cluster, static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
    return cluster_config(grid, dim3(kThreads), p.cluster, p.dyn_smem, stream, attr);
  }
  static ffi::Error run(cudaStream_t stream, const SelectArgs<T>& a, const Plan& p, const char* what) {
    cudaError_t e = prepare(p);
    if (e != cudaSuccess) return cuda_error(e, what);
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = config(a.rows, p, stream, &attr);
    e = cudaLaunchKernelEx(&cfg, select_rows<T, kMode, kBias, kThreads, kStream>, a);
    if (e != cudaSuccess) return cuda_error(e, what);
    return last_launch_error(what);
  }
  // How many of these clusters (a row each) the device holds at once, cached by device and plan.
  static int resident_rows(const Plan& p) {
    static std::mutex mu;
    static std::map<std::tuple<int, int, size_t>, int> known;
    const auto key = std::make_tuple(device_facts().device, p.cluster, p.dyn_smem);
    std::lock_guard<std::mutex> lock(mu);
    auto it = known.find(key);
    if (it != known.end()) return it->second;
    int n = 1;
    if (prepare(p) == cudaSuccess) {
      cudaLaunchAttribute attr;
      n = active_clusters(select_rows<T, kMode, kBias, kThreads, kStream>, config(1, p, nullptr, &attr));
    }
    cudaGetLastError();
    return known[key] = n;
  }
};

// A row's cluster: 32 KB chunks, revised by the batch (each revision from the A/B of cluster
// sizes at 1-256 x 32000-151936, h100-sampling.md: the kernel takes about as long per SM per
// resident byte whatever the split, so what counts is that every SM works and no wave runs
// part-empty):
// - 16-bit rows of a small batch, which leaves SMs idle, spread over up to twice as many CTAs
//   (chunks of at least 4K elements);
// - rows that would queue for a second wave: 16-bit rows take the larger resident chunks of a
//   smaller cluster where all rows then fit at once at one CTA an SM and keep 3/4 of the SMs
//   busy; float32 rows take 64 KB chunks where that makes fewer waves.
// The logits update (kBias) keeps the default: its finished rows, known only on the device,
// leave part of the batch idle, and its 16-bit rows re-read the bias over a chunk (64 x 128256,
// half the rows finished: bfloat16 44.3 -> 69.3 us, float32 50.6 -> 57.1 with the revisions).
template <class T, bool kBias, class Few, class Many>
int cluster_for_batch(const SelectArgs<T>& a, int64_t extra_smem) {
  const int64_t sms = device_facts().sms;
  int c = default_cluster(a.cols, sizeof(T));
  if constexpr (kBias) return c;
  if (sizeof(T) == 2) {
    while (c < kMaxCluster && a.rows * 4 * c <= sms && a.cols >= 2 * kMinChunkElems * c) c *= 2;
  }
  SelectArgs<T> t = a;
  const int64_t resident = Many::resident_rows(plan_rows<T>(&t, extra_smem, c));
  if (a.rows <= resident) return c;
  if (sizeof(T) == 2) {
    for (int h = c / 2; h >= 2; h /= 2) {
      const Plan q = plan_rows<T>(&t, extra_smem, h);
      if (!t.resident) break;
      if (a.rows * h <= sms) {
        // One wave that keeps at least 3/4 of the SMs busy.
        return 4 * a.rows * h >= 3 * sms && a.rows <= Few::resident_rows(q) ? h : c;
      }
    }
    return c;
  }
  int h = c;
  while (h > 2 && ceil_div(a.cols, h / 2) <= kChunkElemsQueued) h /= 2;
  if (h == c) return c;
  const int64_t resident_h = Many::resident_rows(plan_rows<T>(&t, extra_smem, h));
  return ceil_div(a.rows, resident_h) < ceil_div(a.rows, resident) ? h : c;
}

// The A/B switch JAXNORM_SAMPLING_RADIX=1: thresholds by radix select only, no gather.
bool radix_only() {
  static const bool on = std::getenv("JAXNORM_SAMPLING_RADIX") != nullptr;
  return on;
}

// JAXNORM_SAMPLING_ONE_READ: 0 never takes the one-read top-k kernel, 1 always (top-k calls), unset:
// the rule in launch_select. Read at each call, so a test can run both kernels.
int one_read_switch() {
  const char* v = std::getenv("JAXNORM_SAMPLING_ONE_READ");
  return v == nullptr || v[0] == 0 ? -1 : v[0] == '1' ? 1 : 0;
}

// A launch of select_rows: its plan, and whether it takes the 512-thread CTAs (where the rows'
// clusters all fit at one CTA an SM, each pass being latency-bound with 8 warps an SM) or 256
// (up to 3 CTAs an SM).
struct RowsLaunch {
  Plan p;
  bool few = false;
};

template <class T, int kMode, bool kBias>
RowsLaunch rows_launch(SelectArgs<T>* a, int64_t extra_smem) {
  using Few = Launch<T, kMode, kBias, kThreadsFew>;
  using Many = Launch<T, kMode, kBias, kThreadsMany>;
  RowsLaunch l;
  l.p = plan_rows<T>(a, extra_smem, cluster_for_batch<T, kBias, Few, Many>(*a, extra_smem));
  l.few = a->rows * l.p.cluster <= device_facts().sms && a->rows <= Few::resident_rows(l.p);
  return l;
}

// The one-read kernel's launch: no shared-memory copy of the chunks (a row it hands back re-reads
// global memory, mostly from L2), so a CTA needs only its lists and 2 fit an SM whatever the
// chunk. The smallest cluster whose chunks its list holds (kStreamChunkMax), spread while the
// rows' CTAs still find an SM each. Cluster sizes swept at 1-256 x 32000 and 128256, top-k 50
// (h100-sampling.md, fc08168): where rows queue, the smallest cluster won (its chain of steps a
// row is shortest and every row starts at once: float32 64 x 128256 33.9 us at 2 CTAs a row, 55.9
// at 4, 63.5 at 8; bfloat16 256 x 128256 62.7 at 1, 79.9 at 2, 116.7 at 4).
template <class T, int kMode, bool kBias>
RowsLaunch stream_launch(SelectArgs<T>* a, int64_t extra_smem) {
  using Few = Launch<T, kMode, kBias, kThreadsFew, true>;
  const int64_t sms = device_facts().sms;
  int c = 1;
  while (c < kMaxCluster && ceil_div(a->cols, c) > kStreamChunkMax<T, kBias>) c *= 2;
  while (c < kMaxCluster && a->rows * 2 * c <= sms) c *= 2;
  RowsLaunch l;
  l.p = plan_rows<T>(a, extra_smem, c, false);
  l.few = a->rows * c <= sms && a->rows <= Few::resident_rows(l.p);
  return l;
}

template <class T, int kMode, bool kBias, bool kStream>
ffi::Error run_rows(cudaStream_t stream, const SelectArgs<T>& a, const RowsLaunch& l, const char* what) {
  return l.few ? Launch<T, kMode, kBias, kThreadsFew, kStream>::run(stream, a, l.p, what)
               : Launch<T, kMode, kBias, kThreadsMany, kStream>::run(stream, a, l.p, what);
}

template <class T, int kMode, bool kBias = false>
ffi::Error launch_select(cudaStream_t stream, SelectArgs<T> a, int64_t extra_smem, const char* what) {
  if (a.rows == 0) return ffi::Error::Success();
  // The delegate floor (gather_select.cuh) where rows queue for the SMs: same-call A/B at 39ad89e,
  // top-k 50 and top-k 50 with top-p 0.9, 1-256 x 32000 and 128256: 5-10% faster at 64-256 rows
  // (both dtypes, both vocabularies), 1-2% slower at batch 1 and at 8 x 32000 (its two barriers
  // on a row's critical path), +2% at 8 x 128256.
  a.delegate_floor = a.rows >= 64;
  SelectArgs<T> g = a;
  const RowsLaunch general = rows_launch<T, kMode, kBias>(&g, extra_smem);
  // The chunk copy by cp.async where rows queue for the SMs (more CTAs than SMs). Same-call A/B
  // against the register copy (h100-sampling.md, cd5d1c9; top-p 0.9 and top_k 50 at 1-256 x
  // 128256): float32 64 rows 0.959-0.971x the time, 256 rows 0.944-0.961x; bfloat16 256 rows
  // 0.972x; but bfloat16 64 rows (one wave) 1.011-1.025x and batch 1 1.003-1.011x.
  g.async_copy = a.rows * general.p.cluster > device_facts().sms;
  if constexpr (kMode == kSample) {
    // The one-read top-k kernel (stream_select.cuh) with its own plan where rows queue for the SMs
    // (more CTAs than SMs in the general kernel's plan), or where the general kernel's chunks are
    // long (its passes there are instruction-bound). Same-call A/B against the general kernel, top-k
    // 50 (h100-sampling.md, 8ef219c): 0.47x at float32 64 x 128256 (0.72x bfloat16), 0.43x / 0.39x
    // at float32 / bfloat16 256 x 128256, 0.60x / 0.52x at 256 x 32000, 0.38-0.52x with a logits
    // update; forced at 1-8 rows (fc08168's sweep), 0.91-1.34x (the latency of its steps on a
    // row's critical path), so the general kernel stays there.
    if (a.stream) {
      SelectArgs<T> s = a;
      const bool queue = a.rows * general.p.cluster > device_facts().sms;
      if (queue || g.chunk >= kLongChunk || one_read_switch() == 1) {
        const RowsLaunch one_read = stream_launch<T, kMode, kBias>(&s, extra_smem + (kLocalCap + kCompCap) * 8);
        return run_rows<T, kMode, kBias, true>(stream, s, one_read, what);
      }
    }
  }
  return run_rows<T, kMode, kBias, false>(stream, g, general, what);
}

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
                  : launch_select<T, kMode>(stream, a, gather_bytes, what);
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
    return launch_select<T, kTopK>(stream, a, p.slots * 8, "top_k");
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

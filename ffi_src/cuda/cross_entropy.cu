// Softmax cross-entropy forward and backward CUDA handlers; kernels in cross_entropy_ops.cuh.
#include "common/signatures.h"
#include "cuda/cross_entropy_ops.cuh"
#include "cuda/row_runners.cuh"

namespace jaxnorm {
namespace {

// Chunks of `width` columns (a multiple of the pack) splitting `cols` into at most `chunks` pieces
// of equal work: the last one is not left with a remainder.
struct Chunking {
  int64_t chunks, width;
};

Chunking balanced_chunks(int64_t cols, int64_t chunks, int pack) {
  const int64_t width = ceil_div(ceil_div(cols, chunks), pack) * pack;
  return {ceil_div(cols, width), width};
}

template <class T, int N>
ffi::Error launch_fwd_chunks(const CrossEntropyFwdOp<T>& op, int64_t rows, Chunking k, CeStats* partials,
                             cudaStream_t stream) {
  using ce::Fold;
  auto kernel = op.mask != nullptr      ? ce::fwd_chunk_kernel<T, N, Fold::kGeneral>
                : op.o.smoothing != 0.f ? ce::fwd_chunk_kernel<T, N, Fold::kWithSum>
                                        : ce::fwd_chunk_kernel<T, N, Fold::kPlain>;
  JN_RETURN_IF_ERROR(launch(kernel, dim3(static_cast<unsigned>(rows * k.chunks)), dim3(ce::kThreads), 1, stream,
                            "cross-entropy forward (chunks)", op, k.chunks, k.width, partials));
  return launch(ce::fwd_merge_kernel<T>, dim3(static_cast<unsigned>(ceil_div(rows, ce::kMergeRows))),
                dim3(32 * ce::kMergeRows), 1, stream, "cross-entropy forward (merge)", op, rows, k.chunks,
                static_cast<const CeStats*>(partials));
}

// `partials` (rows, K, 4) f32, or K = 0 (also the version-1 target, which has none): rows of
// more than one chunk are split into at most K chunks; otherwise each row is one tile's work.
ffi::Error cross_entropy_fwd(cudaStream_t stream, ffi::AnyBuffer logits, ffi::AnyBuffer labels, ffi::AnyBuffer mask,
                             ffi::Result<ffi::AnyBuffer> loss, ffi::Result<ffi::AnyBuffer> stats,
                             ffi::AnyBuffer* partials, const CeOptions& o) {
  Rows s;
  JN_RETURN_IF_ERROR(check_cross_entropy(logits, labels, mask, o.has_mask, nullptr, nullptr, &s));
  if (s.rows == 0) return ffi::Error::Success();
  int64_t max_chunks = 0;
  if (partials != nullptr) {
    const auto dims = partials->dimensions();
    if (partials->element_type() != ffi::DataType::F32 || dims.size() != 3 || dims[0] != s.rows || dims[2] != 4)
      return ffi::Error::InvalidArgument("jaxnorm: cross-entropy partials must be f32 (rows, chunks, 4)");
    max_chunks = dims[1];
  }
  return dispatch_float<CudaTypes>(logits.element_type(), "logits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Op = CrossEntropyFwdOp<T>;
    Op op{{static_cast<const T*>(logits.untyped_data()),
           o.has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr, s.cols},
          static_cast<const int32_t*>(labels.untyped_data()),
          static_cast<float*>(loss->untyped_data()),
          static_cast<float*>(stats->untyped_data()),
          o};
    constexpr int V = kVecOf<T>;
    const bool vec = s.cols % V == 0 && aligned16(op.x) && aligned16(op.mask);
    if (max_chunks >= 2 && s.rows * max_chunks <= INT32_MAX) {
      const Chunking k = balanced_chunks(s.cols, max_chunks, vec ? V : 1);
      auto* p = static_cast<CeStats*>(partials->untyped_data());
      if (k.chunks >= 2) return vec ? launch_fwd_chunks<T, V>(op, s.rows, k, p, stream)
                                    : launch_fwd_chunks<T, 1>(op, s.rows, k, p, stream);
    }
    const TileChoice c = choose_tile_for<Op>(s.cols, vec, device_facts().clusters);
    FwdRunner<Op> runner{op, s.rows, s.cols, stream, "cross-entropy forward"};
    return run_choice<Op>(c, runner);
  });
}

ffi::Error CrossEntropyFwdCuda(cudaStream_t stream, ffi::AnyBuffer logits, ffi::AnyBuffer labels, ffi::AnyBuffer mask,
                               ffi::Result<ffi::AnyBuffer> loss, ffi::Result<ffi::AnyBuffer> stats, float smoothing,
                               float z_loss, int64_t ignore_index, bool has_mask) {
  return cross_entropy_fwd(stream, logits, labels, mask, loss, stats, nullptr,
                           {smoothing, z_loss, ignore_index, has_mask});
}

ffi::Error CrossEntropyFwdV2Cuda(cudaStream_t stream, ffi::AnyBuffer logits, ffi::AnyBuffer labels,
                                 ffi::AnyBuffer mask, ffi::Result<ffi::AnyBuffer> loss,
                                 ffi::Result<ffi::AnyBuffer> stats, ffi::Result<ffi::AnyBuffer> partials,
                                 float smoothing, float z_loss, int64_t ignore_index, bool has_mask) {
  ffi::AnyBuffer p = *partials;
  return cross_entropy_fwd(stream, logits, labels, mask, loss, stats, &p, {smoothing, z_loss, ignore_index, has_mask});
}

template <class T, int N>
ffi::Error launch_bwd(const ce::BwdArgs<T>& a, int64_t rows, cudaStream_t stream) {
  const int64_t per_row = a.cols / N, total = rows * per_row;
  const dim3 grid(static_cast<unsigned>(ceil_div(total, ce::kThreads * ce::kUnroll)));
  auto go = [&](auto index) {
    using I = decltype(index);
    return launch(ce::bwd_kernel<T, N, I>, grid, dim3(ce::kThreads), 1, stream, "cross-entropy backward", a,
                  Divisor<I>(static_cast<I>(per_row)), static_cast<I>(total));
  };
  return total < (int64_t{1} << 32) ? go(uint32_t{}) : go(uint64_t{});
}

template <class T>
ffi::Error cross_entropy_bwd(const ce::BwdArgs<T>& a, int64_t rows, cudaStream_t stream) {
  constexpr int V = kVecOf<T>;
  const bool vec = a.cols % V == 0 && aligned16(a.x) && aligned16(a.dx) && aligned16(a.mask);
  // Rows of a CTA's step or more: a CTA per chunk of a row (its coefficients loaded once).
  const int64_t step = ce::kThreads * (vec ? ce::kChunkPacks<V> * V : ce::kChunkPacks<1>);
  if (a.cols >= step) {
    const Chunking k = balanced_chunks(a.cols, ceil_div(a.cols, step), vec ? V : 1);
    if (rows * k.chunks <= INT32_MAX) {
      const dim3 grid(static_cast<unsigned>(rows * k.chunks));
      auto go = [&](auto kernel) {
        return launch(kernel, grid, dim3(ce::kThreads), 1, stream, "cross-entropy backward", a, k.chunks, k.width);
      };
      if (vec) return a.mask ? go(ce::bwd_chunk_kernel<T, V, true>) : go(ce::bwd_chunk_kernel<T, V, false>);
      return a.mask ? go(ce::bwd_chunk_kernel<T, 1, true>) : go(ce::bwd_chunk_kernel<T, 1, false>);
    }
  }
  return vec ? launch_bwd<T, V>(a, rows, stream) : launch_bwd<T, 1>(a, rows, stream);
}

template <class T>
ce::BwdArgs<T> bwd_args(const ffi::AnyBuffer& logits, const ffi::AnyBuffer& labels, const float* stats,
                        const float* dloss, const ffi::AnyBuffer& mask, void* dlogits, int64_t cols,
                        const CeOptions& o) {
  return {static_cast<const T*>(logits.untyped_data()),
          static_cast<const int32_t*>(labels.untyped_data()),
          stats,
          dloss,
          o.has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr,
          static_cast<T*>(dlogits),
          cols,
          o};
}

ffi::Error CrossEntropyBwdCuda(cudaStream_t stream, ffi::AnyBuffer logits, ffi::AnyBuffer labels, ffi::AnyBuffer stats,
                               ffi::AnyBuffer dloss, ffi::AnyBuffer mask, ffi::Result<ffi::AnyBuffer> dlogits,
                               float smoothing, float z_loss, int64_t ignore_index, bool has_mask) {
  Rows s;
  JN_RETURN_IF_ERROR(check_cross_entropy(logits, labels, mask, has_mask, &stats, &dloss, &s));
  if (s.size() == 0) return ffi::Error::Success();
  const CeOptions o{smoothing, z_loss, ignore_index, has_mask};
  return dispatch_float<CudaTypes>(logits.element_type(), "logits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return cross_entropy_bwd(bwd_args<T>(logits, labels, static_cast<const float*>(stats.untyped_data()),
                                         static_cast<const float*>(dloss.untyped_data()), mask,
                                         dlogits->untyped_data(), s.cols, o),
                             s.rows, stream);
  });
}

// The forward and dlogits = weight * d loss / d logits together (the reduced losses' derivative):
// rows of at most 16 steps of the forward's packs in one read (ce::fwd_grad_kernel); other rows
// (unaligned, wider, or a device without clusters) the forward kernels, then the backward with
// dloss = weight, whose `stats` and `partials` results are their workspace.
ffi::Error CrossEntropyFwdGradCuda(cudaStream_t stream, ffi::AnyBuffer logits, ffi::AnyBuffer labels,
                                   ffi::AnyBuffer mask, ffi::AnyBuffer weight, ffi::Result<ffi::AnyBuffer> loss,
                                   ffi::Result<ffi::AnyBuffer> dlogits, ffi::Result<ffi::AnyBuffer> stats,
                                   ffi::Result<ffi::AnyBuffer> partials, float smoothing, float z_loss,
                                   int64_t ignore_index, bool has_mask) {
  Rows s;
  ffi::AnyBuffer st = *stats;
  JN_RETURN_IF_ERROR(check_cross_entropy(logits, labels, mask, has_mask, &st, nullptr, &s));
  JN_RETURN_IF_ERROR(check_dtype(weight, ffi::DataType::F32, "weight"));
  JN_RETURN_IF_ERROR(check_size(weight, s.rows, "weight"));
  if (s.size() == 0) return ffi::Error::Success();
  const CeOptions o{smoothing, z_loss, ignore_index, has_mask};
  const float* w = static_cast<const float*>(weight.untyped_data());
  return dispatch_float<CudaTypes>(logits.element_type(), "logits", [&](auto tag) -> ffi::Error {
    using T = typename decltype(tag)::type;
    using Op = CrossEntropyFwdOp<T>;
    const Op op{{static_cast<const T*>(logits.untyped_data()), o.has_mask ? static_cast<const bool*>(mask.untyped_data()) : nullptr,
                 s.cols},
                static_cast<const int32_t*>(labels.untyped_data()),
                static_cast<float*>(loss->untyped_data()),
                static_cast<float*>(stats->untyped_data()),
                o};
    T* dx = static_cast<T*>(dlogits->untyped_data());
    constexpr int V = kVecOf<T>;
    const bool vec = s.cols % V == 0 && aligned16(op.x) && aligned16(op.mask) && aligned16(dx);
    const int64_t chunks = ceil_div(s.cols, ce::kThreads * ce::kFwdChunkPacks * V);
    if (vec && device_facts().clusters && chunks <= kMaxCluster && s.rows * chunks <= INT32_MAX) {
      using ce::Fold;
      const Chunking k = balanced_chunks(s.cols, chunks, V);
      const int cluster = static_cast<int>(k.chunks);
      auto kernel = op.mask != nullptr ? ce::fwd_grad_kernel<T, V, Fold::kGeneral>
                    : o.smoothing != 0.f ? ce::fwd_grad_kernel<T, V, Fold::kWithSum>
                                         : ce::fwd_grad_kernel<T, V, Fold::kPlain>;
      if (max_active_clusters(kernel, ce::kThreads, cluster) > 0) {
        return launch(kernel, dim3(static_cast<unsigned>(s.rows * k.chunks)), dim3(ce::kThreads), cluster, stream,
                      "cross-entropy forward and gradient", op, w, dx, k.width);
      }
    }
    ffi::AnyBuffer p = *partials;
    JN_RETURN_IF_ERROR(cross_entropy_fwd(stream, logits, labels, mask, loss, stats, &p, o));
    return cross_entropy_bwd(bwd_args<T>(logits, labels, static_cast<const float*>(stats->untyped_data()), w, mask, dx,
                                         s.cols, o),
                             s.rows, stream);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormCrossEntropyFwdCuda, CrossEntropyFwdCuda,
                              cross_entropy_fwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormCrossEntropyFwdV2Cuda, CrossEntropyFwdV2Cuda,
                              cross_entropy_fwd_v2_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormCrossEntropyBwdCuda, CrossEntropyBwdCuda,
                              cross_entropy_bwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormCrossEntropyFwdGradCuda, CrossEntropyFwdGradCuda,
                              cross_entropy_fwd_grad_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxnorm

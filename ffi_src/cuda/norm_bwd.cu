// LayerNorm / RMSNorm backward CUDA handler, launched per dy dtype and bias gradient by
// norm_bwd_typed.cuh, and the deterministic reduction of the scale/bias gradient partials.
#include "cuda/device_types.cuh"
#include "cuda/norm_bwd.cuh"
#include "cuda/row_tiles.cuh"

namespace jaxnorm {

// Block (32 columns) x (kPartialSlices slices of the workers): thread (c, k) sums workers k,
// k + kPartialSlices, ... of column c, then slice 0 adds the slices in order. The assignment
// does not depend on timing, so the sums are bitwise reproducible; the slices keep enough loads
// in flight that thousands of partial rows (narrow tiles: one per resident CTA) take a few
// microseconds rather than one dependent walk per column.
__global__ void __launch_bounds__(32 * kPartialSlices)
    reduce_partials_kernel(const float* workspace, int64_t ws_rows, int64_t workers, int64_t cols, int sums,
                           float* dscale, float* dbias) {
  __shared__ float part[2][kPartialSlices][33];
  const int c = threadIdx.x % 32, k = threadIdx.x / 32;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + c;
  const int64_t group = blockIdx.y;
  const float* base = workspace + group * ws_rows * 2 * cols;
  float sg = 0.f, sb = 0.f;
  if (col < cols) {
    for (int64_t w = k; w < workers; w += kPartialSlices) {
      sg += base[(2 * w) * cols + col];
      if (sums == 2) sb += base[(2 * w + 1) * cols + col];
    }
  }
  part[0][k][c] = sg;
  part[1][k][c] = sb;
  __syncthreads();
  if (k == 0 && col < cols) {
    float g = 0.f, b = 0.f;
#pragma unroll
    for (int j = 0; j < kPartialSlices; ++j) {
      g += part[0][j][c];
      b += part[1][j][c];
    }
    dscale[group * cols + col] = g;
    dbias[group * cols + col] = b;
  }
}

namespace {

ffi::Error NormBwdCuda(cudaStream_t stream, ffi::AnyBuffer xin, ffi::AnyBuffer dy, ffi::AnyBuffer mean,
                       ffi::AnyBuffer rstd, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                       ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dscale,
                       ffi::Result<ffi::AnyBuffer> dbias, ffi::Result<ffi::AnyBuffer> workspace, float eps,
                       bool centered, bool has_scale, bool has_bias, bool memory_efficient) {
  Rows s;
  JN_RETURN_IF_ERROR(check_norm_operands(xin, scale, bias, has_scale, has_bias, &s));
  JN_RETURN_IF_ERROR(check_same_rows(dy, xin, s, "dy"));
  const NormBwdCall c{stream, xin, dy, mean, rstd, scale, bias, dx, dscale, dbias, workspace, s, eps,
                      NormFlags{centered, has_scale, has_bias, memory_efficient}};
  return dispatch_float<CudaTypes>(xin.element_type(), "x", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return has_bias ? norm_bwd_typed<T, true>(c) : norm_bwd_typed<T, false>(c);
  });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxnormNormBwdCuda, NormBwdCuda,
                              norm_bwd_signature(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

}  // namespace jaxnorm

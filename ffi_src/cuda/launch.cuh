// Launch helpers: device facts, occupancy-sized persistent grids, cluster launches, and turning
// CUDA errors into FFI errors (never a silent failure).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/ffi_util.h"
#include "cuda/device_facts.h"

namespace jaxnorm {



inline ffi::Error cuda_error(cudaError_t e, const char* what) {
  return ffi::Error::Internal(std::string("jaxnorm: CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

inline ffi::Error last_launch_error(const char* what) {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? ffi::Error::Success() : cuda_error(e, what);
}

// Resident CTAs per SM for `kernel` at `threads` threads (cached by the caller per instantiation).
template <class K>
int occupancy(K kernel, int threads, size_t dyn_smem = 0) {
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, dyn_smem) != cudaSuccess) {
    cudaGetLastError();
    blocks = 1;
  }
  return blocks > 0 ? blocks : 1;
}

// Clusters of `cfg`'s shape that the device holds at once (1 when it cannot tell). The kernel's
// shared-memory and cluster-size attributes must be set first.
template <class K>
int active_clusters(K kernel, const cudaLaunchConfig_t& cfg) {
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    n = 1;
  }
  return n > 0 ? n : 1;
}

// A launch configuration of clusters of `cluster` CTAs along x; `attr` holds its one attribute.
inline cudaLaunchConfig_t cluster_config(dim3 grid, dim3 block, int cluster, size_t dyn_smem, cudaStream_t stream,
                                         cudaLaunchAttribute* attr) {
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = cluster;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = dyn_smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// Clusters of more than 8 CTAs must be allowed per kernel (Hopper's non-portable sizes).
template <class K>
cudaError_t allow_cluster(K kernel, int cluster) {
  return cluster > 8 ? cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) : cudaSuccess;
}

// Dynamic shared memory beyond the default 48 KB must be allowed per kernel.
template <class K>
cudaError_t allow_smem(K kernel, size_t dyn_smem) {
  return dyn_smem > 0 ? cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(dyn_smem))
                      : cudaSuccess;
}

// Launches kernel<<<grid, block, dyn_smem, stream>>>(args...) as clusters of `cluster` CTAs along x.
template <class K, class... Args>
ffi::Error launch_with_smem(K kernel, dim3 grid, dim3 block, int cluster, size_t dyn_smem, cudaStream_t stream,
                            const char* what, Args... args) {
  if (grid.x == 0 || grid.y == 0) return ffi::Error::Success();
  cudaError_t e = allow_smem(kernel, dyn_smem);
  if (e != cudaSuccess) return cuda_error(e, what);
  if (cluster <= 1) {
    kernel<<<grid, block, dyn_smem, stream>>>(args...);
    return last_launch_error(what);
  }
  e = allow_cluster(kernel, cluster);
  if (e != cudaSuccess) return cuda_error(e, what);
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_config(grid, block, cluster, dyn_smem, stream, &attr);
  e = cudaLaunchKernelEx(&cfg, kernel, args...);
  if (e != cudaSuccess) return cuda_error(e, what);
  return last_launch_error(what);
}

template <class K, class... Args>
ffi::Error launch(K kernel, dim3 grid, dim3 block, int cluster, cudaStream_t stream, const char* what,
                  Args... args) {
  return launch_with_smem(kernel, grid, block, cluster, 0, stream, what, args...);
}

// How many clusters of `cluster` CTAs of `kernel` fit on the device at once (>= 1), or 0 when the
// cluster cannot be scheduled at all (then the caller takes another path).
template <class K>
int max_active_clusters(K kernel, int threads, int cluster, size_t dyn_smem = 0) {
  if (allow_cluster(kernel, cluster) != cudaSuccess || allow_smem(kernel, dyn_smem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_config(dim3(cluster), dim3(threads), cluster, dyn_smem, nullptr, &attr);
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace jaxnorm

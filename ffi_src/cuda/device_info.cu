#include <mutex>
#include <vector>

#include "cuda/launch.cuh"

#include <cuda_runtime.h>

namespace jaxnorm {

const DeviceFacts& device_facts() {
  static std::mutex mu;
  static std::vector<DeviceFacts> facts;
  static std::vector<bool> known;
  int dev = 0;
  cudaGetDevice(&dev);
  std::lock_guard<std::mutex> lock(mu);
  if (dev >= static_cast<int>(facts.size())) {
    facts.resize(dev + 1);
    known.resize(dev + 1, false);
  }
  if (!known[dev]) {
    DeviceFacts f;
    f.device = dev;
    cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev);
    cudaDeviceGetAttribute(&f.cc_major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&f.max_smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    cudaDeviceGetAttribute(&f.l2_bytes, cudaDevAttrL2CacheSize, dev);
    int cluster_launch = 0;
    cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, dev);
    f.clusters = cluster_launch != 0;
    if (f.sms <= 0) f.sms = 1;
    cudaGetLastError();
    facts[dev] = f;
    known[dev] = true;
  }
  return facts[dev];
}

}  // namespace jaxnorm

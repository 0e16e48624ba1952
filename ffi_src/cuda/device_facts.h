// Facts about the current GPU that kernel dispatch depends on (plain C++: the nanobind module
// reads them too).
#pragma once

namespace jaxnorm {

constexpr int kMaxCluster = 16;  // Hopper's largest thread-block cluster (non-portable past 8)

struct DeviceFacts {
  int device = 0;
  int sms = 0;
  int cc_major = 0;
  int max_smem_optin = 0;
  int l2_bytes = 0;
  bool clusters = false;  // thread-block clusters (sm_90+)
};

// Facts of the current device, read once per device.
const DeviceFacts& device_facts();

}  // namespace jaxnorm

// CUDA: the devices the runtime shows this process.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "backends/device.hpp"

namespace mpf::backend {

int visible_devices() {
  int n = 0;
  // No driver or no device: the count stays 0 and the caller says so.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear it, so that later calls do not report it
    return 0;
  }
  return n;
}

std::string device_description(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "unknown device";
  char text[256];
  std::snprintf(text, sizeof text, "%s, sm_%d%d, %d SMs, %.1f GiB", prop.name, prop.major,
                prop.minor, prop.multiProcessorCount, double(prop.totalGlobalMem) / (1 << 30));
  return text;
}

double current_device_memory() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0.0;
  }
  return double(total);
}

}  // namespace mpf::backend

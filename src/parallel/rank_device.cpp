#include "parallel/rank_device.hpp"

#include <cstdio>

#include "backends/device.hpp"
#include "backends/gemm.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/types.hpp"

namespace mpf {

int choose_device(int local_rank) {
  if constexpr (!kDeviceMemory) return -1;
  const int devices = backend::visible_devices();
  require(devices > 0,
          "this is a GPU build of mpiformer, but no GPU is visible here (CUDA_VISIBLE_DEVICES, "
          "the driver, or a node without GPUs); run it on a GPU node, or use a CPU build");
  return local_rank % devices;
}

std::string describe_execution_space() {
  char text[256];
  const int version = KOKKOS_VERSION;
  std::snprintf(text, sizeof text, "Kokkos %d.%d.%d %s", version / 10000, version / 100 % 100,
                version % 100, ExecSpace::name());
  std::string out = text;
  if constexpr (kSplitOverOpenMP) {
    out += ", kernels split over " + std::to_string(host_thread_count()) + " OpenMP thread(s)";
  } else if constexpr (kDeviceMemory) {
    const int device = current_device();
    out += ", GPU " + std::to_string(device) + " of " + std::to_string(backend::visible_devices()) +
           ": " + backend::device_description(device);
  } else {
    out += ", " + std::to_string(ExecSpace().concurrency()) + " thread(s)";
  }
  return out;
}

int current_device() {
  // The one place outside backends/ that knows Kokkos may run on CUDA: Kokkos::Cuda exists only
  // in a CUDA build of Kokkos.
#ifdef KOKKOS_ENABLE_CUDA
  return ExecSpace().cuda_device();
#else
  return -1;
#endif
}

void bind_backend_to_execution_space() {
#ifdef KOKKOS_ENABLE_CUDA
  backend::bind_stream(ExecSpace().cuda_stream());
#endif
}

}  // namespace mpf

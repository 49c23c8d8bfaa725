// The backend seam's second, smaller part: the accelerators a process can see, which only a
// vendor runtime can tell. A CPU build sees none.
#pragma once

#include <string>

namespace mpf::backend {

// GPUs visible to this process (after CUDA_VISIBLE_DEVICES); 0 in a CPU build.
int visible_devices();
// "NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB" for visible device `device`.
std::string device_description(int device);
// The memory of the device this process computes on, in bytes; 0 in a CPU build.
double current_device_memory();

}  // namespace mpf::backend

// A CPU build has no accelerator.
#include "backends/device.hpp"

namespace mpf::backend {

int visible_devices() {
  return 0;
}

std::string device_description(int) {
  return "";
}

double current_device_memory() {
  return 0.0;
}

}  // namespace mpf::backend

#include "core/device.hpp"

#include "backends/gemm.hpp"
#include "core/types.hpp"

namespace mpf {

void bind_backend_to_execution_space() {
  // The one place outside backends/ that knows Kokkos may run on CUDA: Kokkos::Cuda exists only
  // in a CUDA build of Kokkos.
#ifdef KOKKOS_ENABLE_CUDA
  backend::bind_stream(ExecSpace().cuda_stream());
#endif
}

}  // namespace mpf

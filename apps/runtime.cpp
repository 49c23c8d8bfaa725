#include "runtime.hpp"

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "backends/gemm.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/parallel.hpp"
#include "parallel/device_mpi.hpp"
#include "parallel/node.hpp"
#include "parallel/rank_device.hpp"
#include "train/trainer.hpp"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace mpf {

Runtime::Runtime(int* argc, char*** argv) {
  keep_freed_host_memory();
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
}

Runtime::~Runtime() {
  if (kokkos_) Kokkos::finalize();
  MPI_Finalize();
}

int Runtime::start_kernels(int requested_threads, int argc, char** argv) {
  const NodePlacement place = node_placement(MPI_COMM_WORLD);
  const int threads = choose_threads(requested_threads, place, MPI_COMM_WORLD);
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
  backend::set_num_threads(threads);
  std::vector<char*> kokkos_args{argv[0]};
  bool device_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--kokkos-", 0) == 0) kokkos_args.push_back(argv[i]);
    device_given |= arg.rfind("--kokkos-device-id", 0) == 0;
  }
  // A GPU build: each rank of a node on its own GPU where there are enough (choose_device).
  int device = -1;
  if (!all_ranks_succeed(MPI_COMM_WORLD, [&] { device = choose_device(place.local_rank); })) {
    return -1;
  }
  std::string device_arg = "--kokkos-device-id=" + std::to_string(device);
  if (device >= 0 && !device_given) kokkos_args.push_back(device_arg.data());
  int kokkos_argc = static_cast<int>(kokkos_args.size());
  Kokkos::initialize(kokkos_argc, kokkos_args.data());
  kokkos_ = true;
  // Tests run the GPU's kernel shapes on the CPU (core/parallel.hpp; docs/testing.md).
  if (const char* shape = std::getenv("MPIFORMER_TEST_KERNEL_SHAPE"); shape && *shape) {
    set_kernel_shape(std::string(shape) == "device" ? KernelShape::kDevice : KernelShape::kHost);
  }
  bind_backend_to_execution_space();
  return threads;
}

bool Runtime::choose_mpi_memory(const std::string& gpu_aware_mpi) {
  return all_ranks_succeed(MPI_COMM_WORLD,
                           [&] { set_mpi_memory(decide_mpi_memory(gpu_aware_mpi)); });
}

}  // namespace mpf

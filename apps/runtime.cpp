#include "runtime.hpp"

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <string>
#include <vector>

#include "backends/gemm.hpp"
#include "core/device.hpp"
#include "core/host_memory.hpp"
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
  const int threads = choose_threads(requested_threads, MPI_COMM_WORLD);
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
  backend::set_num_threads(threads);
  std::vector<char*> kokkos_args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]).rfind("--kokkos-", 0) == 0) kokkos_args.push_back(argv[i]);
  }
  int kokkos_argc = static_cast<int>(kokkos_args.size());
  Kokkos::initialize(kokkos_argc, kokkos_args.data());
  kokkos_ = true;
  bind_backend_to_execution_space();
  return threads;
}

}  // namespace mpf

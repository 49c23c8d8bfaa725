#include "runtime.hpp"

#include <mpi.h>

#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
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

namespace {
// MPICH 4.0's MPI_Finalize over UCX 1.13's TCP transport can wait forever: each rank flushes its
// connections, a flush waits for the peer's acknowledgement, and a peer that has finished its
// own flushes sits in the launcher's barrier, reading nothing more (one 4-rank run in two or
// three across two nodes here). Every rank has finished its work by then (finish() waits for
// all of them first), and a healthy MPI_Finalize takes well under a second.
constexpr int kFinalizeSeconds = 5;
}  // namespace

Runtime::Runtime(int* argc, char*** argv) {
  keep_freed_host_memory();
  // MPI_THREAD_MULTIPLE where the library gives it: a background checkpoint's writer thread
  // calls MPI (on a communicator of its own) while the main thread trains
  // (train/run_saver.hpp); with less, those writes are funnelled through the main thread.
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
}

Runtime::~Runtime() {
  if (finished_) return;
  if (kokkos_) Kokkos::finalize();
  MPI_Finalize();
}

int Runtime::finish(int status) {
  if (finished_) return status;
  finished_ = true;
  if (kokkos_) Kokkos::finalize();
  std::fflush(nullptr);  // all output out: the guard may end the process without flushing it
  // No rank is cut off while another still works (a rank 0 writing a file): the time limit
  // starts once all are here.
  MPI_Barrier(MPI_COMM_WORLD);
  std::mutex mutex;
  std::condition_variable returned;
  bool done = false;
  std::thread guard([&] {
    std::unique_lock<std::mutex> lock(mutex);
    if (returned.wait_for(lock, std::chrono::seconds(kFinalizeSeconds), [&] { return done; })) {
      return;
    }
    std::fprintf(stderr,
                 "mpiformer: [rank %d] MPI_Finalize has not returned after %d s (a peer's "
                 "transport waits on one that has left it): exiting with status %d without it\n",
                 rank_, kFinalizeSeconds, status);
    _exit(status);
  });
  MPI_Finalize();
  {
    std::lock_guard<std::mutex> lock(mutex);
    done = true;
  }
  returned.notify_one();
  guard.join();
  return status;
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

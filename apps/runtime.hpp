// What every mpiformer program does around its work: the host memory policy and MPI at the
// start; the threads, the GEMM library and Kokkos once its flags are read; and the reverse at
// the end, on every return from main.
#pragma once

#include <string>

namespace mpf {

class Runtime {
 public:
  // Keeps freed host memory in the process (core/host_memory.hpp), then starts MPI, funneled:
  // only the main thread calls it (watchdog and checkpoint staging threads never do).
  Runtime(int* argc, char*** argv);
  // Kokkos::finalize if start_kernels ran, then MPI_Finalize; nothing after finish().
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int world_rank() const { return rank_; }

  // Collective: the threads per rank (choose_threads: `requested` if positive, else
  // OMP_NUM_THREADS, else this node's cores over its ranks) for OpenMP and the GEMM library; in a
  // GPU build the rank's GPU (choose_device: its local rank modulo the visible GPUs, unless
  // --kokkos-device-id names one); then Kokkos, bound to the GEMM backend. Kokkos 3.x also claims
  // --threads and --help, so it is handed only its own --kokkos-* flags from argv. Returns the
  // thread count, or -1 (every rank; rank 0 has printed the error) when no GPU can be used.
  int start_kernels(int requested_threads, int argc, char** argv);

  // Whether MPI is handed the kernels' memory or messages are staged through host buffers
  // (parallel/device_mpi.hpp), from --gpu-aware-mpi. False (every rank; rank 0 has printed the
  // error) for a bad value.
  bool choose_mpi_memory(const std::string& gpu_aware_mpi);

  // The destructor's work with MPI_Finalize given a time limit: a process whose MPI_Finalize has
  // not returned by then exits with `status` all the same (runtime.cpp says why). Returns
  // `status`, for main's `return runtime.finish(status)`.
  int finish(int status);

 private:
  int rank_ = 0;
  bool kokkos_ = false;
  bool finished_ = false;
};

}  // namespace mpf

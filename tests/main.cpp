// GoogleTest main for every test binary: MPI and Kokkos are initialised once around the suite.
// Tests receive MPI_COMM_WORLD from here only. MPIFORMER_GEMM=NAME runs the suite's products with
// that GEMM library (ctest runs the layer tests once per library); MPIFORMER_TEST_KERNEL_SHAPE=
// device runs the kernels in their GPU shape (core/parallel.hpp), on the CPU in a CPU build.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <cstdlib>

#include <string>

#include "backends/device.hpp"
#include "backends/gemm.hpp"
#include "core/parallel.hpp"
#include "core/types.hpp"

int main(int argc, char** argv) {
  int provided = 0;  // funneled: helper threads (checkpoint staging) never call MPI
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  if (const char* library = std::getenv("MPIFORMER_GEMM"); library && *library) {
    if (!mpf::backend::select(library)) {
      std::fprintf(stderr, "MPIFORMER_GEMM=%s is not a GEMM library of this build\n", library);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  // A GPU build's tests need a GPU: without one they are skipped, saying why (ctest: 77).
  if (mpf::kDeviceMemory && mpf::backend::visible_devices() == 0) {
    std::printf("no CUDA device: this GPU build's tests need a GPU, and none is visible here\n");
    MPI_Finalize();
    return 77;
  }
  Kokkos::initialize(argc, argv);
  if (const char* shape = std::getenv("MPIFORMER_TEST_KERNEL_SHAPE"); shape && *shape) {
    mpf::set_kernel_shape(std::string(shape) == "device" ? mpf::KernelShape::kDevice
                                                         : mpf::KernelShape::kHost);
  }
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Only rank 0 reports; the others still run and fail their own assertions.
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  Kokkos::finalize();
  MPI_Finalize();
  return any_failed;
}

// The execution space the kernels run in: which one it is (for the banner), the GPU a rank uses
// when it is a GPU, and the GEMM backend tied to it.
#pragma once

#include <string>

namespace mpf {

// The GPU of the rank with local rank `local_rank` on its node: the local rank modulo the devices
// this process sees, which is right both when every rank sees all of a node's GPUs and when the
// launcher leaves each rank one (Slurm's CUDA_VISIBLE_DEVICES). -1 in a CPU build. Throws
// InputError in a GPU build on a machine where no GPU is visible.
int choose_device(int local_rank);

// For the banner: "Kokkos 4.6.1 OpenMP, 2 threads", "Kokkos 3.4.1 Serial, kernels split over 2
// OpenMP threads", "Kokkos 4.6.1 Cuda, GPU 1 of 4: NVIDIA H100 80GB HBM3, sm_90, 132 SMs, ...".
// After Kokkos::initialize.
std::string describe_execution_space();

// The GPU Kokkos runs on; -1 on the host.
int current_device();

// Ties the GEMM backend to the Kokkos execution space: on CUDA, cuBLAS then issues every product
// on the stream Kokkos runs its kernels on, so products and kernels stay in order without
// synchronising between them. On the host it does nothing. Call once after Kokkos::initialize.
void bind_backend_to_execution_space();

}  // namespace mpf

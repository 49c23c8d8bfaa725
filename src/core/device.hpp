// Ties the GEMM backend to the Kokkos execution space: on CUDA, cuBLAS then issues every product
// on the stream Kokkos runs its kernels on, so products and kernels stay in order without
// synchronising between them. On the host it does nothing.
#pragma once

namespace mpf {

// Call once after Kokkos::initialize.
void bind_backend_to_execution_space();

}  // namespace mpf

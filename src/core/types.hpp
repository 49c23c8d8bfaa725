// View aliases and the execution space every kernel runs on.
//
// Conventions, stated once:
// - Tensors are flat 1D Views of float, row-major; the comment at each declaration gives the shape,
//   e.g. `// (B,T,C)`, and kernels index them as llm.c does: inp[(b*T + t)*C + c].
// - Matrices passed to the GEMM backend are row-major; a linear layer's weight is (out, in), so
//   out = inp · Wᵀ + b (llm.c's layout, which is also PyTorch's nn.Linear).
// - Parameter gradients accumulate (`+=`); activation gradients are written (`=`).
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>

namespace mpf {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using HostSpace = Kokkos::HostSpace;
// True in a GPU build: the kernels' memory is not host memory, so the host, MPI and the
// checkpoints reach tensors through copies.
inline constexpr bool kDeviceMemory = !Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible;
// Page-locked host memory, which a GPU copies to and from at full speed without an intermediate
// buffer (MPI messages staged through the host); plain host memory in a CPU build.
#ifdef KOKKOS_ENABLE_CUDA
using PinnedSpace = Kokkos::CudaHostPinnedSpace;
#else
using PinnedSpace = Kokkos::HostSpace;
#endif

// An owning slab: one allocation per category (parameters, gradients, activations, ...).
using Slab = Kokkos::View<float*, MemSpace>;
// A named window into a slab; never owns memory.
using Tensor = Kokkos::View<float*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
// Token ids of a batch, (B,T), on the device.
using Tokens = Kokkos::View<int32_t*, MemSpace>;
// The same on the host, where the data loader fills them.
using HostTokens = Kokkos::View<int32_t*, HostSpace>;

}  // namespace mpf

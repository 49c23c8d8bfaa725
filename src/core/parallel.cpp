#include "core/parallel.hpp"

#include <algorithm>
#include <string>

namespace mpf {

namespace {
KernelShape shape = kDeviceMemory ? KernelShape::kDevice : KernelShape::kHost;

Kokkos::View<double*, MemSpace> sum_buffer;
Kokkos::View<float*, MemSpace> column_buffer;

// A scratch buffer of the kernels' memory that only grows, kept between calls (a step allocates
// nothing once the first has run) and released when Kokkos finalizes.
template <class T>
T* grown(Kokkos::View<T*, MemSpace>& buffer, int64_t n, const char* label) {
  static const bool hooked = (Kokkos::push_finalize_hook([] {
                                sum_buffer = {};
                                column_buffer = {};
                              }),
                              true);
  (void)hooked;
  if (int64_t(buffer.extent(0)) < n) {
    buffer = {};
    buffer = Kokkos::View<T*, MemSpace>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), n);
  }
  return buffer.data();
}
}  // namespace

KernelShape kernel_shape() {
  return shape;
}

void set_kernel_shape(KernelShape s) {
  shape = s;
}

namespace detail {

TeamPolicy row_policy(int64_t rows, int64_t width) {
  if constexpr (kDeviceMemory) {
    // A warp of 32 vector lanes per 128 elements, 1 to 8 warps.
    const int warps = int(std::clamp<int64_t>((width + 127) / 128, 1, 8));
    return TeamPolicy(rows, warps, 32);
  } else {
    TeamPolicy probe(rows, 1);
    const int most = probe.team_size_max([](const TeamMember&) {}, Kokkos::ParallelForTag());
    return TeamPolicy(rows, std::clamp(most, 1, 4), 1);
  }
}

float* column_scratch(int64_t n) {
  return grown(column_buffer, n, "mpf::column_sums::partial");
}

double* sum_scratch(int64_t nblocks) {
  return grown(sum_buffer, nblocks + 1, "mpf::sum::partial") + 1;
}

}  // namespace detail

void append_sum_blocks(std::vector<SumBlock>& blocks, int64_t first, int64_t n, int total) {
  for (int64_t at = 0; at < n; at += kSumBlock) {
    blocks.push_back(
        {first + at, int(std::min(kSumBlock, n - at)), total, at + kSumBlock >= n ? 1 : 0});
  }
}

}  // namespace mpf

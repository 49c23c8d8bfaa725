#include <gtest/gtest.h>

#include <vector>

#include "core/parallel.hpp"
#include "optim/grad_norm.hpp"
#include "test_helpers.hpp"

namespace mpf {

// nvcc rejects a KOKKOS_LAMBDA inside a TEST body (TestBody() is a private member function), so
// the kernel lives in a free function.
Kokkos::View<int*, MemSpace> count_visits(int64_t n) {
  Kokkos::View<int*, MemSpace> hits("hits", n);
  for_each(
      "test::count", n, KOKKOS_LAMBDA(int64_t i) { hits(i) += 1; });
  return hits;
}

TEST(Parallel, ForEachVisitsEveryIndexOnce) {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(4095), int64_t(4096), int64_t(100003)}) {
    auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), count_visits(n));
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h(i), 1) << "n=" << n << " i=" << i;
  }
}

// Sums are bitwise independent of the thread count, so a run's losses and norms do not change
// with --threads.
TEST(Parallel, SumIsIndependentOfThreadCount) {
  const int64_t n = 1000003;
  Slab x = test::random_slab("x", n);
  const float* p = x.data();
#ifdef _OPENMP
  const int before = host_thread_count();
  omp_set_num_threads(1);
  const double one = sum_of_squares(p, n);
  omp_set_num_threads(2);
  const double two = sum_of_squares(p, n);
  omp_set_num_threads(before);
  EXPECT_EQ(one, two);
#else
  const double one = sum_of_squares(p, n);
#endif
  const std::vector<float> h = test::to_host(x);  // p may be a device pointer
  double serial = 0;
  for (int64_t i = 0; i < n; ++i) serial += double(h[i]) * h[i];
  EXPECT_NEAR(one, serial, 1e-9 * serial);
}

TEST(GradNorm, ClipScale) {
  EXPECT_EQ(clip_scale(5.0, 0.0f), 1.0f);
  EXPECT_EQ(clip_scale(0.5, 1.0f), 1.0f);
  EXPECT_FLOAT_EQ(clip_scale(4.0, 1.0f), float(1.0 / (4.0 + 1e-6)));
}

}  // namespace mpf

// Small helpers shared by the unit tests: host-filled tensors and a finite-difference checker.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <cmath>
#include <functional>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/types.hpp"

namespace mpf::test {

// A device slab of n floats drawn from N(0, scale²) with stream `name`.
inline Slab random_slab(const char* name, int64_t n, float scale = 1.0f, uint64_t seed = 7) {
  Slab s(std::string(name), n);
  auto h = Kokkos::create_mirror_view(s);
  const uint64_t stream = rng::stream_of(name);
  for (int64_t i = 0; i < n; ++i) h(i) = scale * rng::normal(seed, stream, i);
  Kokkos::deep_copy(s, h);
  return s;
}

inline std::vector<float> to_host(const Slab& s) {
  std::vector<float> v(s.extent(0));
  auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), s);
  for (size_t i = 0; i < v.size(); ++i) v[i] = h(i);
  return v;
}

inline Tensor view(const Slab& s) {
  return Tensor(s.data(), s.extent(0));
}

// Compares analytic[i] with the central difference of `loss` w.r.t. x[i] for the given indices.
// loss() must be a deterministic function of x's current contents, computed in double.
// Tolerance: fp32 forward passes with step h leave ~1e-3 relative error in the difference.
inline void expect_gradient_matches(Slab x, const std::vector<float>& analytic,
                                    const std::function<double()>& loss,
                                    const std::vector<int64_t>& indices, const char* what,
                                    float h = 1e-2f, double rtol = 2e-2, double atol = 2e-3) {
  auto hx = Kokkos::create_mirror_view_and_copy(HostSpace(), x);
  double scale = 0.0;
  for (float a : analytic) scale = std::max(scale, double(std::fabs(a)));
  for (int64_t i : indices) {
    const float orig = hx(i);
    hx(i) = orig + h;
    Kokkos::deep_copy(x, hx);
    const double up = loss();
    hx(i) = orig - h;
    Kokkos::deep_copy(x, hx);
    const double down = loss();
    hx(i) = orig;
    Kokkos::deep_copy(x, hx);
    const double numeric = (up - down) / (2.0 * h);
    EXPECT_NEAR(analytic[i], numeric, atol * scale + rtol * std::fabs(numeric))
        << what << " element " << i;
  }
}

// Every index of a small tensor, or an even spread of `count` of a large one.
inline std::vector<int64_t> spread(int64_t n, int64_t count = 48) {
  std::vector<int64_t> idx;
  const int64_t step = n > count ? n / count : 1;
  for (int64_t i = 0; i < n; i += step) idx.push_back(i);
  return idx;
}

// Σ out[i]·weights[i] in double: a scalar loss whose gradient w.r.t. out is `weights`.
inline double weighted_sum(const Slab& out, const std::vector<float>& weights) {
  const std::vector<float> o = to_host(out);
  double acc = 0.0;
  for (size_t i = 0; i < o.size(); ++i) acc += double(o[i]) * weights[i];
  return acc;
}

// This rank and the size of comm (tests under mpiexec).
inline int rank_of(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}
inline int size_of(MPI_Comm c) {
  int s = 1;
  MPI_Comm_size(c, &s);
  return s;
}

// Runs f, expects an InputError and returns its message (empty, with a failure, if none came).
template <class F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected InputError";
  return "";
}

// A fixture with a fresh directory per test (and per rank under mpiexec), removed afterwards.
class ScratchDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mpf_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    chmod(dir_.c_str(), 0755);  // a test may have made it read-only
    std::filesystem::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

// A whole small file as text, and a file written with `text` (replacing it).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

}  // namespace mpf::test

// The cuBLAS backend against a host reference, through the project's seam (backends/gemm.hpp):
// gemm and gemm_strided_batched, in fp32 and with bf16 inputs, for all four transpose
// combinations, and gemv for both, with padded leading dimensions, padded batch strides, alpha
// and beta. Without a CUDA device every test is skipped (GTEST_SKIP with the reason), never passed.
//   built and run by ci/check_cuda.sh: nvcc ... test_cublas_gemm.cu gemm_cublas.o -lcublas
//   -lgtest_main
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/gemm.hpp"

namespace {

using mpf::backend::Op;

// Empty when a CUDA device is usable, else why not.
std::string no_device_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    return std::string("no CUDA device: cudaGetDeviceCount failed: ") + cudaGetErrorString(err);
  if (count == 0) return "no CUDA device: cudaGetDeviceCount reports 0 devices";
  return "";
}

#define SKIP_WITHOUT_DEVICE()                      \
  do {                                             \
    const std::string reason = no_device_reason(); \
    if (!reason.empty()) GTEST_SKIP() << reason;   \
  } while (0)

// A device copy of a host vector, freed on scope exit.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr_, n_ * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> to_host() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

std::vector<float> random_vector(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Row-major reference: C = alpha * op(A) * op(B) + beta * C, accumulated in double.
// op(A) is M x K: A is stored M x K (Op::N) or K x M (Op::T), rows lda apart; likewise B.
void reference_gemm(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int k = 0; k < K; ++k) {
        const double a = op_a == Op::N ? A[i * lda + k] : A[k * lda + i];
        const double b = op_b == Op::N ? B[k * ldb + j] : B[j * ldb + k];
        acc += a * b;
      }
      C[i * ldc + j] = float(alpha * acc + double(beta) * C[i * ldc + j]);
    }
}

struct Shape {
  int M = 5, N = 7, K = 3;  // odd, distinct sizes: a swapped dimension cannot go unnoticed
  int pad = 2;              // extra elements per stored row
  // Stored rows x columns of A and B for the given ops, and their leading dimensions.
  int a_rows(Op op) const { return op == Op::N ? M : K; }
  int a_cols(Op op) const { return op == Op::N ? K : M; }
  int b_rows(Op op) const { return op == Op::N ? K : N; }
  int b_cols(Op op) const { return op == Op::N ? N : K; }
  int lda(Op op) const { return a_cols(op) + pad; }
  int ldb(Op op) const { return b_cols(op) + pad; }
  int ldc() const { return N + pad; }
};

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << "element " << i;
}

std::string op_name(Op op) {
  return op == Op::N ? "N" : "T";
}

class CublasGemm : public ::testing::TestWithParam<std::tuple<Op, Op>> {};

TEST_P(CublasGemm, MatchesHostReference) {
  SKIP_WITHOUT_DEVICE();
  const auto [op_a, op_b] = GetParam();
  const Shape s;
  const float alpha = 0.75f, beta = -0.5f;
  const auto A = random_vector(size_t(s.a_rows(op_a)) * s.lda(op_a), 1);
  const auto B = random_vector(size_t(s.b_rows(op_b)) * s.ldb(op_b), 2);
  auto C = random_vector(size_t(s.M) * s.ldc(), 3);  // beta != 0: C is read

  DeviceBuffer<float> dA(A), dB(B), dC(C);
  mpf::backend::gemm(op_a, op_b, s.M, s.N, s.K, alpha, dA.get(), s.lda(op_a), dB.get(), s.ldb(op_b),
                     beta, dC.get(), s.ldc());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  reference_gemm(op_a, op_b, s.M, s.N, s.K, alpha, A.data(), s.lda(op_a), B.data(), s.ldb(op_b),
                 beta, C.data(), s.ldc());
  expect_near_all(dC.to_host(), C);  // padding columns must be untouched too
}

TEST_P(CublasGemm, StridedBatchedMatchesHostReference) {
  SKIP_WITHOUT_DEVICE();
  const auto [op_a, op_b] = GetParam();
  const Shape s;
  const int batch = 3;
  const float alpha = 1.25f, beta = 0.5f;
  // Batch strides larger than one matrix, so a wrong stride reads or writes the wrong elements.
  const int64_t stride_a = int64_t(s.a_rows(op_a)) * s.lda(op_a) + 5;
  const int64_t stride_b = int64_t(s.b_rows(op_b)) * s.ldb(op_b) + 3;
  const int64_t stride_c = int64_t(s.M) * s.ldc() + 4;
  const auto A = random_vector(size_t(stride_a) * batch, 4);
  const auto B = random_vector(size_t(stride_b) * batch, 5);
  auto C = random_vector(size_t(stride_c) * batch, 6);

  DeviceBuffer<float> dA(A), dB(B), dC(C);
  mpf::backend::gemm_strided_batched(op_a, op_b, s.M, s.N, s.K, alpha, dA.get(), s.lda(op_a),
                                     stride_a, dB.get(), s.ldb(op_b), stride_b, beta, dC.get(),
                                     s.ldc(), stride_c, batch);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  for (int i = 0; i < batch; ++i)
    reference_gemm(op_a, op_b, s.M, s.N, s.K, alpha, A.data() + i * stride_a, s.lda(op_a),
                   B.data() + i * stride_b, s.ldb(op_b), beta, C.data() + i * stride_c, s.ldc());
  expect_near_all(dC.to_host(), C);
}

// gemv against the one-column gemm of the reference: y (rows x 1) = op(A) · x (cols x 1).
TEST(CublasGemv, MatchesHostReference) {
  SKIP_WITHOUT_DEVICE();
  const int M = 5, N = 7, lda = N + 2;
  const float alpha = 0.75f, beta = -0.5f;
  const auto A = random_vector(size_t(M) * lda, 7);
  for (Op op : {Op::N, Op::T}) {
    const int rows = op == Op::N ? M : N, cols = op == Op::N ? N : M;
    const auto x = random_vector(size_t(cols), 8);
    auto y = random_vector(size_t(rows), 9);
    DeviceBuffer<float> dA(A), dx(x), dy(y);
    mpf::backend::gemv(op, M, N, alpha, dA.get(), lda, dx.get(), beta, dy.get());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    reference_gemm(op, Op::N, rows, 1, cols, alpha, A.data(), lda, x.data(), 1, beta, y.data(), 1);
    expect_near_all(dy.to_host(), y);
  }
}

// bf16 inputs (the rounded values' bits), fp32 accumulation: against the reference on the rounded
// values, whose products are exact in fp32 (8 + 8 significant bits), so only the fp32 sums differ.
uint16_t round_to_bf16(float x, float& rounded) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  const uint32_t top = u & 0xffff0000u;
  std::memcpy(&rounded, &top, sizeof rounded);
  return uint16_t(u >> 16);
}

std::vector<uint16_t> to_bf16(std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = round_to_bf16(values[i], values[i]);
  return bits;
}

TEST_P(CublasGemm, Bf16MatchesHostReferenceOnRoundedInputs) {
  SKIP_WITHOUT_DEVICE();
  const auto [op_a, op_b] = GetParam();
  const Shape s;
  const float alpha = 1.0f, beta = 1.0f;
  auto A = random_vector(size_t(s.a_rows(op_a)) * s.lda(op_a), 7);
  auto B = random_vector(size_t(s.b_rows(op_b)) * s.ldb(op_b), 8);
  auto C = random_vector(size_t(s.M) * s.ldc(), 9);
  DeviceBuffer<uint16_t> dA(to_bf16(A)), dB(to_bf16(B));
  DeviceBuffer<float> dC(C);
  mpf::backend::gemm_bf16(op_a, op_b, s.M, s.N, s.K, alpha, dA.get(), s.lda(op_a), dB.get(),
                          s.ldb(op_b), beta, dC.get(), s.ldc());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  reference_gemm(op_a, op_b, s.M, s.N, s.K, alpha, A.data(), s.lda(op_a), B.data(), s.ldb(op_b),
                 beta, C.data(), s.ldc());
  expect_near_all(dC.to_host(), C);
}

TEST_P(CublasGemm, Bf16StridedBatchedMatchesHostReference) {
  SKIP_WITHOUT_DEVICE();
  const auto [op_a, op_b] = GetParam();
  const Shape s;
  const int batch = 3;
  const int64_t stride_a = int64_t(s.a_rows(op_a)) * s.lda(op_a) + 5;
  const int64_t stride_b = int64_t(s.b_rows(op_b)) * s.ldb(op_b) + 3;
  const int64_t stride_c = int64_t(s.M) * s.ldc() + 4;
  auto A = random_vector(size_t(stride_a) * batch, 10);
  auto B = random_vector(size_t(stride_b) * batch, 11);
  auto C = random_vector(size_t(stride_c) * batch, 12);
  DeviceBuffer<uint16_t> dA(to_bf16(A)), dB(to_bf16(B));
  DeviceBuffer<float> dC(C);
  mpf::backend::gemm_strided_batched_bf16(op_a, op_b, s.M, s.N, s.K, 1.0f, dA.get(), s.lda(op_a),
                                          stride_a, dB.get(), s.ldb(op_b), stride_b, 0.0f, dC.get(),
                                          s.ldc(), stride_c, batch);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int i = 0; i < batch; ++i)
    reference_gemm(op_a, op_b, s.M, s.N, s.K, 1.0f, A.data() + i * stride_a, s.lda(op_a),
                   B.data() + i * stride_b, s.ldb(op_b), 0.0f, C.data() + i * stride_c, s.ldc());
  expect_near_all(dC.to_host(), C);
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, CublasGemm,
                         ::testing::Combine(::testing::Values(Op::N, Op::T),
                                            ::testing::Values(Op::N, Op::T)),
                         [](const auto& info) {
                           return op_name(std::get<0>(info.param)) +
                                  op_name(std::get<1>(info.param));
                         });

}  // namespace

#include <gtest/gtest.h>

#include <vector>

#include "backends/gemm.hpp"
#include "test_helpers.hpp"

namespace mpf {

using backend::Op;

namespace {
// C = alpha·op(A)·op(B) + beta·C, row-major, in double, straight from the definition.
void naive(Op ta, Op tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc) {
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double acc = 0;
      for (int k = 0; k < K; ++k) {
        const float a = ta == Op::N ? A[i * lda + k] : A[k * lda + i];
        const float b = tb == Op::N ? B[k * ldb + j] : B[j * ldb + k];
        acc += double(a) * b;
      }
      C[i * ldc + j] = float(alpha * acc + beta * C[i * ldc + j]);
    }
  }
}
}  // namespace

TEST(Gemm, AllTransposesWithStridesMatchTheDefinition) {
  const int M = 37, N = 29, K = 41, pad = 3;
  for (Op ta : {Op::N, Op::T}) {
    for (Op tb : {Op::N, Op::T}) {
      const int lda = (ta == Op::N ? K : M) + pad, ldb = (tb == Op::N ? N : K) + pad, ldc = N + pad;
      const std::vector<float> A = test::to_host(test::random_slab("A", 64 * lda));
      const std::vector<float> B = test::to_host(test::random_slab("B", 64 * ldb));
      std::vector<float> C = test::to_host(test::random_slab("C", M * ldc)), R = C;
      backend::gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, C.data(), ldc);
      naive(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, R.data(), ldc);
      for (size_t i = 0; i < C.size(); ++i) ASSERT_NEAR(C[i], R[i], 1e-4) << i;
    }
  }
}

TEST(Gemm, StridedBatchedIsALoopOfGemms) {
  const int M = 8, N = 6, K = 5, batch = 7;
  const int64_t sa = M * K + 2, sb = K * N + 1, sc = M * N + 3;
  const std::vector<float> A = test::to_host(test::random_slab("A", sa * batch));
  const std::vector<float> B = test::to_host(test::random_slab("B", sb * batch));
  std::vector<float> C(sc * batch, 1.0f), R = C;
  backend::gemm_strided_batched(Op::N, Op::T, M, N, K, 1.5f, A.data(), K, sa, B.data(), K, sb, 0.0f,
                                C.data(), N, sc, batch);
  for (int i = 0; i < batch; ++i) {
    naive(Op::N, Op::T, M, N, K, 1.5f, A.data() + i * sa, K, B.data() + i * sb, K, 0.0f,
          R.data() + i * sc, N);
  }
  for (size_t i = 0; i < C.size(); ++i) ASSERT_NEAR(C[i], R[i], 1e-4) << i;
}

// A matrix-vector product is the gemm of one column: y (rows x 1) = op(A) · x (cols x 1).
TEST(Gemm, GemvIsAOneColumnGemm) {
  const int M = 37, N = 29, lda = N + 3;
  const std::vector<float> A = test::to_host(test::random_slab("A", M * lda));
  for (Op op : {Op::N, Op::T}) {
    const int rows = op == Op::N ? M : N, cols = op == Op::N ? N : M;
    const std::vector<float> x = test::to_host(test::random_slab("x", cols));
    std::vector<float> y = test::to_host(test::random_slab("y", rows)), R = y;
    backend::gemv(op, M, N, 0.5f, A.data(), lda, x.data(), 0.25f, y.data());
    naive(op, Op::N, rows, 1, cols, 0.5f, A.data(), lda, x.data(), 1, 0.25f, R.data(), 1);
    for (int i = 0; i < rows; ++i) ASSERT_NEAR(y[i], R[i], 1e-4) << i;
  }
}

}  // namespace mpf

// The backend seam: matrix products, the one thing vendor libraries do better than a portable
// kernel. Implemented by backends/cpu (OpenBLAS) and backends/cuda (cuBLAS); nothing else in the
// project names either library.
//
// All matrices are row-major. C (M x N) = alpha * op(A) (M x K) * op(B) (K x N) + beta * C,
// op(X) = X or Xᵀ; lda/ldb/ldc are the row strides of A, B and C as stored.
#pragma once

#include <cstdint>

namespace mpf::backend {

enum class Op { N, T };

void gemm(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// `batch` independent products; matrix i of A starts at A + i*stride_a (likewise B, C).
void gemm_strided_batched(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A,
                          int lda, int64_t stride_a, const float* B, int ldb, int64_t stride_b,
                          float beta, float* C, int ldc, int64_t stride_c, int batch);

// y = alpha · op(A) · x + beta · y with A (M x N) row-major (row stride lda): y and x have M and N
// elements for op N, N and M for op T. A product of one row (a generated token's layers), where
// a gemm would repack the whole matrix for a single use.
void gemv(Op op_a, int M, int N, float alpha, const float* A, int lda, const float* x, float beta,
          float* y);

// GPU backends: issue every product on this stream (a cudaStream_t), the one the Kokkos
// execution space runs kernels on, so products and kernels stay ordered. CPU: a no-op.
void bind_stream(void* cuda_stream);

// Threads the library may use for one (non-batched) product.
void set_num_threads(int threads);

// A one-line description for the log, e.g. "OpenBLAS 0.3.21 (OpenMP, 2 threads)".
const char* describe();

}  // namespace mpf::backend

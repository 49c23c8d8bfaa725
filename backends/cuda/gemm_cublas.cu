// CUDA backend: cuBLAS. cuBLAS is column-major; a row-major C = op(A)·op(B) is the column-major
// Cᵀ = op(B)ᵀ·op(A)ᵀ, so every call swaps the operands and M with N.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "backends/gemm.hpp"

namespace mpf::backend {
namespace {

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "fatal: %s failed with cuBLAS status %d\n", what, int(status));
    std::abort();
  }
}

cublasOperation_t to_cublas(Op op) {
  return op == Op::N ? CUBLAS_OP_N : CUBLAS_OP_T;
}

// One handle per process, created on first use and bound to the stream set by bind_stream.
cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    check(cublasCreate(&created), "cublasCreate");
    return created;
  }();
  return h;
}

}  // namespace

void bind_stream(void* cuda_stream) {
  check(cublasSetStream(handle(), static_cast<cudaStream_t>(cuda_stream)), "cublasSetStream");
}

void gemm(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  check(cublasSgemm(handle(), to_cublas(op_b), to_cublas(op_a), N, M, K, &alpha, B, ldb, A, lda,
                    &beta, C, ldc),
        "cublasSgemm");
}

void gemm_strided_batched(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A,
                          int lda, int64_t stride_a, const float* B, int ldb, int64_t stride_b,
                          float beta, float* C, int ldc, int64_t stride_c, int batch) {
  check(cublasSgemmStridedBatched(handle(), to_cublas(op_b), to_cublas(op_a), N, M, K, &alpha, B,
                                  ldb, stride_b, A, lda, stride_a, &beta, C, ldc, stride_c, batch),
        "cublasSgemmStridedBatched");
}

void gemv(Op op_a, int M, int N, float alpha, const float* A, int lda, const float* x, float beta,
          float* y) {
  // Row-major A (M x N) is column-major Aᵀ (N x M): op N on A is op T on cuBLAS' matrix.
  check(cublasSgemv(handle(), op_a == Op::N ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, &alpha, A, lda, x, 1,
                    &beta, y, 1),
        "cublasSgemv");
}

void set_num_threads(int) {}  // the GPU needs no host threads for a product

const char* describe() {
  static std::string text = [] {
    int version = 0;
    cublasGetVersion(handle(), &version);
    return "cuBLAS " + std::to_string(version);
  }();
  return text.c_str();
}

}  // namespace mpf::backend

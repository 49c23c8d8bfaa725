// CUDA backend: cuBLAS. cuBLAS is column-major; a row-major C = op(A)·op(B) is the column-major
// Cᵀ = op(B)ᵀ·op(A)ᵀ, so every call swaps the operands and M with N.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

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

// bf16 inputs, fp32 accumulation and output: GemmEx with CUDA_R_16BF operands, a CUDA_R_32F C and
// CUBLAS_COMPUTE_32F (tensor cores on sm_80 and later).
void gemm_bf16(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A, int lda,
               const bf16* B, int ldb, float beta, float* C, int ldc) {
  check(cublasGemmEx(handle(), to_cublas(op_b), to_cublas(op_a), N, M, K, &alpha, B, CUDA_R_16BF,
                     ldb, A, CUDA_R_16BF, lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx (bf16)");
}

void gemm_strided_batched_bf16(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A,
                               int lda, int64_t stride_a, const bf16* B, int ldb, int64_t stride_b,
                               float beta, float* C, int ldc, int64_t stride_c, int batch) {
  check(cublasGemmStridedBatchedEx(handle(), to_cublas(op_b), to_cublas(op_a), N, M, K, &alpha, B,
                                   CUDA_R_16BF, ldb, stride_b, A, CUDA_R_16BF, lda, stride_a, &beta,
                                   C, CUDA_R_32F, ldc, stride_c, batch, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx (bf16)");
}

// The same, C written as CUDA_R_16BF (cuBLAS rounds the fp32 sums once).
void gemm_bf16_out(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A, int lda,
                   const bf16* B, int ldb, bf16* C, int ldc) {
  const float beta = 0.0f;
  check(cublasGemmEx(handle(), to_cublas(op_b), to_cublas(op_a), N, M, K, &alpha, B, CUDA_R_16BF,
                     ldb, A, CUDA_R_16BF, lda, &beta, C, CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx (bf16 output)");
}

std::vector<std::string> available() {
  return {"cublas"};
}

bool select(const std::string& name) {
  return name == "cublas";
}

std::string selected() {
  return "cublas";
}

Kernels kernels() {
  Kernels k;
  int version = 0;
  cublasGetVersion(handle(), &version);
  k.library = "cuBLAS " + std::to_string(version);
  int device = 0, major = 0, minor = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  k.isa = "sm_" + std::to_string(major) + std::to_string(minor);
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) k.cpu = prop.name;
  // bf16 tensor cores arrived with Ampere (sm_80); older GPUs would run bf16 GEMMs emulated.
  if (major < 8) {
    k.bf16_missing = "this GPU (" + k.isa + ") has no bf16 tensor cores (sm_80 or later)";
  }
  return k;
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

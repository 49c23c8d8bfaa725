// CPU backend: OpenBLAS's cblas_sgemm.
#include <cblas.h>

#include <cstdio>
#include <string>

#include "backends/gemm.hpp"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace mpf::backend {
namespace {
CBLAS_TRANSPOSE to_cblas(Op op) {
  return op == Op::N ? CblasNoTrans : CblasTrans;
}
}  // namespace

void gemm(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, to_cblas(op_a), to_cblas(op_b), M, N, K, alpha, A, lda, B, ldb, beta,
              C, ldc);
}

void gemm_strided_batched(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A,
                          int lda, int64_t stride_a, const float* B, int ldb, int64_t stride_b,
                          float beta, float* C, int ldc, int64_t stride_c, int batch) {
  // The products are small (attention's T x T per head), too small for OpenBLAS to thread, so
  // the batch is spread over the threads instead; a nested call runs single-threaded in the
  // OpenMP build of OpenBLAS.
#pragma omp parallel for schedule(static)
  for (int i = 0; i < batch; ++i) {
    cblas_sgemm(CblasRowMajor, to_cblas(op_a), to_cblas(op_b), M, N, K, alpha, A + i * stride_a,
                lda, B + i * stride_b, ldb, beta, C + i * stride_c, ldc);
  }
}

void gemv(Op op_a, int M, int N, float alpha, const float* A, int lda, const float* x, float beta,
          float* y) {
  cblas_sgemv(CblasRowMajor, to_cblas(op_a), M, N, alpha, A, lda, x, 1, beta, y, 1);
}

void bind_stream(void*) {}  // host BLAS calls are synchronous: nothing to bind

void set_num_threads(int threads) {
  openblas_set_num_threads(threads);
}

const char* describe() {
  static std::string text = [] {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s, %d threads", openblas_get_config(),
                  openblas_get_num_threads());
    return std::string(buf);
  }();
  return text.c_str();
}

}  // namespace mpf::backend

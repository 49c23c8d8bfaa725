// The seam on the CPU: the libraries this build has (oneDNN first, when found, then OpenBLAS),
// one of them selected for the whole process. Both are OpenMP builds, so they, and the kernels,
// share one thread pool.
#include <cstdio>
#include <vector>

#include "backends/cpu/library.hpp"
#include "backends/gemm.hpp"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace mpf::backend {

namespace {
std::vector<cpu::Library*>& libraries() {
  static std::vector<cpu::Library*> list = {
#if MPIFORMER_HAVE_ONEDNN
    &cpu::onednn(),
#endif
    &cpu::openblas()
  };
  return list;
}

cpu::Library*& current() {
  static cpu::Library* library = libraries().front();
  return library;
}
}  // namespace

std::string cpu::missing_bf16_instructions(const CpuFeatures& cpu) {
  if (cpu.native_bf16()) return "";
  return "this CPU (" + (cpu.model.empty() ? std::string("unknown model") : cpu.model) + ": " +
         cpu.summary() + ") has no native bf16 dot products (AVX512_BF16 or AMX-BF16)";
}

void gemm(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  current()->gemm(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_strided_batched(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A,
                          int lda, int64_t stride_a, const float* B, int ldb, int64_t stride_b,
                          float beta, float* C, int ldc, int64_t stride_c, int batch) {
  current()->gemm_strided_batched(op_a, op_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b,
                                  beta, C, ldc, stride_c, batch);
}

void gemm_bf16(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A, int lda,
               const bf16* B, int ldb, float beta, float* C, int ldc) {
  current()->gemm_bf16(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_strided_batched_bf16(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A,
                               int lda, int64_t stride_a, const bf16* B, int ldb, int64_t stride_b,
                               float beta, float* C, int ldc, int64_t stride_c, int batch) {
  current()->gemm_strided_batched_bf16(op_a, op_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
                                       stride_b, beta, C, ldc, stride_c, batch);
}

void gemm_bf16_out(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A, int lda,
                   const bf16* B, int ldb, bf16* C, int ldc) {
  current()->gemm_bf16_out(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, C, ldc);
}

void gemv(Op op_a, int M, int N, float alpha, const float* A, int lda, const float* x, float beta,
          float* y) {
  current()->gemv(op_a, M, N, alpha, A, lda, x, beta, y);
}

std::vector<std::string> available() {
  std::vector<std::string> names;
  for (const cpu::Library* l : libraries()) names.push_back(l->name());
  return names;
}

bool select(const std::string& name) {
  for (cpu::Library* l : libraries()) {
    if (name == l->name()) {
      current() = l;
      return true;
    }
  }
  return false;
}

std::string selected() {
  return current()->name();
}

Kernels kernels() {
  const cpu::CpuFeatures& cpu = cpu::cpu_features();
  Kernels k = current()->kernels(cpu);
  k.cpu = (cpu.model.empty() ? std::string("CPU") : cpu.model) + ": " + cpu.summary();
  return k;
}

void bind_stream(void*) {}  // host libraries are synchronous: nothing to bind

void set_num_threads(int threads) {
  for (cpu::Library* l : libraries()) l->set_num_threads(threads);
}

const char* describe() {
  static std::string text;
#ifdef _OPENMP
  const int threads = omp_get_max_threads();
#else
  const int threads = 1;
#endif
  text = current()->describe() + ", " + std::to_string(threads) + " thread(s)";
  return text.c_str();
}

}  // namespace mpf::backend

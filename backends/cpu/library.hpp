// One CPU GEMM library behind the seam (backends/gemm.hpp). gemm_cpu.cpp holds the libraries this
// build has and forwards every call to the selected one; each library's file implements this.
#pragma once

#include <string>

#include "backends/cpu/cpu_features.hpp"
#include "backends/gemm.hpp"

namespace mpf::backend::cpu {

class Library {
 public:
  virtual ~Library() = default;
  virtual const char* name() const = 0;  // as select() takes it: "onednn"
  virtual void gemm(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) = 0;
  virtual void gemm_strided_batched(Op op_a, Op op_b, int M, int N, int K, float alpha,
                                    const float* A, int lda, int64_t stride_a, const float* B,
                                    int ldb, int64_t stride_b, float beta, float* C, int ldc,
                                    int64_t stride_c, int batch) = 0;
  // Called only when kernels().bf16_missing is empty.
  virtual void gemm_bf16(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A, int lda,
                         const bf16* B, int ldb, float beta, float* C, int ldc) = 0;
  virtual void gemm_strided_batched_bf16(Op op_a, Op op_b, int M, int N, int K, float alpha,
                                         const bf16* A, int lda, int64_t stride_a, const bf16* B,
                                         int ldb, int64_t stride_b, float beta, float* C, int ldc,
                                         int64_t stride_c, int batch) = 0;
  virtual void gemm_bf16_out(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A,
                             int lda, const bf16* B, int ldb, bf16* C, int ldc) = 0;
  virtual void gemv(Op op_a, int M, int N, float alpha, const float* A, int lda, const float* x,
                    float beta, float* y) = 0;
  virtual void set_num_threads(int threads) = 0;
  // The library's own description (version, build), without the thread count.
  virtual std::string describe() const = 0;
  // Its kernels on this CPU; `cpu` is filled by the caller.
  virtual Kernels kernels(const CpuFeatures& cpu) const = 0;
};

// The libraries compiled in (each defined in its own file).
Library& openblas();
#if MPIFORMER_HAVE_ONEDNN
Library& onednn();
#endif

// What a CPU without native bf16 products lacks, for Kernels::bf16_missing; empty if nothing.
std::string missing_bf16_instructions(const CpuFeatures& cpu);

}  // namespace mpf::backend::cpu

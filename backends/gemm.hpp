// The backend seam: matrix products, the one thing vendor libraries do better than a portable
// kernel. Implemented by backends/cpu (oneDNN and OpenBLAS, either chosen at run time) and
// backends/cuda (cuBLAS); nothing else in the project names these libraries.
//
// All matrices are row-major. C (M x N) = alpha * op(A) (M x K) * op(B) (K x N) + beta * C,
// op(X) = X or Xᵀ; lda/ldb/ldc are the row strides of A, B and C as stored. C is fp32 (but for
// gemm_bf16_out); A and B are fp32, or bf16 for the *_bf16 products (Megatron's mixed precision:
// bf16 inputs, products accumulated in fp32).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/bf16_bits.hpp"

namespace mpf::backend {

enum class Op { N, T };

using mpf::bf16;

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

// The same with bf16 inputs. Only when kernels().bf16_missing is empty.
void gemm_bf16(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A, int lda,
               const bf16* B, int ldb, float beta, float* C, int ldc);
void gemm_strided_batched_bf16(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A,
                               int lda, int64_t stride_a, const bf16* B, int ldb, int64_t stride_b,
                               float beta, float* C, int ldc, int64_t stride_c, int batch);
// C = alpha · op(A) · op(B) accumulated in fp32 and written rounded to bf16 (to nearest, ties to
// even): a product whose output is only read as a bf16 operand (the LM head's logits).
void gemm_bf16_out(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A, int lda,
                   const bf16* B, int ldb, bf16* C, int ldc);

// The libraries this build can run products with, the default first: "onednn", "openblas" on
// the CPU (oneDNN only when the build found it), "cublas" on CUDA.
std::vector<std::string> available();
// Runs every later product with `name`, one of available(); false (and no change) otherwise.
bool select(const std::string& name);
std::string selected();

// The kernels the selected library runs on this machine, detected (never assumed).
struct Kernels {
  std::string library;  // "oneDNN 2.6.3", "OpenBLAS 0.3.21"
  std::string isa;      // what its kernels use: "avx512_core_bf16", "Haswell (AVX2)"
  std::string cpu;      // what the processor offers: "AMD EPYC 9R45: AVX-512, AVX512_BF16"
  // Empty, or one sentence naming why the kernels are narrower than the CPU allows and the fix.
  std::string narrower;
  // Empty when bf16 products run natively, else what is missing (instructions or library).
  std::string bf16_missing;
};
Kernels kernels();

// GPU backends: issue every product on this stream (a cudaStream_t), the one the Kokkos
// execution space runs kernels on, so products and kernels stay ordered. CPU: a no-op.
void bind_stream(void* cuda_stream);

// Threads the libraries may use for one (non-batched) product.
void set_num_threads(int threads);

// A one-line description of the selected library for the log, e.g.
// "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Cooperlake MAX_THREADS=64, 2 threads"; valid until the
// next select().
const char* describe();

}  // namespace mpf::backend

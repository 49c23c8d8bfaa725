// CPU library: OpenBLAS's cblas_sgemm (the OpenMP build: its threads are the kernels' threads).
// Debian's OpenBLAS, and Spack's by default, export no bf16 GEMM: bf16 products need oneDNN.
#include <cblas.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backends/cpu/library.hpp"

namespace mpf::backend::cpu {

namespace {
CBLAS_TRANSPOSE to_cblas(Op op) {
  return op == Op::N ? CblasNoTrans : CblasTrans;
}

// The vector width of an OpenBLAS kernel family, from its core name (openblas_get_corename):
// 512, 256 (AVX2), 128 (the SSE families an OpenBLAS falls back to on a CPU it does not know) or
// 0 when the name says nothing we know.
int core_vector_bits(std::string core) {
  for (char& c : core) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const char* n : {"skylakex", "cooperlake", "sapphirerapids"}) {
    if (core == n) return 512;
  }
  for (const char* n : {"haswell", "zen", "excavator", "skylake"}) {
    if (core == n) return 256;
  }
  for (const char* n : {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "nano",
                        "barcelona", "opteron", "katmai", "coppermine", "northwood"}) {
    if (core == n) return 128;
  }
  return 0;
}

// The OpenBLAS kernel family that runs this CPU's widest vectors, for OPENBLAS_CORETYPE.
const char* widest_core(const CpuFeatures& cpu) {
  return cpu.avx512 ? (cpu.avx512_bf16 ? "Cooperlake" : "SkylakeX") : "Haswell";
}

class OpenBlas final : public Library {
 public:
  const char* name() const override { return "openblas"; }

  void gemm(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A, int lda,
            const float* B, int ldb, float beta, float* C, int ldc) override {
    cblas_sgemm(CblasRowMajor, to_cblas(op_a), to_cblas(op_b), M, N, K, alpha, A, lda, B, ldb, beta,
                C, ldc);
  }

  void gemm_strided_batched(Op op_a, Op op_b, int M, int N, int K, float alpha, const float* A,
                            int lda, int64_t stride_a, const float* B, int ldb, int64_t stride_b,
                            float beta, float* C, int ldc, int64_t stride_c, int batch) override {
    // The products are small (attention's T x T per head), too small for OpenBLAS to thread, so
    // the batch is spread over the threads instead; a nested call runs single-threaded in the
    // OpenMP build of OpenBLAS.
#pragma omp parallel for schedule(static)
    for (int i = 0; i < batch; ++i) {
      cblas_sgemm(CblasRowMajor, to_cblas(op_a), to_cblas(op_b), M, N, K, alpha, A + i * stride_a,
                  lda, B + i * stride_b, ldb, beta, C + i * stride_c, ldc);
    }
  }

  void gemm_bf16(Op, Op, int, int, int, float, const bf16*, int, const bf16*, int, float, float*,
                 int) override {
    std::fprintf(stderr, "fatal: the OpenBLAS backend has no bf16 products\n");
    std::abort();
  }

  void gemm_strided_batched_bf16(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A,
                                 int lda, int64_t, const bf16* B, int ldb, int64_t, float beta,
                                 float* C, int ldc, int64_t, int) override {
    gemm_bf16(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

  void gemm_bf16_out(Op op_a, Op op_b, int M, int N, int K, float alpha, const bf16* A, int lda,
                     const bf16* B, int ldb, bf16*, int ldc) override {
    gemm_bf16(op_a, op_b, M, N, K, alpha, A, lda, B, ldb, 0.0f, nullptr, ldc);
  }

  void gemv(Op op_a, int M, int N, float alpha, const float* A, int lda, const float* x, float beta,
            float* y) override {
    cblas_sgemv(CblasRowMajor, to_cblas(op_a), M, N, alpha, A, lda, x, 1, beta, y, 1);
  }

  void set_num_threads(int threads) override {
    openblas_set_num_threads(threads);
  }

  std::string describe() const override {
    return openblas_get_config();
  }

  Kernels kernels(const CpuFeatures& cpu) const override {
    Kernels k;
    const std::string core = openblas_get_corename();
    const int bits = core_vector_bits(core);
    k.library = "OpenBLAS " + version();
    k.isa = core + (bits == 512   ? " (AVX-512)"
                    : bits == 256 ? " (AVX2)"
                    : bits == 128 ? " (SSE)"
                                  : "");
    const int cpu_bits = cpu.avx512 ? 512 : cpu.avx2 ? 256 : 0;
    if (bits > 0 && cpu_bits > bits) {
      const char* forced = std::getenv("OPENBLAS_CORETYPE");
      if (forced && *forced) {
        k.narrower = std::string("OPENBLAS_CORETYPE=") + forced + " forces OpenBLAS's " + k.isa +
                     " kernels on a CPU with " + cpu.widest_vectors() +
                     ": unset OPENBLAS_CORETYPE (or use --gemm onednn where built)";
      } else {
        k.narrower = "OpenBLAS " + version() + " runs its " + k.isa + " kernels on a CPU with " +
                     cpu.widest_vectors() +
                     ": it does not know this CPU; set OPENBLAS_CORETYPE=" + widest_core(cpu) +
                     ", use --gemm onednn (a build with oneDNN) or a newer OpenBLAS";
      }
    }
    k.bf16_missing = missing_bf16_instructions(cpu);
    if (k.bf16_missing.empty()) {
      k.bf16_missing =
          "the OpenBLAS backend has no bf16 GEMM (oneDNN has: --gemm onednn, in a build with it)";
    }
    return k;
  }

 private:
  // "0.3.21" from "OpenBLAS 0.3.21 DYNAMIC_ARCH ...".
  static std::string version() {
    const std::string config = openblas_get_config();
    const size_t start = config.find(' ');
    if (start == std::string::npos) return "";
    const size_t end = config.find(' ', start + 1);
    return config.substr(start + 1, end == std::string::npos ? end : end - start - 1);
  }
};
}  // namespace

Library& openblas() {
  static OpenBlas library;
  return library;
}

}  // namespace mpf::backend::cpu

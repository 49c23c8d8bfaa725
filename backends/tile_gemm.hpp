// A small matrix product inside one host thread: the register-blocked micro-kernel of the fused
// attention's host shape (model/layers/attention.cpp), whose tiles (64 x 64 x head size) are too
// small for a library call to pay: measured on one Zen 5 core, 64-row tiles ran at 177 GFLOP/s
// here against 118 through OpenBLAS's sgemm and 98 through oneDNN's (docs/performance.md).
//
// C (M x N) = A (M x K) · B (K x N), or C += it, fp32, host memory only. A is read element by
// element, A(m, k) = A[m·sam + k·sak], so a transposed operand (sam = 1) costs nothing; B and C
// are row-major with row strides ldb and ldc. M must be a multiple of kTileRows and N of
// kTileCols (callers pad their tiles with zeros); K is any.
//
// The block is kTileRows rows by two vector registers, accumulated in registers over K: the
// vector width is the widest this build's target offers (AVX-512: 16 floats; else 8, which
// compilers lower to AVX2 or to pairs of SSE registers).
#pragma once

#include <cstdint>
#include <cstring>

namespace mpf::backend {

#if defined(__AVX512F__)
inline constexpr int kTileLanes = 16;
inline constexpr int kTileRows = 8;  // 8 x 2 accumulators of the 32 vector registers
#else
inline constexpr int kTileLanes = 8;
inline constexpr int kTileRows = 4;  // 4 x 2 accumulators of the 16
#endif
inline constexpr int kTileCols = 2 * kTileLanes;

namespace tile_detail {
typedef float Lanes __attribute__((vector_size(kTileLanes * sizeof(float))));

inline Lanes load(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, Lanes v) {
  std::memcpy(p, &v, sizeof v);
}

inline void block(int K, const float* __restrict a, int64_t sam, int64_t sak,
                  const float* __restrict b, int64_t ldb, float* __restrict c, int64_t ldc,
                  bool accumulate) {
  Lanes acc[kTileRows][2];
  for (int m = 0; m < kTileRows; ++m) {
    for (int n = 0; n < 2; ++n) {
      acc[m][n] = accumulate ? load(c + m * ldc + n * kTileLanes) : Lanes{};
    }
  }
  for (int k = 0; k < K; ++k) {
    const float* bk = b + k * ldb;
    const Lanes b0 = load(bk), b1 = load(bk + kTileLanes);
    for (int m = 0; m < kTileRows; ++m) {
      const float x = a[m * sam + k * sak];
      acc[m][0] += x * b0;
      acc[m][1] += x * b1;
    }
  }
  for (int m = 0; m < kTileRows; ++m) {
    for (int n = 0; n < 2; ++n) store(c + m * ldc + n * kTileLanes, acc[m][n]);
  }
}
}  // namespace tile_detail

inline void tile_gemm(int M, int N, int K, const float* A, int64_t sam, int64_t sak, const float* B,
                      int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  for (int n0 = 0; n0 < N; n0 += kTileCols) {
    for (int m0 = 0; m0 < M; m0 += kTileRows) {
      tile_detail::block(K, A + m0 * sam, sam, sak, B + n0, ldb, C + m0 * ldc + n0, ldc,
                         accumulate);
    }
  }
}

}  // namespace mpf::backend

// ---- bf16 tile products (backends/cpu/tile_gemm_bf16.cpp) ---------------------------------------
// The same products on bf16 operands (matmul.hpp's bf16: both inputs rounded to bf16, to nearest
// even, products accumulated in fp32), twice the fp32 kernel's rate where the CPU has AVX512_BF16
// (vdpbf16ps: 16 lanes of two products each), chosen at run time: the binary still runs on a CPU
// without it, where a portable kernel runs on the same packed operands.
//
// Operands are packed in pairs along the summed index: a Bf16Pair holds the bf16 of X(k) in its
// high half and of X(k + 1) in its low half (k even), zero past the end. High first because
// vdpbf16ps adds its pair's high product to the accumulator first, then its low one, each rounded
// to fp32 (the order Intel's pseudo-code gives, measured on Zen 5): a product of two bf16s is exact
// in fp32, so each sum is then the fp32 kernel's k-th, in its order, and the results are its bits
// except where vdpbf16ps flushes: bf16 subnormal inputs read as zero and subnormal sums become zero
// (magnitudes under 1.2e-38).
namespace mpf::backend {

using Bf16Pair = uint32_t;

// Whether bf16 tile products run on AVX512_BF16 (detected at run time; the portable kernel else).
bool tile_bf16_native();
// "AVX512_BF16" or "portable".
const char* tile_bf16_kernel();

// C (M x N) = A·B, or C += it, K = 2·KP: A(m, p) = A[m·sam + p·sak] holds A(m, 2p) and
// A(m, 2p + 1); B[p·ldb + n] holds B(2p, n) and B(2p + 1, n). M a multiple of kTileRows, N of
// kTileCols, as tile_gemm.
void tile_gemm_bf16(int M, int N, int KP, const Bf16Pair* A, int64_t sam, int64_t sak,
                    const Bf16Pair* B, int64_t ldb, float* C, int64_t ldc, bool accumulate);

// The packings, from fp32 X (row r at src + r·lds, `valid_rows` rows of `cols` values; zeros past
// them), rounding to bf16 as core/bf16.hpp's to_bf16:
// pairs along a row, dst[r·ldd + p] = (X(r, 2p), X(r, 2p + 1)), r < rows, p < pairs: an A
// operand, or a B operand read transposed as A(m, p) with sam = 1, sak = ldd;
void pack_bf16_pairs(Bf16Pair* dst, int64_t ldd, const float* src, int64_t lds, int valid_rows,
                     int cols, int rows, int pairs);
// the same pairs transposed, dst[p·ldd + r]: the B operand of X·Yᵀ's Yᵀ;
void pack_bf16_pairs_transposed(Bf16Pair* dst, int64_t ldd, const float* src, int64_t lds,
                                int valid_rows, int cols, int rows, int pairs);
// pairs down a column, dst[p·ldd + c] = (X(2p, c), X(2p + 1, c)), p < pairs, c < padded_cols: a
// B operand, or the A operand of Xᵀ·Y read as A(m, p) with sam = 1, sak = ldd.
void pack_bf16_column_pairs(Bf16Pair* dst, int64_t ldd, const float* src, int64_t lds,
                            int valid_rows, int cols, int pairs, int padded_cols);

}  // namespace mpf::backend

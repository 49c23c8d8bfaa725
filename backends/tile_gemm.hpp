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

// bf16 tile products (backends/tile_gemm.hpp): vdpbf16ps where the CPU has AVX512_BF16, chosen at
// run time, so the AVX-512 code is compiled by function (target attributes), not for the whole
// binary; a portable kernel on the same packed operands elsewhere.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_features.hpp"
#include "backends/tile_gemm.hpp"

#if (defined(__x86_64__) || defined(__i386__)) && !defined(__CUDACC__) && defined(__GNUC__)
#define MPF_TILE_AVX512_BF16 1
#include <immintrin.h>
#endif

namespace mpf::backend {

namespace {

// ---- the portable kernel and packings -----------------------------------------------------------

// Rounded to nearest, ties to even; NaN stays NaN (core/bf16.hpp's to_bf16).
inline uint32_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}
inline Bf16Pair pair_of(float hi, float lo) {
  return (bf16_bits(hi) << 16) | bf16_bits(lo);
}

typedef uint32_t PairLanes __attribute__((vector_size(kTileLanes * sizeof(uint32_t))));
typedef float FloatLanes __attribute__((vector_size(kTileLanes * sizeof(float))));

template <class V, class P>
inline V load_as(const P* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline FloatLanes high_half(PairLanes v) {
  const PairLanes h = v & 0xffff0000u;
  FloatLanes f;
  std::memcpy(&f, &h, sizeof f);
  return f;
}
inline FloatLanes low_half(PairLanes v) {
  const PairLanes l = v << 16;
  FloatLanes f;
  std::memcpy(&f, &l, sizeof f);
  return f;
}
inline float high_half(Bf16Pair v) {
  const uint32_t h = v & 0xffff0000u;
  float f;
  std::memcpy(&f, &h, sizeof f);
  return f;
}
inline float low_half(Bf16Pair v) {
  const uint32_t l = v << 16;
  float f;
  std::memcpy(&f, &l, sizeof f);
  return f;
}

// tile_gemm's block on pairs: the high product added first, then the low one, each product exact
// in fp32, so the fp32 kernel's bits.
void portable_block(int KP, const Bf16Pair* __restrict a, int64_t sam, int64_t sak,
                    const Bf16Pair* __restrict b, int64_t ldb, float* __restrict c, int64_t ldc,
                    bool accumulate) {
  FloatLanes acc[kTileRows][2];
  for (int m = 0; m < kTileRows; ++m) {
    for (int n = 0; n < 2; ++n) {
      acc[m][n] = accumulate ? load_as<FloatLanes>(c + m * ldc + n * kTileLanes) : FloatLanes{};
    }
  }
  for (int p = 0; p < KP; ++p) {
    const PairLanes b0 = load_as<PairLanes>(b + p * ldb),
                    b1 = load_as<PairLanes>(b + p * ldb + kTileLanes);
    const FloatLanes h0 = high_half(b0), h1 = high_half(b1), l0 = low_half(b0), l1 = low_half(b1);
    for (int m = 0; m < kTileRows; ++m) {
      const Bf16Pair x = a[m * sam + p * sak];
      const float xh = high_half(x), xl = low_half(x);
      acc[m][0] += xh * h0;
      acc[m][1] += xh * h1;
      acc[m][0] += xl * l0;
      acc[m][1] += xl * l1;
    }
  }
  for (int m = 0; m < kTileRows; ++m) {
    for (int n = 0; n < 2; ++n)
      std::memcpy(c + m * ldc + n * kTileLanes, &acc[m][n], sizeof(FloatLanes));
  }
}

void portable_gemm(int M, int N, int KP, const Bf16Pair* A, int64_t sam, int64_t sak,
                   const Bf16Pair* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  for (int n0 = 0; n0 < N; n0 += kTileCols) {
    for (int m0 = 0; m0 < M; m0 += kTileRows) {
      portable_block(KP, A + m0 * sam, sam, sak, B + n0, ldb, C + m0 * ldc + n0, ldc, accumulate);
    }
  }
}

inline float at(const float* src, int64_t lds, int valid_rows, int cols, int r, int c) {
  return r < valid_rows && c < cols ? src[r * lds + c] : 0.0f;
}

// dst[r·sr + p·sp] = (X(r, 2p), X(r, 2p + 1)).
void portable_pairs(Bf16Pair* dst, int64_t sr, int64_t sp, const float* src, int64_t lds,
                    int valid_rows, int cols, int rows, int pairs) {
  for (int r = 0; r < rows; ++r) {
    for (int p = 0; p < pairs; ++p) {
      dst[r * sr + p * sp] = pair_of(at(src, lds, valid_rows, cols, r, 2 * p),
                                     at(src, lds, valid_rows, cols, r, 2 * p + 1));
    }
  }
}

void portable_column_pairs(Bf16Pair* dst, int64_t ldd, const float* src, int64_t lds,
                           int valid_rows, int cols, int pairs, int padded_cols) {
  for (int p = 0; p < pairs; ++p) {
    for (int c = 0; c < padded_cols; ++c) {
      dst[p * ldd + c] = pair_of(at(src, lds, valid_rows, cols, 2 * p, c),
                                 at(src, lds, valid_rows, cols, 2 * p + 1, c));
    }
  }
}

#if defined(MPF_TILE_AVX512_BF16)
// ---- AVX512_BF16 --------------------------------------------------------------------------------
#define MPF_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

// An R-row by V-vector block (16 columns a vector), accumulated in registers over the pairs;
// kRowA: A's pairs consecutive (sak = 1); kAdd: C += the product. Compile-time both, so each
// instance is one loop with no merge of its accumulators' first values, which the compiler
// otherwise keeps on the stack and copies in and out around the loop.
template <int R, int V, bool kRowA, bool kAdd>
MPF_BF16_TARGET inline void native_block(int KP, const Bf16Pair* __restrict a, int64_t sam,
                                         int64_t sak_, const Bf16Pair* __restrict b, int64_t ldb,
                                         float* __restrict c, int64_t ldc) {
  const int64_t sak = kRowA ? 1 : sak_;
  __m512 acc[R][V];
  for (int m = 0; m < R; ++m) {
    for (int n = 0; n < V; ++n) {
      acc[m][n] = kAdd ? _mm512_loadu_ps(c + m * ldc + 16 * n) : _mm512_setzero_ps();
    }
  }
  int p = 0;
  do {  // KP >= 1 (native_gemm), so no path skips the loop to merge with it at its end
    __m512bh bv[V];
    for (int n = 0; n < V; ++n) bv[n] = (__m512bh)_mm512_loadu_si512(b + p * ldb + 16 * n);
    for (int m = 0; m < R; ++m) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(int(a[m * sam + p * sak]));
      for (int n = 0; n < V; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], x, bv[n]);
    }
  } while (++p < KP);
  for (int m = 0; m < R; ++m) {
    for (int n = 0; n < V; ++n) _mm512_storeu_ps(c + m * ldc + 16 * n, acc[m][n]);
  }
}

// 8 rows by 32 columns (16 accumulators of the 32 registers), with 4-row and 16-column edges for
// a build whose tile multiples are narrower (kTileRows 4, kTileCols 16 without -mavx512f).
template <bool kRowA, bool kAdd>
MPF_BF16_TARGET void native_gemm(int M, int N, int KP, const Bf16Pair* A, int64_t sam, int64_t sak,
                                 const Bf16Pair* B, int64_t ldb, float* C, int64_t ldc) {
  if (KP < 1) {  // an empty sum
    for (int m = 0; m < M && !kAdd; ++m) std::fill(C + m * ldc, C + m * ldc + N, 0.0f);
    return;
  }
  for (int n0 = 0; n0 < N;) {
    const bool wide = N - n0 >= 32;
    for (int m0 = 0; m0 < M;) {
      const bool tall = M - m0 >= 8;
      const Bf16Pair* a = A + m0 * sam;
      const Bf16Pair* b = B + n0;
      float* c = C + m0 * ldc + n0;
      if (tall && wide)
        native_block<8, 2, kRowA, kAdd>(KP, a, sam, sak, b, ldb, c, ldc);
      else if (tall)
        native_block<8, 1, kRowA, kAdd>(KP, a, sam, sak, b, ldb, c, ldc);
      else if (wide)
        native_block<4, 2, kRowA, kAdd>(KP, a, sam, sak, b, ldb, c, ldc);
      else
        native_block<4, 1, kRowA, kAdd>(KP, a, sam, sak, b, ldb, c, ldc);
      m0 += tall ? 8 : 4;
    }
    n0 += wide ? 32 : 16;
  }
}

// The first n of 16 lanes.
MPF_BF16_TARGET inline __mmask16 lanes(int n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// 16 pairs of a row from 32 floats (`n` of them valid): vcvtne2ps2bf16 rounds as to_bf16 (to
// nearest even; it reads fp32 subnormals as zero, which vdpbf16ps does with bf16 ones anyway),
// and the rotation puts each pair's first value in its high half.
MPF_BF16_TARGET inline __m512i row_pairs(const float* s, int n) {
  const __m512 lo = _mm512_maskz_loadu_ps(lanes(n), s);
  const __m512 hi = _mm512_maskz_loadu_ps(lanes(n - 16), s + 16);
  return _mm512_maskz_rol_epi32(0xffff, (__m512i)_mm512_cvtne2ps_pbh(hi, lo), 16);
}

MPF_BF16_TARGET void native_pairs(Bf16Pair* dst, int64_t ldd, const float* src, int64_t lds,
                                  int valid_rows, int cols, int rows, int pairs) {
  for (int r = 0; r < rows; ++r) {
    for (int p0 = 0; p0 < pairs; p0 += 16) {
      const __m512i v = r < valid_rows ? row_pairs(src + r * lds + 2 * p0, cols - 2 * p0)
                                       : _mm512_setzero_si512();
      _mm512_mask_storeu_epi32(dst + r * ldd + p0, lanes(pairs - p0), v);
    }
  }
}

// A 16 x 16 transpose of 32-bit lanes in four rounds: at each, the off-diagonal s x s blocks of
// every 2s x 2s block trade places.
MPF_BF16_TARGET inline void transpose16(__m512i r[16]) {
  for (int s = 1; s < 16; s *= 2) {
    alignas(64) int keep[16], take[16];
    for (int l = 0; l < 16; ++l) {
      keep[l] = (l & s) ? 16 + l - s : l;
      take[l] = (l & s) ? 16 + l : l + s;
    }
    const __m512i ik = _mm512_load_si512(keep), it = _mm512_load_si512(take);
    for (int i = 0; i < 16; ++i) {
      if (i & s) continue;
      const __m512i x = r[i], y = r[i + s];
      r[i] = _mm512_permutex2var_epi32(x, ik, y);
      r[i + s] = _mm512_permutex2var_epi32(x, it, y);
    }
  }
}

MPF_BF16_TARGET void native_pairs_transposed(Bf16Pair* dst, int64_t ldd, const float* src,
                                             int64_t lds, int valid_rows, int cols, int rows,
                                             int pairs) {
  for (int r0 = 0; r0 < rows; r0 += 16) {
    for (int p0 = 0; p0 < pairs; p0 += 16) {
      __m512i v[16];
      for (int i = 0; i < 16; ++i) {
        v[i] = r0 + i < valid_rows ? row_pairs(src + (r0 + i) * lds + 2 * p0, cols - 2 * p0)
                                   : _mm512_setzero_si512();
      }
      transpose16(v);
      const __mmask16 m = lanes(rows - r0);
      for (int i = 0; i < 16 && p0 + i < pairs; ++i) {
        _mm512_mask_storeu_epi32(dst + (p0 + i) * ldd + r0, m, v[i]);
      }
    }
  }
}

MPF_BF16_TARGET void native_column_pairs(Bf16Pair* dst, int64_t ldd, const float* src, int64_t lds,
                                         int valid_rows, int cols, int pairs, int padded_cols) {
  // Word 2c of a pair vector is X(2p + 1, c) (the low half), word 2c + 1 is X(2p, c).
  alignas(64) int16_t order[32];
  for (int c = 0; c < 16; ++c) {
    order[2 * c] = int16_t(c);
    order[2 * c + 1] = int16_t(16 + c);
  }
  const __m512i interleave = _mm512_load_si512(order);
  for (int p = 0; p < pairs; ++p) {
    const bool first = 2 * p < valid_rows, second = 2 * p + 1 < valid_rows;
    for (int c0 = 0; c0 < padded_cols; c0 += 16) {
      const __mmask16 m = lanes(cols - c0);
      const __m512 x =
          first ? _mm512_maskz_loadu_ps(m, src + 2 * p * lds + c0) : _mm512_setzero_ps();
      const __m512 y =
          second ? _mm512_maskz_loadu_ps(m, src + (2 * p + 1) * lds + c0) : _mm512_setzero_ps();
      // Words 0-15 the bf16s of y, 16-31 those of x.
      const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(x, y);
      _mm512_mask_storeu_epi32(dst + p * ldd + c0, lanes(padded_cols - c0),
                               _mm512_permutexvar_epi16(interleave, both));
    }
  }
}
#endif

bool detect_native() {
#if defined(MPF_TILE_AVX512_BF16)
  return cpu::cpu_features().avx512_bf16;
#else
  return false;
#endif
}

}  // namespace

bool tile_bf16_native() {
  static const bool native = detect_native();
  return native;
}

const char* tile_bf16_kernel() {
  return tile_bf16_native() ? "AVX512_BF16" : "portable";
}

void tile_gemm_bf16(int M, int N, int KP, const Bf16Pair* A, int64_t sam, int64_t sak,
                    const Bf16Pair* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
#if defined(MPF_TILE_AVX512_BF16)
  if (tile_bf16_native()) {
    if (sak == 1 && accumulate)
      return native_gemm<true, true>(M, N, KP, A, sam, sak, B, ldb, C, ldc);
    if (sak == 1) return native_gemm<true, false>(M, N, KP, A, sam, sak, B, ldb, C, ldc);
    if (accumulate) return native_gemm<false, true>(M, N, KP, A, sam, sak, B, ldb, C, ldc);
    return native_gemm<false, false>(M, N, KP, A, sam, sak, B, ldb, C, ldc);
  }
#endif
  portable_gemm(M, N, KP, A, sam, sak, B, ldb, C, ldc, accumulate);
}

void pack_bf16_pairs(Bf16Pair* dst, int64_t ldd, const float* src, int64_t lds, int valid_rows,
                     int cols, int rows, int pairs) {
#if defined(MPF_TILE_AVX512_BF16)
  if (tile_bf16_native()) return native_pairs(dst, ldd, src, lds, valid_rows, cols, rows, pairs);
#endif
  portable_pairs(dst, ldd, 1, src, lds, valid_rows, cols, rows, pairs);
}

void pack_bf16_pairs_transposed(Bf16Pair* dst, int64_t ldd, const float* src, int64_t lds,
                                int valid_rows, int cols, int rows, int pairs) {
#if defined(MPF_TILE_AVX512_BF16)
  if (tile_bf16_native()) {
    return native_pairs_transposed(dst, ldd, src, lds, valid_rows, cols, rows, pairs);
  }
#endif
  portable_pairs(dst, 1, ldd, src, lds, valid_rows, cols, rows, pairs);
}

void pack_bf16_column_pairs(Bf16Pair* dst, int64_t ldd, const float* src, int64_t lds,
                            int valid_rows, int cols, int pairs, int padded_cols) {
#if defined(MPF_TILE_AVX512_BF16)
  if (tile_bf16_native()) {
    return native_column_pairs(dst, ldd, src, lds, valid_rows, cols, pairs, padded_cols);
  }
#endif
  portable_column_pairs(dst, ldd, src, lds, valid_rows, cols, pairs, padded_cols);
}

}  // namespace mpf::backend

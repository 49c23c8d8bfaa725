// The GEMM seam with every library this build has (oneDNN and OpenBLAS on the CPU), against the
// definition: fp32 products, and bf16 products (where the library has them natively) against the
// definition on bf16-rounded inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/gemm.hpp"
#include "backends/tile_gemm.hpp"
#include "core/bf16.hpp"
#include "model/layers/matmul.hpp"
#include "test_helpers.hpp"

namespace mpf {

using backend::Op;

namespace {
// C = alpha·op(A)·op(B) + beta·C, row-major, in double, straight from the definition.
void naive(Op ta, Op tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
           int ldb, float beta, float* C, int ldc) {
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double acc = 0;
      for (int k = 0; k < K; ++k) {
        const float a = ta == Op::N ? A[i * lda + k] : A[k * lda + i];
        const float b = tb == Op::N ? B[k * ldb + j] : B[j * ldb + k];
        acc += double(a) * b;
      }
      C[i * ldc + j] = float(alpha * acc + beta * C[i * ldc + j]);
    }
  }
}

std::vector<bf16> rounded(std::vector<float>& x) {  // x becomes its bf16 values
  std::vector<bf16> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    bits[i] = to_bf16(x[i]);
    x[i] = from_bf16(bits[i]);
  }
  return bits;
}

// f(name) with each GEMM library of this build that has native bf16 products selected, then the
// library selected before; whether there was one.
template <class F>
bool with_each_bf16_library(const F& f) {
  const std::string previous = backend::selected();
  bool any = false;
  for (const std::string& name : backend::available()) {
    backend::select(name);
    if (!backend::kernels().bf16_missing.empty()) continue;
    any = true;
    f(name);
  }
  backend::select(previous);
  return any;
}

// Runs each test once per library of the build, restoring the selection afterwards.
class Gemm : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    previous_ = backend::selected();
    ASSERT_TRUE(backend::select(GetParam()));
  }
  void TearDown() override { backend::select(previous_); }
  bool has_bf16() const { return backend::kernels().bf16_missing.empty(); }

 private:
  std::string previous_;
};
}  // namespace

TEST_P(Gemm, AllTransposesWithStridesMatchTheDefinition) {
  const int M = 37, N = 29, K = 41, pad = 3;
  for (Op ta : {Op::N, Op::T}) {
    for (Op tb : {Op::N, Op::T}) {
      const int lda = (ta == Op::N ? K : M) + pad, ldb = (tb == Op::N ? N : K) + pad, ldc = N + pad;
      const std::vector<float> A = test::to_host(test::random_slab("A", 64 * lda));
      const std::vector<float> B = test::to_host(test::random_slab("B", 64 * ldb));
      std::vector<float> C = test::to_host(test::random_slab("C", M * ldc)), R = C;
      backend::gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, C.data(), ldc);
      naive(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, R.data(), ldc);
      for (size_t i = 0; i < C.size(); ++i) ASSERT_NEAR(C[i], R[i], 1e-4) << i;
    }
  }
}

TEST_P(Gemm, StridedBatchedIsALoopOfGemms) {
  const int M = 8, N = 6, K = 5, batch = 7;
  const int64_t sa = M * K + 2, sb = K * N + 1, sc = M * N + 3;
  const std::vector<float> A = test::to_host(test::random_slab("A", sa * batch));
  const std::vector<float> B = test::to_host(test::random_slab("B", sb * batch));
  std::vector<float> C(sc * batch, 1.0f), R = C;
  backend::gemm_strided_batched(Op::N, Op::T, M, N, K, 1.5f, A.data(), K, sa, B.data(), K, sb, 0.0f,
                                C.data(), N, sc, batch);
  for (int i = 0; i < batch; ++i) {
    naive(Op::N, Op::T, M, N, K, 1.5f, A.data() + i * sa, K, B.data() + i * sb, K, 0.0f,
          R.data() + i * sc, N);
  }
  for (size_t i = 0; i < C.size(); ++i) ASSERT_NEAR(C[i], R[i], 1e-4) << i;
}

// A matrix-vector product is the gemm of one column: y (rows x 1) = op(A) · x (cols x 1).
TEST_P(Gemm, GemvIsAOneColumnGemm) {
  const int M = 37, N = 29, lda = N + 3;
  const std::vector<float> A = test::to_host(test::random_slab("A", M * lda));
  for (Op op : {Op::N, Op::T}) {
    const int rows = op == Op::N ? M : N, cols = op == Op::N ? N : M;
    const std::vector<float> x = test::to_host(test::random_slab("x", cols));
    std::vector<float> y = test::to_host(test::random_slab("y", rows)), R = y;
    backend::gemv(op, M, N, 0.5f, A.data(), lda, x.data(), 0.25f, y.data());
    naive(op, Op::N, rows, 1, cols, 0.5f, A.data(), lda, x.data(), 1, 0.25f, R.data(), 1);
    for (int i = 0; i < rows; ++i) ASSERT_NEAR(y[i], R[i], 1e-4) << i;
  }
}

// bf16 × bf16 products are exact in fp32 (8 + 8 significant bits), so against the definition on
// the rounded inputs only the order of the fp32 sums differs: fp32's tolerance applies.
TEST_P(Gemm, Bf16ProductsAreFp32ProductsOfRoundedInputs) {
  if (!has_bf16()) GTEST_SKIP() << backend::kernels().bf16_missing;
  const int M = 37, N = 29, K = 41, pad = 3;
  for (Op ta : {Op::N, Op::T}) {
    for (Op tb : {Op::N, Op::T}) {
      const int lda = (ta == Op::N ? K : M) + pad, ldb = (tb == Op::N ? N : K) + pad, ldc = N + pad;
      std::vector<float> A = test::to_host(test::random_slab("A", 64 * lda));
      std::vector<float> B = test::to_host(test::random_slab("B", 64 * ldb));
      const std::vector<bf16> A16 = rounded(A), B16 = rounded(B);
      std::vector<float> C = test::to_host(test::random_slab("C", M * ldc)), R = C;
      backend::gemm_bf16(ta, tb, M, N, K, 1.0f, A16.data(), lda, B16.data(), ldb, 0.5f, C.data(),
                         ldc);
      naive(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.5f, R.data(), ldc);
      for (size_t i = 0; i < C.size(); ++i) ASSERT_NEAR(C[i], R[i], 1e-4) << i;
    }
  }
  // The batched form, with attention's layout: heads side by side in packed rows.
  const int T = 9, hs = 4, heads = 3, ld = 3 * heads * hs;
  std::vector<float> qkv = test::to_host(test::random_slab("qkv", T * ld));
  const std::vector<bf16> qkv16 = rounded(qkv);
  std::vector<float> S(heads * T * T, 0.0f), R = S;
  backend::gemm_strided_batched_bf16(Op::N, Op::T, T, T, hs, 1.0f, qkv16.data(), ld, hs,
                                     qkv16.data() + heads * hs, ld, hs, 0.0f, S.data(), T, T * T,
                                     heads);
  for (int h = 0; h < heads; ++h) {
    naive(Op::N, Op::T, T, T, hs, 1.0f, qkv.data() + h * hs, ld, qkv.data() + heads * hs + h * hs,
          ld, 0.0f, R.data() + h * T * T, T);
  }
  for (size_t i = 0; i < S.size(); ++i) ASSERT_NEAR(S[i], R[i], 1e-4) << i;
}

// A bf16 output (the LM head's logits): the fp32 product rounded once to bf16, within half a
// unit in its 8th significant bit (and the fp32 sums' order), in every transpose; the padding
// between rows left as it was.
TEST_P(Gemm, Bf16OutputIsTheProductRoundedOnce) {
  if (!has_bf16()) GTEST_SKIP() << backend::kernels().bf16_missing;
  const int M = 37, N = 29, K = 41, pad = 3;
  for (Op ta : {Op::N, Op::T}) {
    for (Op tb : {Op::N, Op::T}) {
      const int lda = (ta == Op::N ? K : M) + pad, ldb = (tb == Op::N ? N : K) + pad, ldc = N + pad;
      std::vector<float> A = test::to_host(test::random_slab("A", 64 * lda));
      std::vector<float> B = test::to_host(test::random_slab("B", 64 * ldb));
      const std::vector<bf16> A16 = rounded(A), B16 = rounded(B);
      std::vector<bf16> C(M * ldc, bf16(0x7fc1));
      std::vector<float> R(M * ldc, 0.0f);
      backend::gemm_bf16_out(ta, tb, M, N, K, 1.0f, A16.data(), lda, B16.data(), ldb, C.data(),
                             ldc);
      naive(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, R.data(), ldc);
      for (int m = 0; m < M; ++m) {
        for (int n = 0; n < ldc; ++n) {
          const size_t i = size_t(m) * ldc + n;
          if (n >= N) {
            ASSERT_EQ(C[i], bf16(0x7fc1)) << i;
          } else {
            ASSERT_NEAR(from_bf16(C[i]), R[i], std::ldexp(std::fabs(R[i]), -8) + 1e-4) << i;
          }
        }
      }
    }
  }
}

// The fused attention's bf16 tile kernel (backends/tile_gemm.hpp) against a scalar loop over the
// same products: each bf16 x bf16 product is exact in fp32, summed in k order in fp32 as the fp32
// micro-kernel sums (vdpbf16ps too, high half of a pair first: the bits agree where its flushing
// of subnormals does not enter). Every packing, A read directly and transposed, K odd (a pair
// padded with zero), rows past the valid ones, with and without accumulating.
TEST(TileGemmBf16, EqualsTheScalarSumOfTheSameProducts) {
  using backend::Bf16Pair;
  if (!backend::tile_bf16_native()) {
    std::printf(
        "note: this CPU has no AVX512_BF16 (%s): the portable bf16 tile kernel is checked\n",
        backend::tile_bf16_kernel());
  }
  const int R = backend::kTileRows, Cn = backend::kTileCols;
  int64_t checked = 0, same_bits = 0;
  for (const int M : {R, 3 * R}) {
    for (const int N : {Cn, 2 * Cn}) {
      for (const int K : {1, 2, 7, 33, 64}) {
        const int KP = (K + 1) / 2, valid_m = M - 3;  // A's last rows: zero padding
        std::vector<float> A = test::to_host(test::random_slab("A", int64_t(M) * K, 1.0f, 11));
        std::vector<float> B = test::to_host(test::random_slab("B", int64_t(K) * N, 1.0f, 12));
        std::vector<float> C0 = test::to_host(test::random_slab("C", int64_t(M) * N, 1.0f, 13));
        std::vector<float> At(size_t(K) * M), Bt(size_t(N) * K);
        for (int m = 0; m < M; ++m) {
          for (int k = 0; k < K; ++k) At[size_t(k) * M + m] = A[size_t(m) * K + k];
        }
        for (int k = 0; k < K; ++k) {
          for (int n = 0; n < N; ++n) Bt[size_t(n) * K + k] = B[size_t(k) * N + n];
        }
        // A by rows (sam = KP) and transposed (from Aᵀ's column pairs, sam = 1); B by column
        // pairs and from Bᵀ's row pairs transposed.
        std::vector<Bf16Pair> Ar(size_t(M) * KP), Ac(size_t(KP) * M), Bc(size_t(KP) * N),
            Bx(size_t(KP) * N);
        backend::pack_bf16_pairs(Ar.data(), KP, A.data(), K, valid_m, K, M, KP);
        backend::pack_bf16_column_pairs(Ac.data(), M, At.data(), M, K, valid_m, KP, M);
        backend::pack_bf16_column_pairs(Bc.data(), N, B.data(), N, K, N, KP, N);
        backend::pack_bf16_pairs_transposed(Bx.data(), N, Bt.data(), K, N, K, N, KP);
        rounded(A);
        rounded(B);
        for (const bool accumulate : {false, true}) {
          for (int variant = 0; variant < 2; ++variant) {
            std::vector<float> C = C0;
            if (variant == 0) {
              backend::tile_gemm_bf16(M, N, KP, Ar.data(), KP, 1, Bc.data(), N, C.data(), N,
                                      accumulate);
            } else {
              backend::tile_gemm_bf16(M, N, KP, Ac.data(), 1, M, Bx.data(), N, C.data(), N,
                                      accumulate);
            }
            for (int m = 0; m < M; ++m) {
              for (int n = 0; n < N; ++n) {
                float want = accumulate ? C0[size_t(m) * N + n] : 0.0f;
                double bound = std::fabs(want);
                for (int k = 0; k < K && m < valid_m; ++k) {
                  const float p = A[size_t(m) * K + k] * B[size_t(k) * N + n];  // exact
                  want += p;
                  bound += std::fabs(p);
                }
                const float got = C[size_t(m) * N + n];
                // fp32 rounding of K + 1 sums
                ASSERT_LE(std::fabs(double(got) - want), (K + 1) * 0x1p-24 * bound)
                    << M << " " << N << " " << K << " " << accumulate << " " << variant << " (" << m
                    << ", " << n << ")";
                ++checked;
                same_bits += got == want;
              }
            }
          }
        }
      }
    }
  }
  std::printf("%s bf16 tile kernel: %lld of %lld elements the scalar sum's bits\n",
              backend::tile_bf16_kernel(), (long long)same_bits, (long long)checked);
}

INSTANTIATE_TEST_SUITE_P(EveryLibrary, Gemm, ::testing::ValuesIn(backend::available()),
                         [](const auto& info) { return info.param; });

TEST(GemmLibraries, TheDefaultIsFirstAndSelectionIsChecked) {
  const std::vector<std::string> all = backend::available();
  ASSERT_FALSE(all.empty());
  EXPECT_NE(std::find(all.begin(), all.end(), "openblas"), all.end());
  const std::string previous = backend::selected();
  EXPECT_FALSE(backend::select("no-such-library"));
  EXPECT_EQ(backend::selected(), previous);
  for (const std::string& name : all) {
    ASSERT_TRUE(backend::select(name));
    EXPECT_EQ(backend::selected(), name);
    const backend::Kernels k = backend::kernels();
    EXPECT_FALSE(k.library.empty());
    EXPECT_FALSE(k.isa.empty()) << name;
  }
  backend::select(previous);
}

TEST(Bf16, RoundsToNearestEvenAndKeepsSpecials) {
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);  // above: rounds up
  EXPECT_EQ(from_bf16(to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);         // tie to even, up
  EXPECT_EQ(from_bf16(to_bf16(-2.5f)), -2.5f);                               // representable
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(from_bf16(to_bf16(INFINITY))));
  // The relative error of a rounding is at most half a unit in the 8th bit: 2^-8.
  const std::vector<float> x = test::to_host(test::random_slab("x", 10000, 100.0f));
  for (float v : x) ASSERT_LE(std::fabs(from_bf16(to_bf16(v)) - v), 0x1p-8f * std::fabs(v));
}

// The model's products under a Bf16Products scope read weights from the registered bf16 copy and
// round every other input; outside a scope they are fp32.
TEST(Bf16, ProductsInAScopeUseTheWeightCopyAndRoundTheRest) {
  const bool any = with_each_bf16_library([&](const std::string& name) {
    const int M = 5, N = 7, K = 11;
    std::vector<float> x = test::to_host(test::random_slab("x", M * K));
    std::vector<float> w = test::to_host(test::random_slab("w", N * K));
    // A deliberately different "copy" of w: the product must read it, not round w itself.
    std::vector<float> w_copy = w;
    for (float& v : w_copy) v = 2 * v;
    const std::vector<bf16> w16 = rounded(w_copy);
    std::vector<float> out(M * N), want(M * N, 0.0f), fp32(M * N), fp32_want(M * N, 0.0f);
    naive(Op::N, Op::T, M, N, K, 1.0f, x.data(), K, w.data(), K, 0.0f, fp32_want.data(), N);
    matmul(Op::N, Op::T, M, N, K, 1.0f, x.data(), K, w.data(), K, 0.0f, fp32.data(), N);
    {
      const Bf16Products scope(w.data(), w16.data(), N * K, 16);  // scratch grows as needed
      matmul(Op::N, Op::T, M, N, K, 1.0f, x.data(), K, w.data(), K, 0.0f, out.data(), N);
    }
    rounded(x);
    naive(Op::N, Op::T, M, N, K, 1.0f, x.data(), K, w_copy.data(), K, 0.0f, want.data(), N);
    for (int i = 0; i < M * N; ++i) {
      ASSERT_NEAR(out[i], want[i], 1e-4) << name << " " << i;
      ASSERT_NEAR(fp32[i], fp32_want[i], 1e-4) << name << " " << i;
    }
  });
  if (!any) GTEST_SKIP() << "no library of this build has native bf16 products here";
}

// HeldOnFirstUse rounds a tensor when a product first reads it, not when the scope starts (a
// block's output gradients are formed after it), and that rounding serves the later products: a
// change to the fp32 values meanwhile (which the contract forbids) does not reach them, while a
// product outside the scope rounds afresh.
TEST(Bf16, HeldOnFirstUseRoundsAtTheFirstProduct) {
  const bool any = with_each_bf16_library([&](const std::string& name) {
    const int M = 5, N = 7, K = 11;
    std::vector<float> x(M * K, 0.0f);
    const std::vector<float> later = test::to_host(test::random_slab("x", M * K));
    std::vector<float> w = test::to_host(test::random_slab("w", N * K));
    const std::vector<bf16> w16 = rounded(w);  // w holds its bf16 values from here
    std::vector<float> first(M * N), second(M * N), fresh(M * N), want(M * N, 0.0f),
        want3(M * N, 0.0f);
    {
      const Bf16Products scope(w.data(), w16.data(), N * K, 16);
      const HeldOnFirstUse held({{x.data(), int64_t(M) * K}});
      x = later;  // formed after the scope started, as B forms the gradients
      matmul(Op::N, Op::T, M, N, K, 1.0f, x.data(), K, w.data(), K, 0.0f, first.data(), N);
      for (float& v : x) v *= 3;
      matmul(Op::N, Op::T, M, N, K, 1.0f, x.data(), K, w.data(), K, 0.0f, second.data(), N);
    }
    {
      const Bf16Products scope(w.data(), w16.data(), N * K, 16);
      matmul(Op::N, Op::T, M, N, K, 1.0f, x.data(), K, w.data(), K, 0.0f, fresh.data(), N);
    }
    std::vector<float> x16 = later, x3 = x;
    rounded(x16);
    rounded(x3);
    naive(Op::N, Op::T, M, N, K, 1.0f, x16.data(), K, w.data(), K, 0.0f, want.data(), N);
    naive(Op::N, Op::T, M, N, K, 1.0f, x3.data(), K, w.data(), K, 0.0f, want3.data(), N);
    for (int i = 0; i < M * N; ++i) {
      ASSERT_NEAR(first[i], want[i], 1e-4) << name << " " << i;
      ASSERT_EQ(second[i], first[i]) << name << " " << i;
      ASSERT_NEAR(fresh[i], want3[i], 3e-4) << name << " " << i;
    }
    ASSERT_NE(first, fresh) << name;
  });
  if (!any) GTEST_SKIP() << "no library of this build has native bf16 products here";
}

}  // namespace mpf

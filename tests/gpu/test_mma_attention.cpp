// The tensor-core attention (model/layers/mma_attention.hpp, backends/cuda/
// flash_attention_mma.cu) against the portable fused kernel in bf16 on the same GPU: the
// forward's out and lse, the backward's dQ, dK and dV (and its += mode), for head sizes 64 and
// 128, multi-head and grouped-query heads, sequences not a multiple of a
// tile, documents, a window and context parallelism's two runs of rows. Part of test_attention,
// so a GPU build runs it with the GPU tests (ctest -L gpu); without a GPU, or in a CPU build
// (no tensor-core kernel), each case is skipped saying why. The indexing it relies on is
// checked on the CPU by tests/unit/test_mma_fragments.cpp. Rates prints both paths' forward and
// backward rates.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/transfer.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/matmul.hpp"
#include "model/layers/mma_attention.hpp"
#include "unit/test_helpers.hpp"

namespace mpf {
namespace {

using test::random_slab;
using test::to_host;
using test::view;

struct Case {
  int B, T, NH, KVH, hs;
  bool documents = false;
  int window = 0;
  bool two_runs = false;
};

// A case's packed qkv (random), its rows' positions and document starts, and the call's inputs
// over them (which point into qkv and doc).
struct CaseInputs {
  Slab qkv;
  Kokkos::View<int32_t*, MemSpace> doc;
  AttentionInputs x;
};
CaseInputs case_inputs(const Case& c) {
  const int width = (c.NH + 2 * c.KVH) * c.hs;
  CaseInputs in{random_slab("mma::qkv", int64_t(c.B) * c.T * width, 1.5f),
                Kokkos::View<int32_t*, MemSpace>("mma::doc", int64_t(c.B) * c.T),
                {}};
  const PositionRuns runs =
      c.two_runs ? PositionRuns::two(c.T / 2, 0, 3 * (c.T / 2)) : PositionRuns::contiguous(c.T);
  if (c.documents) {
    std::vector<int32_t> starts(size_t(c.B) * c.T);
    for (int b = 0; b < c.B; ++b)
      for (int t = 0; t < c.T; ++t) {
        const int p = runs.position(t);
        starts[size_t(b) * c.T + t] = p >= 70 + b ? 70 + b : 0;  // a document starts mid-tile
      }
    copy_from_host(in.doc.data(), starts.data(), starts.size() * sizeof(int32_t), "test");
  }
  in.x = packed_attention(view(in.qkv), c.B, c.NH, c.KVH, c.hs, runs,
                          c.documents ? in.doc.data() : nullptr, c.window);
  return in;
}

void expect_mma_matches_portable(const Case& c) {
  const CaseInputs in = case_inputs(c);
  const AttentionInputs& x = in.x;
  if (!mma_attention_runs(x))
    GTEST_SKIP() << "no tensor-core attention in this build (a CUDA "
                    "build has it: docs/gpu.md)";
  Slab out("mma::out", int64_t(c.B) * c.T * c.NH * c.hs),
      lse("mma::lse", int64_t(c.B) * c.NH * c.T);
  Slab want_out("mma::want_out", out.extent(0)), want_lse("mma::want_lse", lse.extent(0));
  {
    const Bf16Products scope(nullptr, nullptr, 0, 1);
    attention_forward(view(want_out), view(want_lse), x);
  }
  ASSERT_TRUE(mma_attention_forward(view(out), view(lse), x));
  Kokkos::fence();
  const auto got = to_host(out), want = to_host(want_out);
  const auto got_lse = to_host(lse), want_l = to_host(want_lse);
  // Both round Q, K, V and P to bf16 and accumulate in fp32, but P against different running
  // maxima (other tile sizes) and in another order: bf16's relative 2^-8 per weight.
  double err = 0.0, size = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << "out " << i;
    err = std::max(err, double(std::fabs(got[i] - want[i])));
    size = std::max(size, double(std::fabs(want[i])));
  }
  EXPECT_LE(err, 1e-2 * size);
  for (size_t i = 0; i < want_l.size(); ++i) {
    if (std::isinf(want_l[i])) {
      EXPECT_TRUE(std::isinf(got_lse[i]) && got_lse[i] < 0) << "lse " << i;
    } else {
      EXPECT_NEAR(got_lse[i], want_l[i], 1e-3 * std::max(1.0f, std::fabs(want_l[i])))
          << "lse " << i;
    }
  }
}

TEST(MmaAttention, ForwardMatchesPortableKernelHs64) {
  expect_mma_matches_portable({2, 200, 4, 4, 64});
  expect_mma_matches_portable({2, 200, 8, 2, 64});
}

TEST(MmaAttention, ForwardMatchesPortableKernelHs128) {
  expect_mma_matches_portable({1, 130, 4, 4, 128});
  expect_mma_matches_portable({2, 256, 4, 1, 128});
}

TEST(MmaAttention, ForwardMatchesPortableKernelMasks) {
  expect_mma_matches_portable({2, 150, 4, 2, 64, /*documents=*/true});
  expect_mma_matches_portable({2, 150, 4, 2, 64, true, /*window=*/33});
  expect_mma_matches_portable({2, 160, 4, 2, 64, true, 0, /*two_runs=*/true});
}

// The backward: dQ, dK and dV of the packed qkv from the tensor-core kernels against the portable
// kernel's in bf16, given the same out, lse and delta; then a second call that adds (+=) gives
// twice the first, bit for bit.
void expect_mma_backward_matches_portable(const Case& c) {
  const int width = (c.NH + 2 * c.KVH) * c.hs;
  const int64_t rows = int64_t(c.B) * c.T;
  const CaseInputs in = case_inputs(c);
  const AttentionInputs& x = in.x;
  Slab dout = random_slab("mma::dout", rows * c.NH * c.hs, 1.0f);
  if (!mma_attention_runs(x))
    GTEST_SKIP() << "no tensor-core attention in this build (a CUDA "
                    "build has it: docs/gpu.md)";
  Slab out("mma::out", rows * c.NH * c.hs), lse("mma::lse", int64_t(c.B) * c.NH * c.T),
      delta("mma::delta", int64_t(c.B) * c.NH * c.T);
  Slab want("mma::want", rows * width), got("mma::got", rows * width),
      twice("mma::twice", rows * width);
  const Bf16Products scope(nullptr, nullptr, 0, 1);
  attention_forward(view(out), view(lse), x);
  attention_backward_delta(view(delta), view(out), view(dout), c.B, c.T, c.NH, c.hs);
  const int64_t q_cols = int64_t(c.NH) * c.hs, kv_cols = int64_t(c.KVH) * c.hs;
  auto backward = [&](Slab& into, bool add, bool mma) {
    float* dq = into.data();
    if (mma) {
      return mma_attention_backward(dq, width, add, dq + q_cols, dq + q_cols + kv_cols, width, add,
                                    view(dout), view(lse), view(delta), x);
    }
    attention_backward(dq, width, add, dq + q_cols, dq + q_cols + kv_cols, width, add, view(dout),
                       view(lse), view(delta), x);
    return true;
  };
  backward(want, false, false);
  ASSERT_TRUE(backward(got, false, true));
  ASSERT_TRUE(backward(twice, false, true));
  ASSERT_TRUE(backward(twice, true, true));
  Kokkos::fence();
  const auto g = to_host(got), w = to_host(want), t2 = to_host(twice);
  // Per part of the row (dQ, dK, dV): both round dO, P and dS to bf16 and accumulate in fp32, in
  // other orders: bf16's relative 2^-8 per term.
  const int64_t begins[3] = {0, q_cols, q_cols + kv_cols},
                ends[3] = {q_cols, q_cols + kv_cols, width};
  const char* names[3] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part) {
    double err = 0.0, size = 0.0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = begins[part]; col < ends[part]; ++col) {
        const size_t i = size_t(r * width + col);
        ASSERT_FALSE(std::isnan(g[i])) << names[part] << " " << i;
        ASSERT_EQ(t2[i], 2.0f * g[i]) << names[part] << " " << i << ": += of the same bits";
        err = std::max(err, double(std::fabs(g[i] - w[i])));
        size = std::max(size, double(std::fabs(w[i])));
      }
    EXPECT_GT(size, 0.0) << names[part];
    EXPECT_LE(err, 2e-2 * size) << names[part];
  }
}

TEST(MmaAttention, BackwardMatchesPortableKernel) {
  expect_mma_backward_matches_portable({2, 200, 4, 4, 64});
  expect_mma_backward_matches_portable({2, 200, 8, 2, 64});
  expect_mma_backward_matches_portable({1, 130, 4, 4, 128});
  expect_mma_backward_matches_portable({2, 256, 4, 1, 128});
}

TEST(MmaAttention, BackwardMatchesPortableKernelMasks) {
  expect_mma_backward_matches_portable({2, 150, 4, 2, 64, /*documents=*/true});
  expect_mma_backward_matches_portable({2, 150, 4, 2, 64, true, /*window=*/33});
  expect_mma_backward_matches_portable({2, 160, 4, 2, 64, true, 0, /*two_runs=*/true});
}

// Not a check: each path's forward and backward rates on one Llama-124M-shaped layer (B 1, 12 heads
// of 64, causal), printed for docs/gpu.md's tables, as causal attention counts its FLOPs
// (2·2·T²·hs/2 a head).
TEST(MmaAttention, Rates) {
  for (int T : {1024, 4096}) {
    const int B = 1, NH = 12, KVH = 12, hs = 64;
    Slab qkv = random_slab("mma::qkv", int64_t(B) * T * (NH + 2 * KVH) * hs);
    const AttentionInputs x =
        packed_attention(view(qkv), B, NH, KVH, hs, PositionRuns::contiguous(T));
    if (!mma_attention_runs(x)) GTEST_SKIP() << "no tensor-core attention in this build";
    Slab out("mma::out", int64_t(B) * T * NH * hs), lse("mma::lse", int64_t(B) * NH * T);
    auto seconds = [&](auto&& run) {
      run();  // a first call outside the timing (allocations, the kernel's attributes)
      Kokkos::fence();
      Kokkos::Timer timer;
      const int reps = 5;
      for (int r = 0; r < reps; ++r) run();
      Kokkos::fence();
      return timer.seconds() / reps;
    };
    const double portable = seconds([&] {
      const Bf16Products scope(nullptr, nullptr, 0, 1);
      attention_forward(view(out), view(lse), x);
    });
    const double mma = seconds([&] { mma_attention_forward(view(out), view(lse), x); });
    const double flops = 2.0 * B * NH * double(T) * T * hs;
    std::printf(
        "attention forward, B 1, T %d, 12 heads of 64, bf16: portable fused %.2f TFLOP/s, "
        "tensor cores (mma.sync) %.2f TFLOP/s\n",
        T, flops / portable * 1e-12, flops / mma * 1e-12);
    // The backward as FlashAttention counts it: 2.5 times the forward's FLOPs (five products to
    // the forward's two; the recomputed P's product counted).
    Slab dout = random_slab("mma::dout", int64_t(B) * T * NH * hs),
         delta("mma::delta", int64_t(B) * NH * T), dqkv("mma::dqkv", qkv.extent(0));
    const int64_t q_cols = int64_t(NH) * hs, width = int64_t(NH + 2 * KVH) * hs;
    float* dq = dqkv.data();
    attention_backward_delta(view(delta), view(out), view(dout), B, T, NH, hs);
    const double portable_b = seconds([&] {
      const Bf16Products scope(nullptr, nullptr, 0, 1);
      attention_backward(dq, width, false, dq + q_cols, dq + 2 * q_cols, width, false, view(dout),
                         view(lse), view(delta), x);
    });
    const double mma_b = seconds([&] {
      mma_attention_backward(dq, width, false, dq + q_cols, dq + 2 * q_cols, width, false,
                             view(dout), view(lse), view(delta), x);
    });
    std::printf(
        "attention backward, B 1, T %d, 12 heads of 64, bf16: portable fused %.2f TFLOP/s, "
        "tensor cores (mma.sync) %.2f TFLOP/s\n",
        T, 2.5 * flops / portable_b * 1e-12, 2.5 * flops / mma_b * 1e-12);
  }
}

}  // namespace
}  // namespace mpf

// The tensor table against llm.c: GPT-2 124M's tensor sizes (gpt2_build_from_checkpoint's
// fill_in_parameter_sizes) and its parameter count, and the GPT-2 scheme of initialisation and
// weight decay.
#include <gtest/gtest.h>

#include <cmath>

#include "model/tensors.hpp"

namespace mpf {
namespace {

const GPTConfig kGpt2Small{
    /*max_seq_len=*/1024, /*vocab=*/50257, /*padded_vocab=*/50304,
    /*layers=*/12,        /*heads=*/12,    /*channels=*/768};

TEST(TensorTable, Gpt2SmallHasLlmcsSizes) {
  const int64_t V = 50304, maxT = 1024, L = 12, C = 768;
  const int64_t llmc[kNumParameterTensors] = {
      V * C, maxT * C, L * C,         L * C,     L * 3 * C * C, L * 3 * C, L * C * C, L * C,
      L * C, L * C,    L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C,     C,         C};
  for (const TensorSpec& s : kTensors)
    EXPECT_EQ(tensor_size(s.id, kGpt2Small), llmc[int(s.id)]) << s.name;
  EXPECT_EQ(parameter_count(kGpt2Small), 124475904);  // llm.c's num_parameters
  EXPECT_EQ(unpadded_size(TensorId::wte, kGpt2Small), 50257 * C);
  EXPECT_EQ(unpadded_size(TensorId::qkvw, kGpt2Small), tensor_size(TensorId::qkvw, kGpt2Small));
}

TEST(TensorTable, Gpt2InitialisationAndDecay) {
  const float proj = 0.02f / std::sqrt(2.0f * 12);
  for (const TensorSpec& s : kTensors) {
    const bool matrix = s.cols.of != Dim::kOne;
    EXPECT_EQ(s.weight_decay, matrix) << s.name;  // AdamW decays the matrices only
    EXPECT_EQ(s.init == TensorInit::kNormal, matrix) << s.name;
    if (matrix) {
      EXPECT_EQ(init_std(s, kGpt2Small), s.residual ? proj : 0.02f) << s.name;
    }
  }
  EXPECT_TRUE(tensor_spec(TensorId::attprojw).residual);
  EXPECT_TRUE(tensor_spec(TensorId::fcprojw).residual);
  EXPECT_EQ(tensor_spec(TensorId::lnfw).init, TensorInit::kOne);
}

}  // namespace
}  // namespace mpf

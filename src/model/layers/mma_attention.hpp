// The fused attention's forward on tensor cores (backends/cuda/flash_attention_mma.hpp), where a
// CUDA build has it: the same inputs and outputs as attention_forward (attention.hpp), with Q, K,
// V and P rounded to bf16, and its backward (dO and dS rounded too). Training calls them only with
// --attention mma (attention_path.hpp) until a GPU has checked them against the portable kernel
// (tests/gpu/test_mma_attention.cpp) and measured them (docs/gpu.md, "Tensor-core attention
// (mma.sync)").
#pragma once

#include "core/types.hpp"
#include "model/layers/attention.hpp"

namespace mpf {

// Whether this is a CUDA build, which has the kernel (the options refuse --attention mma without).
bool mma_attention_built();

// Whether this build can run `x` on tensor cores: a CUDA build, head size 64 or 128, NH a
// multiple of KVH.
bool mma_attention_runs(const AttentionInputs& x);

// out (B, queries.rows, NH·hs) and lse (B, NH, queries.rows) as attention_forward without merge;
// false, touching nothing, where mma_attention_runs(x) is false.
bool mma_attention_forward(Tensor out, Tensor lse, const AttentionInputs& x);

// dq, dk and dv as attention_backward (attention.hpp) computes them, with dO, P and dS rounded to
// bf16 as well; false, touching nothing, where mma_attention_runs(x) is false.
bool mma_attention_backward(float* dq, int64_t lddq, bool accumulate_dq, float* dk, float* dv,
                            int64_t lddkv, bool accumulate_dkv, Tensor dout, Tensor lse,
                            Tensor delta, const AttentionInputs& x);

}  // namespace mpf

// Which attention a run's model calls (--attention): the fused kernel (attention.hpp), the
// chunked path through the backend's GEMM (chunked_attention.hpp), or, in a CUDA build, the
// forward and backward on tensor cores (mma_attention.hpp: not yet checked on a GPU, so only on
// request; any call it does not take is the fused kernel's). All take the same inputs and
// give the same results, so the model and ring attention call through here and never choose.
#pragma once

#include <cstdint>
#include <string>

#include "core/types.hpp"
#include "model/layers/attention.hpp"

namespace mpf {

enum class AttentionPath { kFused, kChunked, kMma };

// The path --attention names: "chunked", "mma", else the fused kernel.
AttentionPath attention_path_named(const std::string& name);

// attention_forward and attention_backward (attention.hpp) through `path`.
// A row_max asked for (QK-clip's largest logits) takes the call to the fused kernel, which alone
// measures them.
void attention_forward(AttentionPath path, Tensor out, Tensor lse, const AttentionInputs& x,
                       bool merge = false, Tensor row_max = Tensor());
void attention_backward(AttentionPath path, float* dq, int64_t lddq, bool accumulate_dq, float* dk,
                        float* dv, int64_t lddkv, bool accumulate_dkv, Tensor dout, Tensor lse,
                        Tensor delta, const AttentionInputs& x);

// The scratch `path` keeps for a rank's attention (NH local heads of size hs, seq_len rows a
// sequence, `threads` host threads), for the memory plan.
int64_t attention_path_scratch_bytes(AttentionPath path, int NH, int KVH, int hs, int seq_len,
                                     int threads);

}  // namespace mpf

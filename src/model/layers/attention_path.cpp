#include "model/layers/attention_path.hpp"

#include "model/layers/chunked_attention.hpp"
#include "model/layers/mma_attention.hpp"

namespace mpf {

AttentionPath attention_path_named(const std::string& name) {
  if (name == "mma") return AttentionPath::kMma;
  return name == "chunked" ? AttentionPath::kChunked : AttentionPath::kFused;
}

void attention_forward(AttentionPath path, Tensor out, Tensor lse, const AttentionInputs& x,
                       bool merge, Tensor row_max) {
  // Only the fused kernel reports each row's largest logit (row_max, for QK-clip): the other
  // paths give way to it when one is asked for.
  const bool measured = row_max.data() != nullptr;
  if (path == AttentionPath::kChunked && !measured) {
    chunked_attention_forward(out, lse, x, merge);
  } else if (path == AttentionPath::kMma && !merge && !measured &&
             mma_attention_forward(out, lse, x)) {
    // Tensor cores took it; a merge (ring attention's later blocks), a head size other than 64
    // or 128, or a GPU before sm_80 goes to the fused kernel.
  } else {
    attention_forward(out, lse, x, merge, row_max);
  }
}

void attention_backward(AttentionPath path, float* dq, int64_t lddq, bool accumulate_dq, float* dk,
                        float* dv, int64_t lddkv, bool accumulate_dkv, Tensor dout, Tensor lse,
                        Tensor delta, const AttentionInputs& x) {
  if (path == AttentionPath::kChunked) {
    chunked_attention_backward(dq, lddq, accumulate_dq, dk, dv, lddkv, accumulate_dkv, dout, lse,
                               delta, x);
  } else if (path == AttentionPath::kMma &&
             mma_attention_backward(dq, lddq, accumulate_dq, dk, dv, lddkv, accumulate_dkv, dout,
                                    lse, delta, x)) {
    // Tensor cores took it (every block of ring attention too: the backward has no merge).
  } else {
    attention_backward(dq, lddq, accumulate_dq, dk, dv, lddkv, accumulate_dkv, dout, lse, delta, x);
  }
}

int64_t attention_path_scratch_bytes(AttentionPath path, int NH, int KVH, int hs, int seq_len,
                                     int threads) {
  // Only the path a run calls allocates its scratch.
  return path == AttentionPath::kChunked ? chunked_attention_scratch_bytes(NH, hs, seq_len)
                                         : attention_scratch_bytes(NH, KVH, hs, threads);
}

}  // namespace mpf

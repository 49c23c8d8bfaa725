// FlashAttention-2's forward on tensor cores (mma.sync m16n8k16, bf16 operands, fp32
// accumulation), for a GPU build: the kernel is flash_attention_mma.cu, its per-lane steps
// flash_attention_mma_tile.hpp, its register layouts mma_fragments.hpp. It computes what the
// portable fused kernel's forward computes (model/layers/attention.hpp: causal, grouped-query,
// two position runs, document starts, a sliding window; out (B, rows, NH·hs) and lse (B, NH,
// rows)) with Q, K, V and P rounded to bf16, as the portable kernel does inside a Bf16Products
// scope, and its backward: dQ, dK and dV with dO, P and dS rounded to bf16 as well. Head sizes
// 64 and 128. Only --attention mma selects them (docs/gpu.md, "Tensor-core attention").
#pragma once

#include <cstdint>

#include "backends/cuda/mma_fragments.hpp"

namespace mpf::backend {

// At most two runs of consecutive positions (model/positions.hpp's PositionRuns, which the
// backend cannot include: it needs Kokkos).
struct MmaRuns {
  int count = 1;
  int row1 = 0;  // the second run's first row
  int pos0 = 0, pos1 = 0;
  MPF_MMA_HD constexpr int position(int t) const {
    return count > 1 && t >= row1 ? pos1 + (t - row1) : pos0 + t;
  }
};

struct MmaAttentionArgs {
  int B = 1, NH = 1, KVH = 1, hs = 64;
  const float* q = nullptr;  // device pointers, rows as AttentionInputs describes them
  int64_t ldq = 0;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t ldkv = 0;
  int rows_q = 0, rows_k = 0;
  MmaRuns queries, keys;
  const int32_t* doc_start = nullptr;  // (B, rows_q) or null
  int window = 0;
  float* out = nullptr;  // (B, rows_q, NH·hs)
  float* lse = nullptr;  // (B, NH, rows_q)
};

// The backward's inputs and outputs: `in` as the forward took it (its lse as the forward wrote
// it; out unused), the output gradient and the rows' delta (Σ dO·O, attention_backward_delta's),
// and where the input gradients go, written (=) or added (+=) as the flags say.
struct MmaAttentionGrads {
  MmaAttentionArgs in;
  const float* dout = nullptr;   // (B, rows_q, NH·hs)
  const float* delta = nullptr;  // (B, NH, rows_q)
  float* dq = nullptr;           // rows of stride lddq, like q
  int64_t lddq = 0;
  bool accumulate_dq = false;
  float* dk = nullptr;  // rows of stride lddkv, like k and v
  float* dv = nullptr;
  int64_t lddkv = 0;
  bool accumulate_dkv = false;
};

// Whether the kernel handles this head size (64 or 128) on this GPU (compute capability 8.0 or
// later).
bool mma_attention_supports(int hs);
// Launches the forward on `cuda_stream` (a cudaStream_t: Kokkos' execution space's stream, so it
// stays ordered with the kernels around it). Aborts with a message on a launch error.
void mma_attention_forward(const MmaAttentionArgs& args, void* cuda_stream);
// The backward, two kernels on `cuda_stream`: dK and dV a block per 64 keys of a kv head (its
// group's query heads in ascending order), dQ a block per 64 query rows of a head, each
// recomputing P from lse. No atomics: the same bits on every run.
void mma_attention_backward(const MmaAttentionGrads& grads, void* cuda_stream);

}  // namespace mpf::backend

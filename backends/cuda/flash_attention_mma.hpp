// FlashAttention-2's forward on tensor cores (mma.sync m16n8k16, bf16 operands, fp32
// accumulation), for a GPU build: the kernel is flash_attention_mma.cu, its per-lane steps
// flash_attention_mma_tile.hpp, its register layouts mma_fragments.hpp. It computes what the
// portable fused kernel's forward computes (model/layers/attention.hpp: causal, grouped-query,
// two position runs, document starts, a sliding window; out (B, rows, NH·hs) and lse (B, NH,
// rows)) with Q, K, V and P rounded to bf16, as the portable kernel does inside a Bf16Products
// scope. Head sizes 64 and 128. No backward yet: the portable kernel's backward reads the same
// out and lse. Nothing selects it yet (docs/gpu.md, "Tensor-core attention").
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

// Whether the kernel handles this head size (64 or 128) on this GPU (compute capability 8.0 or
// later).
bool mma_attention_supports(int hs);
// Launches the forward on `cuda_stream` (a cudaStream_t: Kokkos' execution space's stream, so it
// stays ordered with the kernels around it). Aborts with a message on a launch error.
void mma_attention_forward(const MmaAttentionArgs& args, void* cuda_stream);

}  // namespace mpf::backend

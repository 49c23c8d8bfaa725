// QK-clip, the clip of Kimi K2's MuonClip (Kimi Team 2025, "Kimi K2: Open Agentic Intelligence"):
// after an update, an attention head whose largest logit q·k/√hs in the step exceeded τ has its
// query and key projections scaled so that logit would have been τ, which keeps attention logits
// from growing without bound. With γ = τ / max:
//   multi-head attention (a key head per query head): the head's rows of W_q and of W_k (and
//   their biases) times √γ each, as the report scales them;
//   grouped-query heads (a key head shared by G query heads): the query head's rows times γ
//   alone, so the shared keys, and the other query heads that read them, stay as they were.
// Rotary embeddings rotate Q and K after the projection and commute with the scale. The
// optimizer's moments are left alone. Any optimizer can be followed by it (--qk-clip).
#pragma once

#include <vector>

#include "core/bf16_bits.hpp"
#include "model/parameters.hpp"
#include "model/shard.hpp"

namespace mpf {

struct QkClipReport {
  int heads = 0;           // heads scaled
  float largest = -1e30f;  // the largest logit of any head (before the scaling)
};

// head_max: (params' local blocks, shard.heads) each local head's largest logit of the step,
// over every rank that holds its parameters (the same on each, so they scale alike). weights16:
// the bf16 copy of params' slab, laid out alike, rounded again where scaled (or null).
QkClipReport qk_clip(Parameters& params, const TpShard& shard, const std::vector<float>& head_max,
                     float tau, bf16* weights16);

}  // namespace mpf

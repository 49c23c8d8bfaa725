// The per-step log line, in the conventions of Megatron and llm.c:
//   step 3/50 | loss 5.123456 | lr 3.0e-04 | norm 1.23 | 812.3 ms | 315 tok/s | MFU 41.2%
// and what it needs: the FLOP count of a step and a peak to hold it against.
#pragma once

#include <limits>
#include <string>

#include "model/config.hpp"

namespace mpf {

// Model FLOPs per token, forward + backward (PaLM appendix B, with attention counted as causal
// attention needs it, as FlashAttention counts it):
//   6·N' + 3·L'·T·NH·(hs_qk + hs_v), N' = the active parameters of the products: all but the
//   position table and an untied token table (lookups), the routed experts' at k/E, plus the
//   head's V·C again per multi-token prediction depth; L' = the blocks with the D modules'
//   (L + D). PaLM's 12·L·T·C counts the whole T × T matrix; a causal query sees T/2 keys on
//   average, and the fused attention skips the rest. docs/performance.md, "FLOPs, peak and MFU".
double flops_per_token(const GPTConfig& cfg, int T);

struct StepRecord {
  int step = 0, steps = 0;  // 1-based
  double loss = 0, norm = 0, ms = 0;
  float lr = 0;
  // A mixture of experts' balance loss, added to the objective (loss stays the cross-entropy);
  // NaN for a dense model, whose line has none.
  double aux = std::numeric_limits<double>::quiet_NaN();
  // Multi-token prediction's loss λ/D · Σ_k (depth k's mean cross-entropy), added to the
  // objective; NaN without modules, whose line has none.
  double mtp = std::numeric_limits<double>::quiet_NaN();
  // --qk-clip: the step's largest attention logit over every head (before the clip) and the heads
  // scaled after the update; NaN without --qk-clip, whose line has none.
  double qk_logit = std::numeric_limits<double>::quiet_NaN();
  int qk_clipped = 0;
};

// `tokens` per step over all ranks; `peak_flops` of all ranks together (FLOP/s).
std::string format_step(const StepRecord& r, double tokens, double flops_per_step,
                        double peak_flops);

// The per-kernel profile (core/profile.hpp) of `steps` steps averaging `step_ms`, per step: one
// line per kernel or product shape, the most time first, then what no kernel accounts for (MPI,
// waiting, host code).
std::string profile_table(double step_ms, int steps);

}  // namespace mpf

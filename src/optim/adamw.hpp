// AdamW (Loshchilov & Hutter) with bias correction, decoupled weight decay on the matrices only,
// and the gradient-clipping factor folded into the same pass: the update is memory-bound, so
// everything touching a parameter happens in one read of p, g, m, v and one write of p, m, v.
//   m = β1·m + (1−β1)·s·g;  v = β2·v + (1−β2)·(s·g)²;  m̂ = m/(1−β1ᵗ);  v̂ = v/(1−β2ᵗ)
//   p −= lr·(m̂/(√v̂ + ε) + wd·p)                                   (llm.c's gpt2_update)
//
// The optimizer sees its parameters as segments: runs of consecutive elements of one tensor, each
// with where its parameters, gradients and moments live. Without ZeRO a segment is a piece of the
// slab (a tensor, or one block's slice of a per-layer tensor); under
// ZeRO-1 it is this rank's slice of a gradient bucket within a tensor, with its gradients in the
// reduce-scattered shard and its moments in a state sized for the shard only.
//
// The first moment m is laid out over every segment (`state`); Muon (optim/muon.hpp) keeps its
// matrices' momentum there. The second moment v holds AdamW's segments only (`v_state`, packed:
// m's layout with the Muon segments' stretches taken out), so a Muon run keeps one moment, not
// two, for its matrices; without Muon v is laid out exactly as m.
#pragma once

#include <cstdint>
#include <vector>

#include "core/bf16.hpp"
#include "core/types.hpp"
#include "model/parameters.hpp"

namespace mpf {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

struct OptimizerSegment {
  int64_t param = 0;  // offset in the parameter slab
  int64_t grad = 0;   // offset in the gradient buffer passed to step()
  int64_t state = 0;  // offset in the first moment
  int64_t length = 0;
  TensorId tensor = TensorId::wte;  // its weight decay, who counts it in the gradient norm
  // Updated by Muon (optim/muon.hpp), whose momentum is the first moment here: AdamW keeps its
  // place in m (checkpoints, the gradient norm), gives it none in v, and does not update it.
  bool by_muon = false;
  // Offset in the second moment (set by AdamW's constructor, second_moment_layout); unused for
  // a Muon segment.
  int64_t v_state = 0;
};

// Sets each AdamW segment's v_state: its `state` less the Muon segments' elements before it in
// m. Returns v's size: `state_size` (m's) less every Muon segment's length.
int64_t second_moment_layout(std::vector<OptimizerSegment>& segments, int64_t state_size);

// One segment per piece of the slab (a tensor, or a block's slice of one): parameters, gradients
// and moments laid out alike.
std::vector<OptimizerSegment> piece_segments(const Parameters& params);

// A run of at most AdamW's kChunk elements of one segment, for the one-kernel update of a GPU.
struct AdamWChunk {
  int64_t param, grad, state, v_state;
  int length;
  float weight_decay;
};

class AdamW {
 public:
  // The first moment for `state_size` elements (the sum of the segments' lengths), the second
  // for AdamW's segments only.
  AdamW(const AdamWConfig& cfg, const GPTConfig& model, std::vector<OptimizerSegment> segments,
        int64_t state_size);

  // One update of every segment with learning rate lr; grad_scale multiplies the gradients (the
  // clipping factor, 1 when not clipping). With `params16` (bf16 mixed precision), the updated
  // parameters' bf16 copy is written in the same pass (params16 laid out as params).
  void step(float* params, const float* grads, float lr, float grad_scale,
            bf16* params16 = nullptr);

  int64_t steps_taken() const { return t_; }
  // A resumed run continues the bias correction where the checkpoint left it.
  void set_steps_taken(int64_t t) { t_ = t; }
  // The first moment, laid out as the segments' `state` offsets say, and the second, as their
  // `v_state` offsets say (checkpoints).
  const Slab& first_moment() const { return m_; }
  // Muon keeps its momentum here, at its matrices' places (optim/muon.hpp).
  Slab& first_moment() { return m_; }
  const Slab& second_moment() const { return v_; }
  int64_t state_bytes() const {
    return (int64_t(m_.extent(0)) + int64_t(v_.extent(0))) * int64_t(sizeof(float));
  }
  const std::vector<OptimizerSegment>& segments() const { return segments_; }

 private:
  // The segment's decay: the configured one for a tensor the table decays, else 0.
  float decay_of(const OptimizerSegment& s) const {
    return tensor_spec(s.tensor).weight_decay ? cfg_.weight_decay : 0.0f;
  }

  AdamWConfig cfg_;
  std::vector<OptimizerSegment> segments_;
  // The device shape updates every segment in one kernel: the segments cut into chunks of at most
  // kChunk elements (AdamWChunk), each a work item of kChunk threads.
  static constexpr int kChunk = 4096;
  Kokkos::View<AdamWChunk*, MemSpace> chunks_;
  Slab m_, v_;  // first moment (every segment) and second (AdamW's segments)
  int64_t t_ = 0;
};

// The update kernel on n consecutive elements; p16, when given, receives to_bf16 of the new p.
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, int64_t t,
                  bf16* p16 = nullptr);

}  // namespace mpf

// The whole model's gradient (every piece's B, then every piece's W, as gpt_backward does) against
// finite differences of the mean loss, on a tiny model with O(1) weights so every path carries
// signal.
#include <gtest/gtest.h>

#include <memory>

#include "backends/gemm.hpp"
#include "core/bf16.hpp"
#include "model/gpt.hpp"
#include "model/layers/matmul.hpp"
#include "test_helpers.hpp"
#include "train/layout_memory.hpp"

namespace mpf {

namespace {
GPTConfig tiny_gpt2() {
  return {8, 13, 16, 2, 2, 8};  // maxT 8, V 13 padded to 16, L 2, NH 2, C 8
}

// A Llama: 4 heads of size 4 sharing 2 kv heads, F 24, untied, rope scaling whose original context
// of 8 puts the two frequencies (wavelengths 6.3 and 628) in the blended and the divided band.
GPTConfig tiny_llama() {
  GPTConfig cfg{8, 13, 16, 2, 4, 16};
  cfg.arch = Arch::kLlama;
  cfg.kv_heads = 2;
  cfg.ffn_dim = 24;
  cfg.norm_eps = 1e-5f;
  cfg.rope_theta = 10000.0f;
  cfg.rope_factor = 8.0f;
  cfg.rope_original_max_pos = 8;
  cfg.tied = false;
  return cfg;
}

struct TinyModel {
  explicit TinyModel(const GPTConfig& c = tiny_gpt2()) : cfg(c) { fill(); }
  GPTConfig cfg;
  int B = 2, T = 5;
  Parameters params = Parameters::allocate(cfg, "params");
  Parameters grads = Parameters::allocate(cfg, "grads");
  Activations acts = Activations::allocate(cfg, B, T);
  BackwardBuffers buf = BackwardBuffers::allocate(cfg, B, T);
  WeightGradInputs w = WeightGradInputs::allocate(cfg, B, T);
  Tokens inputs{"inputs", 10}, targets{"targets", 10};

  void fill() {
    Slab noise = test::random_slab("noise", params.count, 0.3f);
    auto hp = Kokkos::create_mirror_view_and_copy(HostSpace(), noise);
    int64_t off = 0;
    for (const TensorSpec& spec : kTensors) {
      // LayerNorm weights near 1, like a trained model; everything else O(0.3).
      const int64_t n = tensor_size(spec.id, cfg);
      if (spec.init == TensorInit::kOne) {
        for (int64_t j = 0; j < n; ++j) hp(off + j) += 1.0f;
      }
      off += n;
    }
    // Padded token rows (of wte and an untied lmhead) are zero, as in a checkpoint.
    for (const SlabPiece& piece : params.layout.pieces()) {
      if (tensor_spec(piece.tensor).split != TpSplit::kVocab) continue;
      for (int64_t j = int64_t(cfg.vocab) * cfg.channels; j < piece.length; ++j)
        hp(piece.offset + j) = 0;
    }
    Kokkos::deep_copy(params.slab, hp);
    auto hi = Kokkos::create_mirror_view(inputs);
    auto ht = Kokkos::create_mirror_view(targets);
    for (int i = 0; i < B * T; ++i)
      hi(i) = (7 * i + 3) % cfg.vocab, ht(i) = (5 * i + 1) % cfg.vocab;
    Kokkos::deep_copy(inputs, hi);
    Kokkos::deep_copy(targets, ht);
  }
  double mean_loss() {
    gpt_forward(acts, params.t, inputs, targets);
    const std::vector<float> l = test::to_host(Slab(acts.losses.data(), acts.losses.extent(0)));
    double s = 0;
    for (float x : l) s += x;
    return s / (B * T);
  }
  void backward() {
    mean_loss();
    gpt_backward(grads.t, buf, w, acts, params.t, inputs, targets, 1.0f / (B * T));
  }
};
}  // namespace

static void check_every_tensor(TinyModel& m) {
  Kokkos::deep_copy(m.grads.slab, 0.0f);
  m.backward();
  const std::vector<float> g = test::to_host(m.grads.slab);
  int64_t off = 0;
  for (const TensorSpec& spec : kTensors) {
    const int64_t n = tensor_size(spec.id, m.cfg);
    std::vector<int64_t> idx;
    for (int64_t j : test::spread(n, 24)) idx.push_back(off + j);
    test::expect_gradient_matches(
        m.params.slab, g, [&] { return m.mean_loss(); }, idx, spec.name, 1e-2f, 3e-2, 3e-3);
    off += n;
  }
  // The padded rows of the embedding (and of an untied head) get no gradient.
  for (const SlabPiece& piece : m.params.layout.pieces()) {
    if (tensor_spec(piece.tensor).split != TpSplit::kVocab) continue;
    for (int64_t j = int64_t(m.cfg.vocab) * m.cfg.channels; j < piece.length; ++j)
      ASSERT_EQ(g[piece.offset + j], 0.0f);
  }
}

TEST(ModelGradients, EveryParameterTensorMatchesFiniteDifferences) {
  TinyModel m;
  check_every_tensor(m);
}

// The Llama family's blocks: RMSNorm, rotary embeddings with llama3 scaling, grouped-query
// attention, SwiGLU, no biases, an untied head.
TEST(ModelGradients, LlamaMatchesFiniteDifferences) {
  TinyModel m(tiny_llama());
  EXPECT_EQ(tensor_size(TensorId::wpe, m.cfg), 0);
  EXPECT_EQ(tensor_size(TensorId::qkvb, m.cfg), 0);
  EXPECT_EQ(tensor_size(TensorId::qkvw, m.cfg), 2 * (16 + 2 * 8) * 16);
  EXPECT_EQ(tensor_size(TensorId::fcw, m.cfg), 2 * 48 * 16);
  EXPECT_EQ(tensor_size(TensorId::lmhead, m.cfg), 16 * 16);
  check_every_tensor(m);
}

// The features the families of Llama blocks add: Qwen2's Q, K, V biases; Qwen3's per-head q/k
// norms with a head size (6) apart from C / NH (4) and no biases; Mistral's sliding window of 2;
// OLMo-2's norms after the sublayers and over the whole Q and K projections; Mixtral's experts.
TEST(ModelGradients, FamilyFeaturesMatchFiniteDifferences) {
  GPTConfig qwen2 = tiny_llama();
  qwen2.arch = Arch::kQwen2;
  GPTConfig qwen3 = tiny_llama();
  qwen3.arch = Arch::kQwen3;
  qwen3.head_dim = 6;
  GPTConfig mistral = tiny_llama();
  mistral.arch = Arch::kMistral;
  mistral.sliding_window = 2;
  GPTConfig olmo2 = tiny_llama();
  olmo2.arch = Arch::kOlmo2;
  // Two experts, both a token's, gated by the router's probabilities: a choice among more would
  // flip under the finite differences' steps (the routing is piecewise). No balance loss: the
  // differences see the cross-entropy. reference_moe checks top-2 of 4 against PyTorch.
  GPTConfig mixtral = tiny_llama();
  mixtral.arch = Arch::kMixtral;
  mixtral.experts = 2;
  mixtral.experts_per_token = 2;
  // Qwen2-MoE's: the same two experts and a shared expert with its sigmoid gate.
  GPTConfig qwen2_moe = mixtral;
  qwen2_moe.arch = Arch::kQwen2Moe;
  qwen2_moe.shared_ffn = 12;
  for (const GPTConfig& cfg : {qwen2, qwen3, mistral, olmo2, mixtral, qwen2_moe}) {
    SCOPED_TRACE(arch_name(cfg.arch));
    TinyModel m(cfg);
    check_every_tensor(m);
  }
  EXPECT_EQ(tensor_size(TensorId::qkvb, qwen2), 2 * (16 + 2 * 8));
  EXPECT_EQ(tensor_size(TensorId::q_normw, qwen3), 2 * 6);
  EXPECT_EQ(tensor_size(TensorId::attprojw, qwen3), 2 * 16 * 4 * 6);
  EXPECT_EQ(tensor_size(TensorId::q_normw, olmo2), 2 * 16);
  EXPECT_EQ(tensor_size(TensorId::k_normw, olmo2), 2 * 8);
  EXPECT_EQ(tensor_size(TensorId::fcw, mixtral), 2 * tensor_size(TensorId::fcw, qwen3));
  EXPECT_EQ(tensor_size(TensorId::routerw, mixtral), 2 * 2 * 16);
  EXPECT_EQ(tensor_size(TensorId::sfcw, qwen2_moe), 2 * 2 * 12 * 16);
  EXPECT_EQ(tensor_size(TensorId::sgatew, qwen2_moe), 2 * 16);
  EXPECT_EQ(tensor_size(TensorId::sfcw, mixtral), 0);
}

TEST(ModelGradients, BackwardAccumulatesAndIsDeterministic) {
  TinyModel m;
  Kokkos::deep_copy(m.grads.slab, 0.0f);
  m.backward();
  const std::vector<float> once = test::to_host(m.grads.slab);
  m.backward();
  const std::vector<float> twice = test::to_host(m.grads.slab);
  // Bitwise equal up to the order of the additions into an already non-zero gradient.
  for (size_t i = 0; i < once.size(); ++i) {
    ASSERT_NEAR(twice[i], 2 * once[i], 1e-6f * (1 + std::fabs(once[i]))) << i;
  }
  // And a fresh backward reproduces the first bit for bit.
  Kokkos::deep_copy(m.grads.slab, 0.0f);
  m.backward();
  EXPECT_EQ(test::to_host(m.grads.slab), once);
}

// --precision bf16 keeps the activations only products read in bf16 (bf16_kept): the products
// read them as they read their rounding when they were fp32, so every loss and gradient is the
// same bit for bit, with and without recomputation (whose W inputs keep their own copies).
namespace {
struct StepResult {
  std::vector<float> losses, grads;
};
StepResult bf16_step(const GPTConfig& cfg, bool kept16, bool recompute) {
  TinyModel m(cfg);
  const TpShard shard = make_tp_shard(cfg, 0, 1);
  ChunkPieces chunk = whole_stage(shard);
  chunk.bf16 = kept16;
  chunk.recompute = recompute;
  Activations acts = Activations::allocate(shard, chunk, m.B, m.T);
  WeightGradInputs w = WeightGradInputs::allocate(shard, chunk, m.B, m.T);
  std::unique_ptr<Activations> workspace;
  if (recompute) {
    ChunkPieces one{0, 1, false, false};
    one.bf16 = kept16;
    workspace = std::make_unique<Activations>(Activations::allocate(shard, one, m.B, m.T));
  }
  Bf16Slab weights16("weights16", m.params.count);
  round_to_bf16(weights16.data(), m.params.slab.data(), m.params.count);
  Kokkos::deep_copy(m.grads.slab, 0.0f);
  {
    const Bf16Products scope(m.params.slab.data(), weights16.data(), m.params.count, 16);
    gpt_forward(acts, m.params.t, m.inputs, m.targets, MPI_COMM_SELF, workspace.get());
    gpt_backward(m.grads.t, m.buf, w, acts, m.params.t, m.inputs, m.targets, 1.0f / (m.B * m.T),
                 MPI_COMM_SELF, {}, true, {}, workspace.get());
  }
  return {test::to_host(Slab(acts.losses.data(), acts.losses.extent(0))),
          test::to_host(m.grads.slab)};
}
}  // namespace

TEST(Bf16Activations, KeptInBf16GiveTheSameLossesAndGradients) {
  if (!backend::kernels().bf16_missing.empty()) GTEST_SKIP() << backend::kernels().bf16_missing;
  GPTConfig olmo2 = tiny_llama();
  olmo2.arch = Arch::kOlmo2;
  GPTConfig mixtral = tiny_llama();
  mixtral.arch = Arch::kMixtral;
  mixtral.experts = 2;
  mixtral.experts_per_token = 2;
  for (const GPTConfig& cfg : {tiny_gpt2(), tiny_llama(), olmo2, mixtral}) {
    for (bool recompute : {false, true}) {
      SCOPED_TRACE(std::string(arch_name(cfg.arch)) + (recompute ? " recomputed" : ""));
      const StepResult fp32 = bf16_step(cfg, false, recompute);
      const StepResult bf16 = bf16_step(cfg, true, recompute);
      EXPECT_EQ(bf16.losses, fp32.losses);
      EXPECT_EQ(bf16.grads, fp32.grads);
    }
  }
}

// A dense MLP reads ln2 itself: its sets keep no experts' inputs (moe_in was allocated, L·R·C
// floats never written, 5% of a Llama's activations), a mixture of experts' do.
TEST(ActivationSets, OnlyAMixtureOfExpertsKeepsExpertInputs) {
  GPTConfig mixtral = tiny_llama();
  mixtral.arch = Arch::kMixtral;
  mixtral.experts = 2;
  mixtral.experts_per_token = 2;
  for (const GPTConfig& cfg : {tiny_gpt2(), tiny_llama(), mixtral}) {
    SCOPED_TRACE(arch_name(cfg.arch));
    const TpShard shard = make_tp_shard(cfg, 0, 1);
    ChunkPieces chunk = whole_stage(shard);
    const int64_t R = 2 * 5, want = cfg.moe() ? R * 2 * cfg.channels : 0;  // k = 2 slots a row
    const Activations acts = Activations::allocate(cfg, 2, 5);
    EXPECT_EQ(int64_t(acts.moe_in.extent(0)), cfg.layers * want);
    EXPECT_EQ(int64_t(acts.layer(1).moe_in.extent(0)), want);
    chunk.recompute = true;
    const WeightGradInputs w = WeightGradInputs::allocate(shard, chunk, 2, 5);
    EXPECT_EQ(int64_t(w.block(1).kept.moe_in.extent(0)), want);
  }
}

// The sets take 2 bytes for each value kept in bf16 instead of 4, less the one-block fp32 staging
// of the norms' outputs, and the memory plan's activation term follows the run's precision.
TEST(Bf16Activations, SetsAndTheMemoryPlanCountTheSavedBytes) {
  GPTConfig mixtral = tiny_llama();
  mixtral.arch = Arch::kMixtral;
  mixtral.experts = 2;
  mixtral.experts_per_token = 2;
  for (const GPTConfig& cfg : {tiny_gpt2(), tiny_llama(), mixtral}) {
    SCOPED_TRACE(arch_name(cfg.arch));
    const int B = 2, T = 6;
    const TpShard shard = make_tp_shard(cfg, 0, 1);
    const int64_t R = B * T, C = cfg.channels, L = cfg.layers, F = shard.fc;
    // ln1 always; ln2 and GELU's/SwiGLU's output unless a mixture of experts' MLP reads them.
    const int64_t kept = L * R * C + (cfg.moe() ? 0 : L * R * (C + F));
    ChunkPieces c32 = whole_stage(shard), c16 = c32;
    c16.bf16 = true;
    EXPECT_EQ(Activations::bytes(shard, c32, B, T) - Activations::bytes(shard, c16, B, T),
              2 * kept - R * C * 4);
    // Recomputation keeps the block outputs only, and W's inputs keep their own copies.
    c32.recompute = c16.recompute = true;
    EXPECT_EQ(Activations::bytes(shard, c32, B, T), Activations::bytes(shard, c16, B, T));
    EXPECT_EQ(WeightGradInputs::bytes(shard, c32, B, T) - WeightGradInputs::bytes(shard, c16, B, T),
              2 * kept);

    LayoutSizes sizes;
    sizes.cfg = cfg;
    sizes.micro_batch = B;
    sizes.seq_len = T;
    sizes.layer_ranges = distribute_layers(cfg.layers, 1);
    const pipeline::SchedulePlan plan(pipeline::Schedule::kOneFOneB, {1, 0, 1, 1});
    auto activations = [&](bool bf16) {
      sizes.bf16 = bf16;
      for (const MemoryTerm& t : plan_memory(layout_memory_shape(sizes, plan, 0, 0, 0)).terms) {
        if (t.name == "activations") return t.bytes;
      }
      return int64_t(-1);
    };
    EXPECT_EQ(activations(false) - activations(true), 2 * kept - R * C * 4);
  }
}

}  // namespace mpf

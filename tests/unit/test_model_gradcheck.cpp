// The whole model's gradient (every piece's B, then every piece's W, as gpt_backward does) against
// finite differences of the mean loss, on a tiny model with O(1) weights so every path carries
// signal.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "backends/gemm.hpp"
#include "core/bf16.hpp"
#include "layout/layout_memory.hpp"
#include "model/gpt.hpp"
#include "model/layers/matmul.hpp"
#include "test_helpers.hpp"

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
// OLMo-2's norms after the sublayers and over the whole Q and K projections; Mixtral's experts;
// DeepSeek-V3's latent attention.
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
  // DeepSeek-V3's latent attention: a query rank of 6, a latent of 5, QK heads of 4 + 2 (the
  // rotary pair interleaved, the key's shared), V heads of 3 (padded to 6 for the attention),
  // YaRN with mscale_all_dim (tables and softmax scaled); and without the query rank, the
  // rotary pair in halves and no scaling.
  GPTConfig deepseek = tiny_llama();
  deepseek.arch = Arch::kDeepseekV3;
  deepseek.kv_heads = 0;
  deepseek.q_lora_rank = 6;
  deepseek.kv_lora_rank = 5;
  deepseek.qk_nope_dim = 4;
  deepseek.qk_rope_dim = 2;
  deepseek.v_head_dim = 3;
  deepseek.rope_yarn = true;
  deepseek.rope_factor = 4.0f;
  deepseek.rope_original_max_pos = 2;
  deepseek.yarn_mscale = 1.0f;
  deepseek.yarn_mscale_all_dim = 0.8f;
  GPTConfig deepseek_plain = deepseek;
  deepseek_plain.q_lora_rank = 0;
  deepseek_plain.rope_interleave = false;
  deepseek_plain.rope_yarn = false;
  deepseek_plain.rope_factor = 0.0f;
  for (const GPTConfig& cfg :
       {qwen2, qwen3, mistral, olmo2, mixtral, qwen2_moe, deepseek, deepseek_plain}) {
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
  EXPECT_EQ(tensor_size(TensorId::qkvw, deepseek), 0);
  EXPECT_EQ(tensor_size(TensorId::qbw, deepseek), 2 * 4 * 6 * 6);
  EXPECT_EQ(tensor_size(TensorId::qbw, deepseek_plain), 2 * 4 * 6 * 16);
  EXPECT_EQ(tensor_size(TensorId::qaw, deepseek_plain), 0);
  EXPECT_EQ(tensor_size(TensorId::kvaw, deepseek), 2 * (5 + 2) * 16);
  EXPECT_EQ(tensor_size(TensorId::kvbw, deepseek), 2 * 4 * (4 + 3) * 5);
  EXPECT_EQ(tensor_size(TensorId::attprojw, deepseek), 2 * 16 * 4 * 3);
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

// --precision bf16 keeps activations in bf16 where autocast does (bf16_kept). Against a bf16 step
// keeping them in fp32 (its products round their inputs as they read them): Q, K, V, the
// attention's output and the experts' inputs kept rounded change no product's input; GELU and
// SwiGLU (a dense MLP's and each expert's) read the rounded fc output, as autocast's do, and the
// attention's backward the rounded output, which moves losses and gradients by bf16 roundings
// only. Recomputation gives the kept set's bits.
namespace {
struct StepResult {
  std::vector<float> losses, grads, blocks_output;
};
StepResult bf16_step(const GPTConfig& cfg, bool kept16, bool recompute, bool in_bf16 = true) {
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
    std::unique_ptr<Bf16Products> scope;
    if (in_bf16) {
      scope = std::make_unique<Bf16Products>(m.params.slab.data(), weights16.data(), m.params.count,
                                             16);
    }
    gpt_forward(acts, m.params.t, m.inputs, m.targets, MPI_COMM_SELF, workspace.get());
    gpt_backward(m.grads.t, m.buf, w, acts, m.params.t, m.inputs, m.targets, 1.0f / (m.B * m.T),
                 MPI_COMM_SELF, {}, true, {}, workspace.get());
  }
  const Tensor out = acts.output();
  return {test::to_host(Slab(acts.losses.data(), acts.losses.extent(0))),
          test::to_host(m.grads.slab), test::to_host(Slab(out.data(), out.extent(0)))};
}

// |a - b| / |b| over all elements (Euclidean norms).
double relative_distance(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0.0, n = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d / n);
}
}  // namespace

TEST(Bf16Activations, KeptInBf16TrackTheStepKeepingFp32) {
  if (!backend::kernels().bf16_missing.empty()) GTEST_SKIP() << backend::kernels().bf16_missing;
  GPTConfig olmo2 = tiny_llama();
  olmo2.arch = Arch::kOlmo2;
  GPTConfig mixtral = tiny_llama();
  mixtral.arch = Arch::kMixtral;
  mixtral.experts = 2;
  mixtral.experts_per_token = 2;
  GPTConfig qwen2_moe = mixtral;  // and a shared expert
  qwen2_moe.arch = Arch::kQwen2Moe;
  qwen2_moe.shared_ffn = 12;
  for (const GPTConfig& cfg : {tiny_gpt2(), tiny_llama(), olmo2, mixtral, qwen2_moe}) {
    std::vector<StepResult> kept;
    for (bool recompute : {false, true}) {
      SCOPED_TRACE(std::string(arch_name(cfg.arch)) + (recompute ? " recomputed" : ""));
      const StepResult fp32 = bf16_step(cfg, false, recompute);
      const StepResult bf16 = bf16_step(cfg, true, recompute);
      // The scale of bf16's own error: the same step with fp32 products.
      const StepResult exact = bf16_step(cfg, false, recompute, /*in_bf16=*/false);
      const double products = relative_distance(fp32.grads, exact.grads);
      const double losses = relative_distance(bf16.losses, fp32.losses);
      const double grads = relative_distance(bf16.grads, fp32.grads);
      EXPECT_LT(losses, 2e-3);
      // Within bf16's own scale (a wrong kept value moves them by O(1)).
      EXPECT_LT(grads, 2 * products) << "products' error " << products;
      kept.push_back(bf16);
    }
    EXPECT_EQ(kept[0].losses, kept[1].losses);
    EXPECT_EQ(kept[0].grads, kept[1].grads);
  }
}

// --recompute selective forms the norms' outputs and a dense MLP's GELU or SwiGLU output again in
// W, with the forward's kernels on the same inputs: its losses and gradients are those of a step
// keeping everything, bit for bit, in fp32 and bf16, with W after all of B (deferred, as the
// zero-bubble schedules run it) and W with each block's B (the classic schedules), in fewer bytes.
namespace {
StepResult selective_step(const GPTConfig& cfg, bool bf16, bool selective, bool by_block) {
  TinyModel m(cfg);
  const TpShard shard = make_tp_shard(cfg, 0, 1);
  ChunkPieces chunk = whole_stage(shard);
  chunk.bf16 = bf16;
  chunk.selective = selective;
  Activations acts = Activations::allocate(shard, chunk, m.B, m.T);
  ChunkPieces pair = chunk;  // W with B: two blocks' W inputs
  pair.layers = std::min(chunk.layers, 2);
  WeightGradInputs w = WeightGradInputs::allocate(shard, by_block ? pair : chunk, m.B, m.T);
  Bf16Slab weights16("weights16", m.params.count);
  round_to_bf16(weights16.data(), m.params.slab.data(), m.params.count);
  Kokkos::deep_copy(m.grads.slab, 0.0f);
  {
    std::unique_ptr<Bf16Products> scope;
    if (bf16) {
      scope = std::make_unique<Bf16Products>(m.params.slab.data(), weights16.data(), m.params.count,
                                             16);
    }
    const float dloss = 1.0f / (m.B * m.T);
    gpt_forward(acts, m.params.t, m.inputs, m.targets);
    if (by_block) {
      gpt_backward_by_block(m.grads.t, m.buf, w, acts, m.params.t, m.inputs, m.targets, dloss,
                            MPI_COMM_SELF, {}, nullptr, {}, true);
    } else {
      gpt_backward(m.grads.t, m.buf, w, acts, m.params.t, m.inputs, m.targets, dloss);
    }
  }
  return {test::to_host(Slab(acts.losses.data(), acts.losses.extent(0))),
          test::to_host(m.grads.slab),
          {}};
}
}  // namespace

TEST(SelectiveRecompute, SameBitsAsKeepingEverythingInFewerBytes) {
  GPTConfig olmo2 = tiny_llama();
  olmo2.arch = Arch::kOlmo2;
  GPTConfig mixtral = tiny_llama();
  mixtral.arch = Arch::kMixtral;
  mixtral.experts = 2;
  mixtral.experts_per_token = 2;
  for (const GPTConfig& cfg : {tiny_gpt2(), tiny_llama(), olmo2, mixtral}) {
    for (bool bf16 : {false, true}) {
      if (bf16 && !backend::kernels().bf16_missing.empty()) continue;
      for (bool by_block : {false, true}) {
        SCOPED_TRACE(std::string(arch_name(cfg.arch)) + (bf16 ? " bf16" : " fp32") +
                     (by_block ? ", W with B" : ", W deferred"));
        const StepResult kept = selective_step(cfg, bf16, false, by_block);
        const StepResult again = selective_step(cfg, bf16, true, by_block);
        EXPECT_EQ(kept.losses, again.losses);
        EXPECT_EQ(kept.grads, again.grads);
      }
      const TpShard shard = make_tp_shard(cfg, 0, 1);
      ChunkPieces all = whole_stage(shard), selective = all;
      all.bf16 = selective.bf16 = bf16;
      selective.selective = true;
      EXPECT_LT(Activations::bytes(shard, selective, 2, 5), Activations::bytes(shard, all, 2, 5));
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

// The sets take 2 bytes for each value kept in bf16 instead of 4, and none for GELU's or
// SwiGLU's output beside a kept fc output but one block's scratch, less the one-block fp32
// staging; the memory plan's activation term follows the run's precision.
TEST(Bf16Activations, SetsAndTheMemoryPlanCountTheSavedBytes) {
  GPTConfig mixtral = tiny_llama();
  mixtral.arch = Arch::kMixtral;
  mixtral.experts = 2;
  mixtral.experts_per_token = 2;
  GPTConfig qwen2_moe = mixtral;  // and a shared expert
  qwen2_moe.arch = Arch::kQwen2Moe;
  qwen2_moe.shared_ffn = 12;
  for (const GPTConfig& cfg : {tiny_gpt2(), tiny_llama(), mixtral, qwen2_moe}) {
    SCOPED_TRACE(arch_name(cfg.arch));
    const int B = 2, T = 6;
    const TpShard shard = make_tp_shard(cfg, 0, 1);
    const int64_t R = B * T, C = cfg.channels, L = cfg.layers, F = shard.fc;
    const int64_t dense = cfg.moe() ? 0 : 1;
    // The MLP's rows: R, or a mixture of experts' R·k (token, slot) pairs.
    const int64_t MR = dense ? R : R * cfg.experts_per_token;
    // ln1, Q K V, the attention's output and the fc output always; ln2 unless a mixture of
    // experts' router reads it, whose experts' inputs and outputs are kept instead; GELU's or
    // SwiGLU's output in one block's scratch.
    // A shared expert's [gate | up] and output; its SwiGLU output in the same scratch.
    const int64_t SR = cfg.shared_expert() ? R : 0, Fs = shard.shared_fc;
    const int64_t kept = L * R * (C + shard.qkv + shard.attn) + dense * L * R * C +
                         L * MR * shard.mlp_in + (1 - dense) * L * MR * 2 * C +
                         L * SR * (2 * Fs + C);
    const int64_t h = 4 * L * (MR * F + SR * Fs) - 2 * std::max(MR * F, SR * Fs);
    const int64_t staging = 4 * R * bf16_staging_width(shard);
    // The blocks' (the head's logits have their own rule).
    ChunkPieces c32 = whole_stage(shard), c16 = c32;
    c32.head = false;
    c16.head = false;
    c16.bf16 = true;
    EXPECT_EQ(Activations::bytes(shard, c32, B, T) - Activations::bytes(shard, c16, B, T),
              2 * kept + h - staging);
    // What the blocks read: the kept tensors in bf16, fp32 views of the staging.
    const Activations a16 = Activations::allocate(shard, c16, B, T);
    const LayerActivations l1 = a16.layer(1);
    EXPECT_EQ(int64_t(l1.ln1_bf16.extent(0)), R * C);
    EXPECT_EQ(int64_t(l1.qkv_bf16.extent(0)), R * shard.qkv);
    EXPECT_EQ(int64_t(l1.atty_bf16.extent(0)), R * shard.attn);
    EXPECT_EQ(l1.qkv.data(), a16.staging.data());
    EXPECT_EQ(l1.atty.data(), a16.staging.data() + R * shard.qkv);
    EXPECT_EQ(int64_t(l1.fch_bf16.extent(0)), MR * shard.mlp_in);
    EXPECT_EQ(int64_t(l1.fch.extent(0)), 0);
    EXPECT_EQ(int64_t(l1.moe_in_bf16.extent(0)), (1 - dense) * MR * C);
    EXPECT_EQ(int64_t(l1.moe_in.extent(0)), 0);
    EXPECT_EQ(int64_t(l1.moe_out_bf16.extent(0)), (1 - dense) * MR * C);
    EXPECT_EQ(int64_t(l1.moe_out.extent(0)), 0);
    EXPECT_EQ(int64_t(l1.shared_out_bf16.extent(0)), SR * C);
    EXPECT_EQ(int64_t(l1.shared_h.extent(0)), 0);
    EXPECT_EQ(int64_t(l1.shared_h_bf16.extent(0)), SR * Fs);
    EXPECT_TRUE(l1.recompute_h);
    EXPECT_EQ(l1.fch_gelu_bf16.data(), a16.layer(0).fch_gelu_bf16.data());
    // Recomputation keeps the block outputs only, and W's inputs keep their own copies (GELU's or
    // SwiGLU's output among them: W runs after the workspace holds another block).
    c32.recompute = c16.recompute = true;
    EXPECT_EQ(Activations::bytes(shard, c32, B, T), Activations::bytes(shard, c16, B, T));
    EXPECT_EQ(WeightGradInputs::bytes(shard, c32, B, T) - WeightGradInputs::bytes(shard, c16, B, T),
              2 * L * (R * (C + shard.attn + dense * C) + MR * F + (1 - dense) * MR * C + SR * Fs));
    // --p2p-dtype bf16 under recomputation: the last block's output is lent to the one-op
    // scratch (sent right after the forward), a set one block output lighter.
    // A set that owns its scratch keeps the output there.
    ChunkPieces kept_all = c16, lent = c16;
    kept_all.shared_scratch = lent.shared_scratch = true;
    lent.lent_output = true;
    EXPECT_EQ(Activations::bytes(shard, kept_all, B, T) - Activations::bytes(shard, lent, B, T),
              4 * R * C);
    EXPECT_EQ(Activations::scratch_bytes(shard, lent, B, T, false) -
                  Activations::scratch_bytes(shard, kept_all, B, T, false),
              4 * R * C);
    lent.shared_scratch = false;
    EXPECT_EQ(Activations::bytes(shard, lent, B, T), Activations::bytes(shard, c16, B, T));
    const Activations al = Activations::allocate(shard, lent, B, T);
    EXPECT_EQ(al.output().data(), al.lent_out.data());
    if (L >= 2) {
      EXPECT_EQ(al.block_input(int(L) - 1).data(), al.residual3.data() + (L - 2) * R * C);
    }

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
    ChunkPieces whole32 = whole_stage(shard), whole16 = whole32;
    whole16.bf16 = true;
    whole32.shared_scratch = whole16.shared_scratch = true;  // the staging: one, in the workspace
    EXPECT_EQ(activations(false) - activations(true),
              Activations::bytes(shard, whole32, B, T) - Activations::bytes(shard, whole16, B, T));
  }
}

// Issue 36's target: llama-124M's blocks at T = 8,192 keep at most 0.55x fp32's bytes in bf16
// (sizes only: nothing is allocated).
TEST(Bf16Activations, Llama124MBlocksKeepAtMost055xFp32Bytes) {
  GPTConfig cfg{8192, 32000, 32000, 12, 12, 768};
  cfg.arch = Arch::kLlama;
  cfg.kv_heads = 4;
  cfg.ffn_dim = 2048;
  cfg.tied = false;
  const TpShard shard = make_tp_shard(cfg, 0, 1);
  ChunkPieces blocks{0, cfg.layers, false, false}, blocks16 = blocks;
  blocks16.bf16 = true;
  const double ratio = double(Activations::bytes(shard, blocks16, 1, 8192)) /
                       double(Activations::bytes(shard, blocks, 1, 8192));
  EXPECT_LE(ratio, 0.55);
  EXPECT_GE(ratio, 0.4);  // the residual stream and the norms' statistics stay fp32
}

// Issue 37's activation targets, per block, against Korthikanti et al. 2022 (docs/performance.md,
// "Activation bytes per token"): the bytes a set keeps per token for one more block (a set of two
// blocks less one of one, so the one-block staging and scratch cancel), against the paper's 16-bit
// bytes per token per layer with fused attention and no dropout, adapted for SwiGLU, GQA and a
// mixture of experts. bf16 keeps at most 1.25x the formula, fp32 at most 2.5x (sizes only).
namespace {
struct ActivationFigure {
  double formula = 0, fp32 = 0, bf16 = 0;
  double selective_fp32 = 0, selective_bf16 = 0;  // --recompute selective
};
// 16-bit bytes per token per layer of a block on a TP rank (the formula's terms, /t under TP + SP).
double korthikanti_bytes(const TpShard& s) {
  const GPTConfig& c = s.cfg;
  const double h = c.channels, t = s.size;
  const double q = double(s.heads) * s.head_size, kv = double(s.kv_heads) * s.head_size;
  // The two norms' inputs (the residual stream), the QKV input, Q, K and V, the projection's input
  // (the attention's output), the MLP's input.
  double bytes = 2 * (2 * h) / t + 2 * h / t + 2 * (q + 2 * kv) + 2 * q + 2 * h / t;
  const double up = c.swiglu() ? 2.0 * s.fc : double(s.fc);  // GELU's input or [gate | up]
  const double mlp = 2 * up + 2 * double(s.fc);              // ... and the down projection's input
  if (!c.moe()) return bytes + mlp;
  // A mixture of experts: the router's probabilities in fp32, and per chosen expert its input
  // (the dispatched row), its MLP and its output (which the gate's gradient reads).
  const double k = c.experts_per_token;
  return bytes + 4.0 * c.experts + k * (2 * h + mlp + 2 * h);
}
ActivationFigure activation_figure(const TpShard& shard, int B, int T, bool sp) {
  ActivationFigure f;
  f.formula = korthikanti_bytes(shard);
  const double tokens = double(B) * T;
  for (bool selective : {false, true}) {
    for (bool bf16 : {false, true}) {
      ChunkPieces one{0, 1, false, false}, two{0, 2, false, false};
      one.bf16 = two.bf16 = bf16;
      one.selective = two.selective = selective;
      const double per_layer = double(Activations::bytes(shard, two, B, T, sp) -
                                      Activations::bytes(shard, one, B, T, sp)) /
                               tokens;
      if (selective) {
        (bf16 ? f.selective_bf16 : f.selective_fp32) = per_layer;
      } else {
        (bf16 ? f.bf16 : f.fp32) = per_layer;
      }
    }
  }
  return f;
}
}  // namespace

// A microbatch in flight keeps what its backward reads: the one-op scratch (bf16's staging and
// GELU/SwiGLU scratch, SP's partial sums, EP's dispatch buffers) is the stage's, shared by its
// sets, and the memory plan counts it once, in the workspace.
TEST(ActivationBytes, SetsShareTheirOneOpScratch) {
  GPTConfig mixtral = tiny_llama();
  mixtral.arch = Arch::kMixtral;
  mixtral.experts = 2;
  mixtral.experts_per_token = 2;
  for (const GPTConfig& cfg : {tiny_gpt2(), tiny_llama(), mixtral}) {
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(std::string(arch_name(cfg.arch)) + (bf16 ? " bf16" : " fp32"));
      const int B = 2, T = 6;
      const TpShard shard = make_tp_shard(cfg, 0, 2);
      ChunkPieces own = whole_stage(shard);
      own.bf16 = bf16;
      ChunkPieces shared = own;
      shared.shared_scratch = true;
      const int64_t scratch = Activations::scratch_bytes(shard, own, B, T, true);
      const int64_t R = B * T, C = cfg.channels;
      // SP's partial sums at least; bf16 adds the staging and GELU's or SwiGLU's scratch.
      EXPECT_GE(scratch, 4 * R * C + (bf16 ? 4 * R * bf16_staging_width(shard) : 0));
      EXPECT_EQ(Activations::bytes(shard, own, B, T, true),
                Activations::bytes(shard, shared, B, T, true) + scratch);
      std::vector<float> memory(size_t(scratch / 4));
      Activations a = Activations::allocate(shard, shared, B, T, true);
      EXPECT_EQ(a.staging.extent(0), 0u);
      a.bind_scratch(memory.data());
      const Activations b = Activations::allocate(shard, own, B, T, true);
      EXPECT_EQ(a.partial.data(), memory.data());
      EXPECT_EQ(a.partial.extent(0), b.partial.extent(0));
      EXPECT_EQ(a.staging.extent(0), b.staging.extent(0));
      EXPECT_EQ(a.h_scratch.extent(0), b.h_scratch.extent(0));
      EXPECT_EQ(a.moe_scratch.extent(0), b.moe_scratch.extent(0));
      EXPECT_EQ(a.layer(1).recompute_h, b.layer(1).recompute_h);
    }
  }
}

TEST(ActivationBytes, BlocksKeepAtMostMegatronsBytesPerToken) {
  GPTConfig gpt2{1024, 50257, 50304, 12, 12, 768};
  GPTConfig llama{8192, 32000, 32000, 12, 12, 768};
  llama.arch = Arch::kLlama;
  llama.kv_heads = 4;
  llama.ffn_dim = 2048;
  llama.tied = false;
  GPTConfig moe = llama;
  moe.arch = Arch::kMixtral;
  moe.experts = 8;
  moe.experts_per_token = 2;
  for (const GPTConfig& cfg : {gpt2, llama, moe}) {
    for (int tp : {1, 2}) {
      SCOPED_TRACE(std::string(arch_name(cfg.arch)) + " TP " + std::to_string(tp));
      const ActivationFigure f = activation_figure(make_tp_shard(cfg, 0, tp), 1, 1024, tp > 1);
      std::printf(
          "%-8s TP %d: formula %7.0f B/token/layer, fp32 %7.0f (%.2fx), bf16 %7.0f (%.2fx)\n",
          arch_name(cfg.arch), tp, f.formula, f.fp32, f.fp32 / f.formula, f.bf16,
          f.bf16 / f.formula);
      EXPECT_LE(f.fp32, 2.5 * f.formula);
      EXPECT_LE(f.bf16, 1.25 * f.formula);
      EXPECT_LT(f.bf16, f.fp32);
      // --recompute selective: a block keeps neither norm's output (C values a row each, gathered
      // under SP) nor, in fp32, a dense MLP's GELU or SwiGLU output (F/t a row), which bf16 keeps
      // no more anyway; a mixture of experts leaves out ln1's only.
      std::printf("%-8s TP %d: selective: fp32 %7.0f (%.2fx), bf16 %7.0f (%.2fx)\n",
                  arch_name(cfg.arch), tp, f.selective_fp32, f.selective_fp32 / f.formula,
                  f.selective_bf16, f.selective_bf16 / f.formula);
      const TpShard s = make_tp_shard(cfg, 0, tp);
      const double norms = cfg.moe() ? 1 : 2, h = cfg.moe() ? 0 : s.fc;
      EXPECT_DOUBLE_EQ(f.fp32 - f.selective_fp32, 4 * (norms * cfg.channels + h));
      EXPECT_DOUBLE_EQ(f.bf16 - f.selective_bf16, 2 * norms * cfg.channels);
      if (!cfg.moe()) {
        EXPECT_LE(f.selective_bf16, f.formula);
      }
    }
  }
}

}  // namespace mpf

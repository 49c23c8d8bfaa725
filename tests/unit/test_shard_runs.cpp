// shard_runs, the map checkpoint I/O reads and writes a shard through: element by element it is
// global_index, its runs are maximal, and over the TP ranks they tile every serial tensor.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.hpp"
#include "model/parameters.hpp"
#include "model/shard.hpp"

namespace mpf {
namespace {

GPTConfig tiny() {
  GPTConfig cfg;
  cfg.max_seq_len = 8;
  cfg.vocab = 300;
  cfg.padded_vocab = pad_vocab(300);
  cfg.layers = 3;
  cfg.heads = 4;
  cfg.channels = 16;
  return cfg;
}

// A Llama with KVH kv heads (of 4), an MLP of 24 and an untied head: over TP 2 and 4 its kv heads
// are split (KVH 4) or replicated (KVH 1, and 2 over 4 ranks).
GPTConfig tiny_llama(int kv_heads) {
  GPTConfig cfg = tiny();
  cfg.arch = Arch::kLlama;
  cfg.kv_heads = kv_heads;
  cfg.ffn_dim = 24;
  cfg.tied = false;
  return cfg;
}

// DeepSeek-V3's stack in small: latent attention, the first block dense (an MLP of 24), the other
// two of 4 experts of 8 and a shared expert of 8 (first_k_dense_replace 1).
GPTConfig tiny_mixed() {
  GPTConfig cfg = tiny();
  cfg.arch = Arch::kDeepseekV3;
  cfg.tied = false;
  cfg.q_lora_rank = 8;
  cfg.kv_lora_rank = 8;
  cfg.qk_nope_dim = cfg.qk_rope_dim = cfg.v_head_dim = 4;
  cfg.experts = 4;
  cfg.experts_per_token = 2;
  cfg.ffn_dim = 8;
  cfg.shared_ffn = 8;
  cfg.moe_sigmoid = cfg.moe_noaux = true;
  cfg.dense_layers = 1;
  cfg.dense_ffn = 24;
  return cfg;
}

std::vector<GPTConfig> configs() {
  return {tiny(), tiny_llama(4), tiny_llama(2), tiny_llama(1), tiny_mixed()};
}

// Every (TP size, rank) shard of the whole model, and of two pipeline stages.
std::vector<TpShard> shards(const GPTConfig& cfg, int size) {
  std::vector<TpShard> out;
  for (int r = 0; r < size; ++r) {
    const TpShard whole = make_tp_shard(cfg, r, size);
    out.push_back(whole);
    out.push_back(restrict_to_stage(whole, {0, 2}, /*embedding=*/true, /*head=*/false));
    out.push_back(restrict_to_stage(whole, {1}, /*embedding=*/false, /*head=*/true));
  }
  return out;
}

TEST(ShardRuns, AgreeWithGlobalIndexElementByElement) {
  for (int size : {1, 2, 4}) {
    for (const GPTConfig& cfg : configs()) {
      for (const TpShard& s : shards(cfg, size)) {
        for (const TensorSpec& spec : kTensors) {
          const TensorId t = spec.id;
          std::vector<int64_t> from_runs(s.sizes()[t], -1);
          int64_t prev_end_local = -1, prev_end_global = -1;
          bool prev_replica = false;
          for (const ShardRun& r : shard_runs(s, t)) {
            ASSERT_GT(r.length, 0);
            EXPECT_GT(r.local, prev_end_local - 1) << "runs ascend";
            // Maximal: a run never continues the previous one in both indices.
            EXPECT_FALSE(r.local == prev_end_local && r.global == prev_end_global &&
                         r.replica == prev_replica)
                << "tensor " << spec.name << " tp " << s.rank << "/" << size;
            for (int64_t k = 0; k < r.length; ++k) from_runs[r.local + k] = r.global + k;
            prev_end_local = r.local + r.length;
            prev_end_global = r.global + r.length;
            prev_replica = r.replica;
            for (int64_t k = 0; k < r.length; ++k) {
              ASSERT_EQ(r.replica, s.is_kv_replica(t, r.local + k)) << spec.name;
            }
          }
          for (int64_t j = 0; j < s.sizes()[t]; ++j) {
            ASSERT_EQ(from_runs[j], s.global_index(t, j))
                << "tensor " << spec.name << " element " << j << " tp " << s.rank << "/" << size;
          }
        }
      }
    }
  }
}

// Counting the runs a rank writes (a replicated tensor on TP rank 0, a replicated kv head's rows
// on its owner), every serial element once.
TEST(ShardRuns, TpRanksTileEverySerialTensor) {
  for (const GPTConfig& cfg : configs()) {
    for (int size : {1, 2, 4}) {
      for (const TensorSpec& spec : kTensors) {
        const TensorId t = spec.id;
        const int64_t serial = tensor_size(t, cfg);
        std::vector<int> hits(serial, 0);
        for (int r = 0; r < size; ++r) {
          const TpShard s = make_tp_shard(cfg, r, size);
          if (!s.is_split(t) && r > 0) continue;  // a replicated tensor: one copy counts
          for (const ShardRun& run : shard_runs(s, t)) {
            if (run.replica) continue;
            for (int64_t k = 0; k < run.length; ++k) ++hits[run.global + k];
          }
        }
        // Every real element exactly once; wte's padded rows (no parameter) never.
        const int64_t real = unpadded_size(t, cfg);
        for (int64_t g = 0; g < serial; ++g) {
          ASSERT_EQ(hits[g], g < real ? 1 : 0)
              << "tensor " << spec.name << " element " << g << " tp " << size;
        }
      }
    }
  }
}

// A mixed model: the dense block holds dfcw, dfcprojw and no experts' tensors, the others the
// reverse; over TP and EP every serial element is written once (an expert's by each EP rank
// holding it, the rest by EP rank 0); each block's parameters are one stretch of the slab, every
// local element at its own place in it.
TEST(ShardRuns, MixedBlocksTileOverTpAndEp) {
  const GPTConfig cfg = tiny_mixed();
  validate(cfg, "test");
  for (TensorId t : {TensorId::dfcw, TensorId::dfcprojw}) {
    EXPECT_TRUE(present_in_block(t, cfg, 0) && !present_in_block(t, cfg, 1));
  }
  for (TensorId t :
       {TensorId::fcw, TensorId::fcprojw, TensorId::routerw, TensorId::sfcw, TensorId::moebias}) {
    EXPECT_TRUE(!present_in_block(t, cfg, 0) && present_in_block(t, cfg, 2));
  }
  EXPECT_EQ(tensor_size(TensorId::dfcw, cfg), 2 * 24 * 16);
  EXPECT_EQ(tensor_size(TensorId::fcw, cfg), 2 * 4 * 2 * 8 * 16);
  EXPECT_EQ(layer_offset(TensorId::fcw, cfg, 2), 4 * 2 * 8 * 16);
  for (int tp : {1, 2}) {
    for (int ep : {1, 2}) {
      for (const TensorSpec& spec : kTensors) {
        const TensorId t = spec.id;
        std::vector<int> hits(size_t(tensor_size(t, cfg)), 0);
        for (int e = 0; e < ep; ++e) {
          for (int r = 0; r < tp; ++r) {
            const TpShard s = split_experts(make_tp_shard(cfg, r, tp), e, ep);
            if ((!s.is_split(t) && r > 0) || (!s.is_expert(t) && e > 0)) continue;
            for (const ShardRun& run : shard_runs(s, t)) {
              for (int64_t k = 0; k < run.length; ++k) ++hits[size_t(run.global + k)];
            }
          }
        }
        const int64_t real = unpadded_size(t, cfg);
        for (int64_t g = 0; g < int64_t(hits.size()); ++g) {
          ASSERT_EQ(hits[size_t(g)], g < real ? 1 : 0)
              << "tensor " << spec.name << " element " << g << " tp " << tp << " ep " << ep;
        }
      }
      const TpShard s = split_experts(make_tp_shard(cfg, 0, tp), 0, ep);
      const SlabLayout layout = SlabLayout::of(s);
      std::vector<int> used(size_t(layout.count()), 0);
      for (const TensorSpec& spec : kTensors) {
        layout.for_each_run(spec.id, 0, s.sizes()[spec.id], [&](int64_t, int64_t at, int64_t n) {
          for (int64_t k = 0; k < n; ++k) ++used[size_t(at + k)];
        });
      }
      for (int v : used) ASSERT_EQ(v, 1);
      int64_t end = -1;
      for (int b = 0; b < s.local_layers(); ++b) {
        const auto [lo, hi] = layout.block_range(b);
        if (b > 0) {
          EXPECT_EQ(lo, end) << "the blocks' stretches follow each other";
        }
        end = hi;
        EXPECT_EQ(SlabLayout::block_lengths(s)[size_t(b)], hi - lo);
        for (const SlabPiece& piece : layout.pieces()) {
          if (piece.block == b) {
            EXPECT_TRUE(piece.offset >= lo && piece.offset + piece.length <= hi);
          }
        }
      }
      // The planner's sizes without the pieces: the whole shard's, and a stage's (a dense and an
      // experts' block, no embedding).
      EXPECT_EQ(SlabLayout::count_of(s), layout.count());
      const TpShard stage = restrict_to_stage(s, {0, 1}, false, true);
      const SlabLayout staged = SlabLayout::of(stage);
      EXPECT_EQ(SlabLayout::count_of(stage), staged.count());
      for (int b = 0; b < stage.local_layers(); ++b) {
        const auto [lo, hi] = staged.block_range(b);
        EXPECT_EQ(SlabLayout::block_lengths(stage)[size_t(b)], hi - lo);
      }
      // With a multi-token prediction module: a third kind of block, sized on its own.
      GPTConfig with_mtp = cfg;
      with_mtp.mtp = 1;
      const TpShard m = split_experts(make_tp_shard(with_mtp, 0, tp), 0, ep);
      const SlabLayout ml = SlabLayout::of(m);
      EXPECT_EQ(SlabLayout::count_of(m), ml.count());
      ASSERT_EQ(m.local_layers(), cfg.layers + 1);
      for (int b = 0; b < m.local_layers(); ++b) {
        const auto [lo, hi] = ml.block_range(b);
        EXPECT_EQ(SlabLayout::block_lengths(m)[size_t(b)], hi - lo) << "block " << b;
      }
      // The dense block's MLP is its own width, the experts' blocks' theirs.
      EXPECT_EQ(s.block_shard(0).fc, 24 / tp);
      EXPECT_EQ(s.block_shard(1).fc, 8 / tp);
      // The memory plan's widest GEMM weight and bf16 operand: the dense MLP's [gate | up].
      EXPECT_EQ(s.widest_mlp_in(), 2 * 24 / tp);
    }
  }
}

// A replicated kv head sits on the ranks whose query heads read it: ranks [g·T/KVH, (g+1)·T/KVH)
// hold kv head g, and the GQA group of each of their query heads is g.
TEST(ShardRuns, ReplicatedKvHeadsFollowTheirQueryHeads) {
  for (int kvh : {1, 2}) {
    const GPTConfig cfg = tiny_llama(kvh);
    for (int r = 0; r < 4; ++r) {
      const TpShard s = make_tp_shard(cfg, r, 4);
      EXPECT_EQ(s.kv_heads, 1);
      EXPECT_EQ(s.kv_replicas, 4 / kvh);
      const int group = cfg.heads / kvh;
      for (int h = r * s.heads; h < (r + 1) * s.heads; ++h) EXPECT_EQ(h / group, s.kv_begin);
      EXPECT_EQ(s.kv_owner(), r % (4 / kvh) == 0);
    }
  }
  EXPECT_THROW(make_tp_shard(tiny_llama(2), 0, 3), InputError);  // 3 neither divides nor is
}

}  // namespace
}  // namespace mpf

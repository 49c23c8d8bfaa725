#include <gtest/gtest.h>

#include <map>

#include "model/shard.hpp"
#include "pipeline/layer_ownership.hpp"
#include "test_helpers.hpp"

namespace mpf {

using test::input_error;

TEST(LayerOwnership, EvenSplitWithTheRemainderFirst) {
  for (int L = 1; L <= 13; ++L) {
    for (int n = 1; n <= L; ++n) {
      const auto r = distribute_layers(L, n);
      ASSERT_EQ(int(r.size()), n);
      EXPECT_EQ(r.front().begin, 0);
      EXPECT_EQ(r.back().end, L);
      for (int c = 0; c < n; ++c) {
        EXPECT_EQ(r[c].size(), L / n + (c < L % n ? 1 : 0)) << L << " over " << n;
        if (c > 0) {
          EXPECT_EQ(r[c].begin, r[c - 1].end);  // contiguous, in order
        }
      }
    }
  }
}

TEST(LayerOwnership, NoEmptyChunk) {
  EXPECT_NE(input_error([] { distribute_layers(3, 4); }).find("3 layers cannot fill 4"),
            std::string::npos);
}

TEST(LayerOwnership, ExplicitLayout) {
  const auto r = parse_layer_layout("3,3,2", 8, 3);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[1].begin, 3);
  EXPECT_EQ(r[2].end, 8);
  EXPECT_NE(input_error([] { parse_layer_layout("3,3", 8, 3); }).find("2 entries for 3"),
            std::string::npos);
  EXPECT_NE(input_error([] { parse_layer_layout("4,3,2", 8, 3); }).find("sums to 9"),
            std::string::npos);
  EXPECT_NE(input_error([] { parse_layer_layout("4,0,4", 8, 3); }).find("'0'"), std::string::npos);
  EXPECT_NE(input_error([] { parse_layer_layout("4,x,4", 8, 3); }).find("'x'"), std::string::npos);
}

TEST(LayerOwnership, VirtualStagesOfBothPlacements) {
  using pipeline::ChunkPlacement;
  // P = 4 ranks, V = 2 chunks: looped, rank 1 runs virtual stages 1 and 5; in a V, 1 and 6.
  EXPECT_EQ(pipeline::virtual_stage(ChunkPlacement::kLooped, 4, 1, 0), 1);
  EXPECT_EQ(pipeline::virtual_stage(ChunkPlacement::kLooped, 4, 1, 1), 5);
  EXPECT_EQ(pipeline::virtual_stage(ChunkPlacement::kV, 4, 1, 0), 1);
  EXPECT_EQ(pipeline::virtual_stage(ChunkPlacement::kV, 4, 1, 1), 6);
  // chunk_site inverts virtual_stage, and every virtual stage has exactly one site.
  for (ChunkPlacement p : {ChunkPlacement::kLooped, ChunkPlacement::kV}) {
    for (int P = 1; P <= 6; ++P) {
      const int V = p == ChunkPlacement::kV ? 2 : 3;
      std::vector<int> seen(P * V, 0);
      for (int r = 0; r < P; ++r) {
        for (int c = 0; c < V; ++c) {
          const int s = pipeline::virtual_stage(p, P, r, c);
          ASSERT_TRUE(s >= 0 && s < P * V);
          ++seen[s];
          EXPECT_EQ(pipeline::chunk_site(p, P, s).rank, r);
          EXPECT_EQ(pipeline::chunk_site(p, P, s).chunk, c);
        }
      }
      for (int n : seen) EXPECT_EQ(n, 1);
    }
  }
}

TEST(LayerOwnership, TheVPlacementPutsEmbeddingAndHeadOnRankZero) {
  // 8 blocks over P = 2 ranks in a V: virtual stages 0..3 hold 2 blocks each; rank 0 runs
  // stages 0 and 3, rank 1 stages 1 and 2.
  const auto ranges = distribute_layers(8, 4);
  const auto v = pipeline::ChunkPlacement::kV;
  const StageOwnership r0 = stage_ownership(ranges, 0, 2, v), r1 = stage_ownership(ranges, 1, 2, v);
  EXPECT_EQ(r0.layers, (std::vector<int>{0, 1, 6, 7}));
  EXPECT_EQ(r1.layers, (std::vector<int>{2, 3, 4, 5}));
  ASSERT_EQ(r0.chunks.size(), 2u);
  EXPECT_TRUE(r0.chunks[0].embedding && !r0.chunks[0].head);
  EXPECT_TRUE(!r0.chunks[1].embedding && r0.chunks[1].head);
  EXPECT_EQ(r0.chunks[1].first_layer, 2);  // local index of block 6
  EXPECT_TRUE(r0.embedding && r0.head && !r1.embedding && !r1.head);
  EXPECT_EQ(describe_layout(ranges, 2, v),
            "stage 0: blocks 0-1,6-7 + embedding + head | stage 1: blocks 2-3,4-5");
}

TEST(LayerOwnership, StageOwnershipOfInterleavedChunks) {
  // 6 blocks over P = 2 ranks x V = 2 chunks: virtual stages hold 2, 2, 1, 1 blocks; rank 0 runs
  // virtual stages 0 and 2, rank 1 stages 1 and 3.
  const auto ranges = distribute_layers(6, 4);
  const StageOwnership r0 = stage_ownership(ranges, 0, 2), r1 = stage_ownership(ranges, 1, 2);
  EXPECT_EQ(r0.layers, (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(r1.layers, (std::vector<int>{2, 3, 5}));
  ASSERT_EQ(r0.chunks.size(), 2u);
  EXPECT_EQ(r0.chunks[0].first_layer, 0);
  EXPECT_EQ(r0.chunks[0].layers, 2);
  EXPECT_EQ(r0.chunks[1].first_layer, 2);  // local index of block 4
  EXPECT_EQ(r0.chunks[1].layers, 1);
  EXPECT_TRUE(r0.chunks[0].embedding && !r0.chunks[0].head);
  EXPECT_TRUE(!r0.chunks[1].embedding && !r0.chunks[1].head);
  EXPECT_TRUE(!r1.chunks[0].head && r1.chunks[1].head);  // the last virtual stage
  EXPECT_TRUE(r0.embedding && !r0.head && !r1.embedding && r1.head);
  EXPECT_EQ(describe_layout(ranges, 2),
            "stage 0: blocks 0-1,4 + embedding | stage 1: blocks 2-3,5 + head");
}

namespace {
// Every element of the serial model is held by exactly one (tp, pp) shard, except wte, which
// the first and the last stage both hold (tied) — each TP slice of it exactly twice — unless one
// rank holds both ends (the V placement).
void expect_stages_partition_the_model(pipeline::ChunkPlacement placement, int wte_holders) {
  const GPTConfig cfg{/*max_seq_len=*/4, /*vocab=*/40, pad_vocab(40),
                      /*layers=*/5,      /*heads=*/2,
                      /*channels=*/8};
  const auto ranges = parse_layer_layout("2,1,1,1", 5, 4);  // P = 2, V = 2, uneven
  for (const TensorSpec& spec : kTensors) {
    const TensorId i = spec.id;
    std::map<int64_t, int> held;
    for (int tp = 0; tp < 2; ++tp) {
      for (int pp = 0; pp < 2; ++pp) {
        const StageOwnership own = stage_ownership(ranges, pp, 2, placement);
        const TpShard s =
            restrict_to_stage(make_tp_shard(cfg, tp, 2), own.layers, own.embedding, own.head);
        for (int64_t j = 0; j < s.sizes()[i]; ++j) {
          const int64_t g = s.global_index(i, j);
          if (g >= 0) held[g] += s.is_split(i) || tp == 0 ? 1 : 0;
        }
      }
    }
    ASSERT_EQ(int64_t(held.size()), unpadded_size(i, cfg)) << "tensor " << spec.name;
    for (const auto& [g, n] : held) {
      ASSERT_EQ(n, spec.tied() ? wte_holders : 1) << "tensor " << spec.name << " at " << g;
    }
  }
}
}  // namespace

TEST(LayerOwnership, StagesPartitionTheModel) {
  expect_stages_partition_the_model(pipeline::ChunkPlacement::kLooped, 2);
  expect_stages_partition_the_model(pipeline::ChunkPlacement::kV, 1);
}

}  // namespace mpf

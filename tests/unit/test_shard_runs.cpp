// shard_runs, the map checkpoint I/O reads and writes a shard through: element by element it is
// global_index, its runs are maximal, and over the TP ranks they tile every serial tensor.
#include <gtest/gtest.h>

#include <vector>

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

// Every (TP size, rank) shard of the whole model, and of two pipeline stages.
std::vector<TpShard> shards(int size) {
  std::vector<TpShard> out;
  for (int r = 0; r < size; ++r) {
    const TpShard whole = make_tp_shard(tiny(), r, size);
    out.push_back(whole);
    out.push_back(restrict_to_stage(whole, {0, 2}, /*embedding=*/true, /*head=*/false));
    out.push_back(restrict_to_stage(whole, {1}, /*embedding=*/false, /*head=*/true));
  }
  return out;
}

TEST(ShardRuns, AgreeWithGlobalIndexElementByElement) {
  for (int size : {1, 2, 4}) {
    for (const TpShard& s : shards(size)) {
      for (const TensorSpec& spec : kTensors) {
        const TensorId t = spec.id;
        std::vector<int64_t> from_runs(s.sizes()[t], -1);
        int64_t prev_end_local = -1, prev_end_global = -1;
        for (const ShardRun& r : shard_runs(s, t)) {
          ASSERT_GT(r.length, 0);
          EXPECT_GT(r.local, prev_end_local - 1) << "runs ascend";
          // Maximal: a run never continues the previous one in both indices.
          EXPECT_FALSE(r.local == prev_end_local && r.global == prev_end_global)
              << "tensor " << spec.name << " tp " << s.rank << "/" << size;
          for (int64_t k = 0; k < r.length; ++k) from_runs[r.local + k] = r.global + k;
          prev_end_local = r.local + r.length;
          prev_end_global = r.global + r.length;
        }
        for (int64_t j = 0; j < s.sizes()[t]; ++j) {
          ASSERT_EQ(from_runs[j], s.global_index(t, j))
              << "tensor " << spec.name << " element " << j << " tp " << s.rank << "/" << size;
        }
      }
    }
  }
}

TEST(ShardRuns, TpRanksTileEverySerialTensor) {
  const GPTConfig cfg = tiny();
  for (int size : {1, 2, 4}) {
    for (const TensorSpec& spec : kTensors) {
      const TensorId t = spec.id;
      const int64_t serial = tensor_size(t, cfg);
      std::vector<int> hits(serial, 0);
      for (int r = 0; r < size; ++r) {
        const TpShard s = make_tp_shard(cfg, r, size);
        if (!s.is_split(t) && r > 0) continue;  // a replicated tensor: one copy counts
        for (const ShardRun& run : shard_runs(s, t)) {
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

}  // namespace
}  // namespace mpf

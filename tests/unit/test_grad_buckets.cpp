// The layer-major slab and the data-parallel buckets cut over it: every tensor element has one
// place in the slab; a bucket starts exactly when the last part writing its elements is done, in
// any order the schedule finishes them (several chunks per stage, a tied wte); ZeRO's segments
// tile the slab over the DP ranks, and the reduce-scatter sums what each rank wrote; under expert
// parallelism the experts' buckets are reduced over their own group.
// The buckets run on MPI_COMM_SELF; ZeRO's segments on a DP group of every rank (of one: the
// whole slab).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "model/parameters.hpp"
#include "model/shard.hpp"
#include "optim/grad_buckets.hpp"

namespace mpf {
namespace {

GPTConfig tiny(int layers = 4) {
  GPTConfig cfg;
  cfg.max_seq_len = 8;
  cfg.vocab = 300;
  cfg.padded_vocab = pad_vocab(300);
  cfg.layers = layers;
  cfg.heads = 2;
  cfg.channels = 16;
  return cfg;
}

int64_t block_elems(const Parameters& p) {
  int64_t n = 0;
  for (const TensorSpec& spec : kTensors) {
    if (spec.per_layer()) n += p.sizes[spec.id] / int64_t(p.t.blocks.size());
  }
  return n;
}

TEST(SlabLayout, EveryElementHasOnePlaceAndBlocksAreContiguous) {
  for (int tp : {1, 2}) {
    const TpShard whole = make_tp_shard(tiny(), tp - 1, tp);
    for (const TpShard& s : {whole, restrict_to_stage(whole, {1, 3}, true, false)}) {
      const Parameters p = Parameters::allocate(s, "p");
      std::vector<int> seen(size_t(p.count), 0);
      for (const TensorSpec& spec : kTensors) {
        const TensorId t = spec.id;
        int64_t next = 0;  // runs come in ascending local order and cover the tensor
        p.layout.for_each_run(t, 0, p.sizes[t], [&](int64_t j, int64_t offset, int64_t n) {
          ASSERT_EQ(j, next);
          next += n;
          for (int64_t k = 0; k < n; ++k) ++seen[size_t(offset + k)];
          const SlabPiece& piece = p.layout.piece_at(offset);
          EXPECT_EQ(piece.tensor, t);
          EXPECT_EQ(piece.first + (offset - piece.offset), j);
        });
        EXPECT_EQ(next, p.sizes[t]);
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
      // Block b's twelve pieces form one stretch, after block b - 1's.
      const int64_t per_block = block_elems(p);
      for (size_t b = 0; b < p.t.blocks.size(); ++b) {
        const float* first = p.t.blocks[b].ln1w.data();
        EXPECT_EQ(p.t.blocks[b].fcprojb.data() + p.t.blocks[b].fcprojb.extent(0),
                  first + per_block);
        if (b > 0) {
          EXPECT_EQ(first, p.t.blocks[b - 1].ln1w.data() + per_block);
        }
      }
    }
  }
}

// Tells the buckets of each part in `order`, checking after each that exactly the buckets whose
// parts are all done have started.
void finish_parts(DataParallelGrads& dp, const std::vector<int>& order, int blocks) {
  std::vector<bool> done(size_t(dp.tied_sum_index() + 1), false);
  for (int part : order) {
    if (part < blocks) {
      dp.part_done({ModelPart::Kind::kBlock, part});
    } else if (part == blocks) {
      dp.part_done({ModelPart::Kind::kHead});
    } else if (part == blocks + 1) {
      dp.part_done({ModelPart::Kind::kEmbedding});
    } else {
      dp.tied_sum_done();
    }
    done[size_t(part)] = true;
    for (size_t i = 0; i < dp.buckets().size(); ++i) {
      const std::vector<int>& parts = dp.buckets()[i].parts;
      const bool all =
          std::all_of(parts.begin(), parts.end(), [&](int q) { return done[size_t(q)]; });
      ASSERT_EQ(dp.started(i), all && !parts.empty()) << "bucket " << i << " after part " << part;
    }
  }
  dp.finish();
}

TEST(GradBuckets, OneBucketPerBlockStartsWhenItsBlockIsDone) {
  const TpShard s = make_tp_shard(tiny(), 0, 1);
  Parameters g = Parameters::allocate(s, "g");
  DataParallelGrads dp(g, s, MPI_COMM_SELF, block_elems(g), /*zero=*/false);
  // wte, wpe, the four blocks, lnf: each block's gradients are one bucket of their own.
  ASSERT_EQ(dp.buckets().size(), 7u);
  for (int b = 0; b < 4; ++b) {
    const GradBucket& bucket = dp.buckets()[size_t(2 + b)];
    EXPECT_EQ(bucket.parts, std::vector<int>{b});
    EXPECT_EQ(bucket.begin, g.t.blocks[b].ln1w.data() - g.slab.data());
    EXPECT_EQ(bucket.end - bucket.begin, block_elems(g));
  }
  // The serial backward: head, blocks 3..0, embedding. Block 3's bucket starts before block 2's
  // W, which a tensor-major slab cannot do (its qkvw bucket would hold every block's).
  finish_parts(dp, {4, 3, 2, 1, 0, 5}, 4);
}

TEST(GradBuckets, AnyOrderOfChunksAndBucketSizes) {
  // An interleaved or V stage finishes its chunks' blocks in the schedule's order; buckets of
  // every size, from a piece to the whole slab, start exactly when their last part is done.
  std::mt19937 rng(3);
  const TpShard whole = make_tp_shard(tiny(6), 0, 1);
  for (const TpShard& s : {whole, restrict_to_stage(whole, {0, 1, 4, 5}, true, true)}) {
    Parameters g = Parameters::allocate(s, "g");
    const int blocks = s.local_layers();
    for (int64_t target : {int64_t(1), int64_t(500), block_elems(g), 3 * block_elems(g), g.count}) {
      DataParallelGrads dp(g, s, MPI_COMM_SELF, target, false);
      std::vector<int> order(size_t(blocks + 2));
      std::iota(order.begin(), order.end(), 0);
      for (int trial = 0; trial < 20; ++trial) {
        std::shuffle(order.begin(), order.end(), rng);
        finish_parts(dp, order, blocks);
      }
    }
  }
}

TEST(GradBuckets, TiedWteWaitsForItsSumAlone) {
  // The first stage of a pipeline: wte is final only after the embedding group's all-reduce,
  // and only its bucket waits for that.
  const TpShard s = restrict_to_stage(make_tp_shard(tiny(), 0, 1), {0, 1}, true, false);
  Parameters g = Parameters::allocate(s, "g");
  DataParallelGrads dp(g, s, MPI_COMM_SELF, block_elems(g), false, /*tied_wte=*/true);
  int waiting_for_sum = 0;
  for (const GradBucket& b : dp.buckets()) {
    const bool tied = std::count(b.parts.begin(), b.parts.end(), dp.tied_sum_index()) > 0;
    waiting_for_sum += tied;
    if (tied) {
      EXPECT_EQ(b.begin, 0);  // wte leads the slab
    }
  }
  EXPECT_EQ(waiting_for_sum, 1);
  finish_parts(dp, {1, 0, 3, 4}, 2);  // blocks 1, 0, the embedding, then the tied sum
}

TEST(GradBuckets, ZeroSegmentsTileTheSlabAndTheShardsHoldTheSum) {
  int ranks = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const TpShard s = make_tp_shard(tiny(), 0, 1);
  Parameters g = Parameters::allocate(s, "g", ranks);
  for (int64_t target : {int64_t(1), int64_t(777), block_elems(g)}) {
    DataParallelGrads dp(g, s, MPI_COMM_WORLD, target, /*zero=*/true);
    // This rank's segments lie each in one piece; over the ranks they cover every element once.
    std::vector<int> covered(size_t(g.count), 0);
    for (const OptimizerSegment& seg : dp.zero_segments()) {
      const SlabPiece& piece = g.layout.piece_at(seg.param);
      EXPECT_EQ(piece.tensor, seg.tensor);
      EXPECT_LE(seg.param + seg.length, piece.offset + piece.length);
      for (int64_t k = 0; k < seg.length; ++k) ++covered[size_t(seg.param + k)];
    }
    MPI_Allreduce(MPI_IN_PLACE, covered.data(), int(covered.size()), MPI_INT, MPI_SUM,
                  MPI_COMM_WORLD);
    EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));
    // Gradients (rank + 1) · (slab position): the summed shard is Σ(r + 1) · position.
    auto h = Kokkos::create_mirror_view(g.slab);
    for (int64_t k = 0; k < int64_t(h.extent(0)); ++k) h(k) = float((rank + 1) * (k % 1000));
    Kokkos::deep_copy(g.slab, h);
    finish_parts(dp, {4, 3, 2, 1, 0, 5}, 4);
    auto shard = Kokkos::create_mirror_view_and_copy(
        Kokkos::HostSpace(),
        Kokkos::View<const float*, MemSpace>(dp.shard_grads(), dp.shard_size()));
    const float ranks_sum = float(ranks * (ranks + 1) / 2);
    for (const OptimizerSegment& seg : dp.zero_segments()) {
      for (int64_t k = 0; k < seg.length; ++k) {
        ASSERT_EQ(shard(seg.grad + k), ranks_sum * float((seg.param + k) % 1000));
      }
    }
  }
}

// ZeRO-2/3 (optim/sharded_blocks.hpp) reduce and gather a block as its own buckets: whatever the
// bucket size, each block is cut exactly at its edges (not rounded to the DP size, so a shard may
// be uneven), its buckets pooled and holding no other part, and the edge tensors' buckets not;
// ZeRO's segments still tile the slab.
TEST(GradBuckets, ZeroTwoAndThreeCutEachBlockExactly) {
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const TpShard s = make_tp_shard(tiny(), 0, 1);
  Parameters g = Parameters::allocate(s, "g", ranks);
  for (int stage : {2, 3}) {
    for (int64_t target : {int64_t(1), int64_t(777), 10 * block_elems(g)}) {
      DataParallelGrads dp(g, s, MPI_COMM_WORLD, target, /*zero=*/true, false, MPI_COMM_NULL,
                           stage);
      EXPECT_EQ(dp.stage(), stage);
      for (int l = 0; l < s.local_layers(); ++l) {
        const auto [lo, hi] = g.layout.block_range(l);
        int64_t at = lo;
        for (size_t i : dp.block_buckets(l)) {
          const GradBucket& b = dp.buckets()[i];
          EXPECT_TRUE(dp.pooled(i));
          EXPECT_EQ(b.parts, std::vector<int>{l});
          EXPECT_EQ(b.begin, at);
          at = b.end;
        }
        EXPECT_EQ(at, hi);
      }
      for (size_t i = 0; i < dp.buckets().size(); ++i) {
        const std::vector<int>& parts = dp.buckets()[i].parts;
        const bool block = parts.size() == 1 && parts[0] < s.local_layers();
        EXPECT_EQ(dp.pooled(i), block);
      }
      int64_t covered = 0;
      for (const OptimizerSegment& seg : dp.zero_segments()) covered += seg.length;
      MPI_Allreduce(MPI_IN_PLACE, &covered, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
      EXPECT_EQ(covered, g.count);
    }
  }
}

// Under expert parallelism the experts' gradients are summed over their own group (here each
// rank alone, as EP = the DP ranks gives) and the rest over DP: no bucket mixes the two, every
// element is some rank's under ZeRO (the experts' on every rank, each holding its own), and the
// sums are over the right ranks. C = 18 and 3 experts make runs that do not divide over 4 ranks:
// uneven shards.
TEST(GradBuckets, ExpertBucketsAreReducedOverTheirOwnGroup) {
  int ranks = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  GPTConfig cfg = tiny(2);
  cfg.arch = Arch::kMixtral;
  cfg.channels = 18;
  cfg.heads = cfg.kv_heads = 1;
  cfg.ffn_dim = 6;
  cfg.experts = 3;  // a router of 3 x 18: a dense run of 2 mod 4 elements
  cfg.experts_per_token = 1;
  cfg.tied = false;
  const TpShard s = make_tp_shard(cfg, 0, 1);
  Parameters g = Parameters::allocate(s, "g", ranks);
  for (bool zero : {false, true}) {
    DataParallelGrads dp(g, s, MPI_COMM_WORLD, 100, zero, false, MPI_COMM_SELF);
    int uneven = 0;
    for (const GradBucket& b : dp.buckets()) {
      EXPECT_EQ(int(b.counts.size()), b.experts ? 1 : ranks);
      uneven += (b.end - b.begin) % int64_t(b.counts.size()) != 0;
      for (const SlabPiece& piece : g.layout.pieces()) {
        if (piece.offset < b.end && piece.offset + piece.length > b.begin && b.end <= g.count) {
          EXPECT_EQ(s.is_expert(piece.tensor), b.experts) << kTensors[int(piece.tensor)].name;
        }
      }
    }
    if (ranks == 4) {
      EXPECT_GT(uneven, 0);  // the path of MPI_Ireduce_scatter with counts
    }
    auto h = Kokkos::create_mirror_view(g.slab);
    for (int64_t k = 0; k < int64_t(h.extent(0)); ++k) h(k) = float((rank + 1) * (k % 1000));
    Kokkos::deep_copy(g.slab, h);
    finish_parts(dp, {1, 0, 2, 3}, 2);
    const float ranks_sum = float(ranks * (ranks + 1) / 2);
    auto expected = [&](int64_t k) {
      const bool expert = s.is_expert(g.layout.piece_at(k).tensor);
      return (expert ? float(rank + 1) : ranks_sum) * float(k % 1000);
    };
    if (!zero) {
      Kokkos::deep_copy(h, g.slab);
      for (int64_t k = 0; k < g.count; ++k) ASSERT_EQ(h(k), expected(k)) << k;
      continue;
    }
    std::vector<int> covered(size_t(g.count), 0);
    auto shard = Kokkos::create_mirror_view_and_copy(
        Kokkos::HostSpace(),
        Kokkos::View<const float*, MemSpace>(dp.shard_grads(), dp.shard_size()));
    for (const OptimizerSegment& seg : dp.zero_segments()) {
      for (int64_t k = 0; k < seg.length; ++k) {
        ++covered[size_t(seg.param + k)];
        ASSERT_EQ(shard(seg.grad + k), expected(seg.param + k));
      }
    }
    MPI_Allreduce(MPI_IN_PLACE, covered.data(), int(covered.size()), MPI_INT, MPI_SUM,
                  MPI_COMM_WORLD);
    for (int64_t k = 0; k < g.count; ++k) {
      ASSERT_EQ(covered[size_t(k)], s.is_expert(g.layout.piece_at(k).tensor) ? ranks : 1) << k;
    }
  }
}

}  // namespace
}  // namespace mpf

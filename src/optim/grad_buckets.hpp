// The data-parallel gradient reduction over flat buckets (Megatron's DDP buckets): the gradient
// slab is cut into buckets of about --dp-bucket-mb, each reduced with one nonblocking collective
// on the DP communicator.
//
// A bucket is ready when every part of the model that writes one of its elements has finished
// its last W of the step: a block, the LM head, the embedding, and for a wte tied across
// pipeline stages the all-reduce of its two halves over the embedding group. The slab is
// layer-major (model/parameters.hpp), so a block's gradients are one stretch and buckets are cut
// at block boundaries: with --overlap-grad-reduce a bucket starts as soon as the blocks it holds
// are done, while the backward goes on, under pipelining too, for every chunk, in whatever order
// the schedule finishes them.
//
// Plain DP: MPI_Iallreduce in place, every rank ends with the summed gradient.
// ZeRO-1:   MPI_Ireduce_scatter_block: rank d keeps the sum of the d-th 1/D of every bucket in a
//           shard buffer, updates only those parameters (optimizer state 1/D), and the buckets'
//           parameters are then all-gathered.
// ZeRO-2/3:  as ZeRO-1, but each block's gradients are a bucket of their own, cut exactly at the
//           block's edges (with counts when D does not divide it). optim/sharded_blocks.hpp
//           reduces those buckets itself, after each microbatch's W of the block, from a small pool
//           of block-sized buffers (the slab's blocks' stretch is never written), and under ZeRO-3
//           gathers the blocks' parameters itself before each use; this class keeps the other
//           buckets (the embedding, the head) as under ZeRO-1.
// Bucket lengths are multiples of D (the slabs are padded to a multiple of D for that), except
// under expert parallelism: the experts' gradients are summed (and ZeRO-sharded) over the
// expert-data-parallel group instead, so buckets are cut exactly where the slab passes between
// experts' pieces and the rest, each bucket reduced over its own group, and a bucket that does
// not divide evenly gives its first ranks one element more (MPI_Ireduce_scatter and
// MPI_Iallgatherv with counts).
//
// --zero-group node (HSDP, set_replicas): the group is one node's ranks of DP x CP, so each
// bucket's reduce-scatter and the parameters' all-gather stay within the node; after the
// reduce-scatters each rank's shard (its node's sum) is all-reduced over the ranks holding the
// same shard on the other nodes, which gives every copy the sum over all of DP x CP.
//
// The ranks of a DP group run the same stage program, so they finish parts in the same order and
// start the buckets' collectives in the same order, as MPI requires.
//
// With an MPI that cannot read GPU memory (parallel/device_mpi.hpp, staged()), the collectives
// run on a page-locked host copy of the slab: a bucket is copied to it when it starts and the
// summed slab (or ZeRO shard) comes back once when all are done.
//
// --grad-reduce-dtype bf16 (set_bf16_reduction; plain DP and ZeRO-1): a bucket is rounded to bf16
// (to nearest, ties to even) into a host copy and reduced there with a sum that adds two bf16
// values in fp32 and rounds the result, as NCCL's bf16 all-reduce under Megatron does; the sums
// are widened back into the slab (or the ZeRO shard) when all are done. Half the bytes; the sum
// carries bf16's error (a relative 2^-8 per partial sum). The sum is a host function, so the
// copy is in host memory whatever the build.
#pragma once

#include <mpi.h>

#include <vector>

#include "core/bf16.hpp"
#include "core/types.hpp"
#include "model/gpt.hpp"
#include "model/shard.hpp"
#include "optim/adamw.hpp"

namespace mpf {

struct GradBucket {
  int64_t begin = 0, end = 0;  // slab range
  std::vector<int> parts;      // the parts (DataParallelGrads::part_index) writing its elements
  int64_t shard_offset = 0;    // ZeRO: where this rank's part of the bucket sits in the shard
  bool experts = false;        // the experts' gradients: reduced over the expert-DP group
  // The bucket's part on each rank of its group (ZeRO's shards, in rank order).
  std::vector<int> counts, displs;
};

class DataParallelGrads {
 public:
  // grads: the gradient slab (padded to a multiple of dp size) of `shard`'s parameters;
  // bucket_elems: target bucket size; tied_wte: wte's gradient is completed over the embedding
  // group after the schedule (pipeline stages), tied_sum_done() says when.
  // expert_dp: the group the experts' gradients are summed over under EP (MPI_COMM_NULL: dp,
  // like the rest).
  // stage: the ZeRO stage when `zero` (1, 2 or 3).
  DataParallelGrads(const Parameters& grads, const TpShard& shard, MPI_Comm dp,
                    int64_t bucket_elems, bool zero, bool tied_wte = false,
                    MPI_Comm expert_dp = MPI_COMM_NULL, int stage = 1);
  ~DataParallelGrads();
  DataParallelGrads(const DataParallelGrads&) = delete;
  DataParallelGrads& operator=(const DataParallelGrads&) = delete;

  // A part's gradients are final for this step (once per part and step, after its last W):
  // starts every bucket that was waiting only for it, and lets MPI progress.
  void part_done(ModelPart part);
  // The tied wte's two halves have been summed over the embedding group.
  void tied_sum_done();
  // Starts every bucket not yet started, then waits for all.
  void finish();
  // --grad-reduce-dtype bf16 (see the top): before the first step; not under ZeRO-2/3.
  void set_bf16_reduction(bool on);
  bool bf16_reduction() const { return host16_.data() != nullptr; }
  // --zero-group node (HSDP): `dp` is this node's ranks of DP x CP, and `replicas` the ranks
  // holding the same shard on the other nodes; finish() then sums the shard over them. Before
  // the first step; ZeRO only.
  void set_replicas(MPI_Comm replicas) { replicas_ = replicas; }
  // The group the shards are split over (DP x CP, or a node's part of it).
  MPI_Comm group() const { return dp_; }

  bool zero() const { return zero_; }
  // 0 without ZeRO, else its stage.
  int stage() const { return stage_; }
  // ZeRO-2/3: a bucket holding one block's gradients, which sharded_blocks.hpp reduces (and
  // gathers) itself; the buckets of local block `block`.
  bool pooled(size_t bucket) const { return pooled_[bucket]; }
  const std::vector<size_t>& block_buckets(int block) const {
    return buckets_of_part_[size_t(block)];
  }
  // A bucket's group (the expert-DP group for the experts' under EP, else DP x CP) and this
  // rank's place in it.
  MPI_Comm bucket_comm(size_t bucket) const { return comm(buckets_[bucket]); }
  int bucket_rank(size_t bucket) const { return rank_in(buckets_[bucket]); }
  // ZeRO: the shard of summed gradients, written in place by sharded_blocks.hpp.
  float* shard_data() { return shard_.data(); }
  // ZeRO: the summed gradients of this rank's parts of the buckets, and the optimizer segments
  // that update exactly those parameters.
  const float* shard_grads() const { return shard_.data(); }
  int64_t shard_size() const { return int64_t(shard_.extent(0)); }
  std::vector<OptimizerSegment> zero_segments() const;
  // ZeRO: after the update, every rank gathers every bucket's parameters from their owners.
  void allgather_params(float* params);

  const std::vector<GradBucket>& buckets() const { return buckets_; }
  bool started(size_t bucket) const { return started_[bucket]; }
  // Parts are numbered: blocks 0..L-1 (this rank's), then the head, the embedding, the tied sum.
  int part_index(ModelPart part) const;
  int tied_sum_index() const { return blocks_ + 2; }

 private:
  void part_done(int part);
  void start(size_t b);
  // A bucket's group, its size and this rank's place in it.
  MPI_Comm comm(const GradBucket& b) const { return b.experts ? expert_dp_ : dp_; }
  int rank_in(const GradBucket& b) const { return b.experts ? expert_rank_ : rank_; }

  MPI_Comm dp_, expert_dp_, replicas_ = MPI_COMM_NULL;
  int ranks_ = 1, rank_ = 0, expert_ranks_ = 1, expert_rank_ = 0, blocks_ = 0;
  bool zero_ = false;
  int stage_ = 0;
  std::vector<bool> pooled_;
  float* grads_ = nullptr;
  SlabLayout layout_;
  std::vector<GradBucket> buckets_;
  std::vector<std::vector<size_t>> buckets_of_part_;
  std::vector<int> waiting_;  // per bucket: parts not yet done this step
  std::vector<MPI_Request> requests_;
  std::vector<bool> started_;
  Slab shard_;
  // Staged: the host copy of the gradient slab (then, under ZeRO, of the parameters being
  // gathered) and of the ZeRO shard.
  Kokkos::View<float*, PinnedSpace> host_slab_, host_shard_;
  // bf16 reduction: the rounded slab and the ZeRO shard's bf16 sums, in host memory (the sum
  // runs there), and in a GPU build their device copies.
  Kokkos::View<bf16*, PinnedSpace> host16_, host16_shard_;
  Bf16Slab dev16_;
};

}  // namespace mpf

// ZeRO-2 and ZeRO-3 over the blocks (docs/design.md, "Data parallel"). The unit is one block:
// the slab is layer-major, so a block's parameters, and its gradients, are one stretch of their
// slab, and DataParallelGrads cuts each block into buckets of its own (grad_buckets.hpp). The
// embedding, the final norm and the LM head stay as under ZeRO-1 (whole on every rank, their
// gradients reduce-scattered into the shard, their parameters all-gathered after the update).
//
// ZeRO-2: a block's gradients are never kept whole for the step. Before its W the block's
//   gradient views point at a zeroed buffer of a pool of two block-sized ones; after that W (each
//   microbatch's) the buffer is reduce-scattered (MPI_Ireduce_scatter) over DP x CP and, once
//   done, added into this rank's shard of the summed gradients, and the buffer serves another
//   block. The reduction of one block runs while the next block's backward computes. Sums the
//   model does over TP once a step (sequence parallelism's norm gradients, a replicated kv head's)
//   are then done at every W: they are linear, so the same sum.
// ZeRO-3: the blocks' parameters are kept only as this rank's shard, at its own places in the
//   slab (whose other places are never written: on the host they take no memory). Before a block
//   is used (its forward, its recomputation, its B and W) its parameters are all-gathered
//   (MPI_Iallgatherv) into one of two gather buffers and its views pointed there; the next
//   block's gather is posted first (prefetch), so it runs while this block computes. After the
//   backward the buffers are dropped: the update changes the shards.
//
// Each bucket of a block goes over its own group: DP x CP, or under EP the expert-DP group for
// the experts' part. The ranks of a group run the same stage program, so they use the blocks in
// the same order, whatever the pipeline schedule, and post these collectives alike, as MPI
// requires.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/types.hpp"
#include "model/block_gate.hpp"
#include "model/parameters.hpp"
#include "optim/grad_buckets.hpp"

namespace mpf {

class ShardedBlocks : public BlockGate {
 public:
  // stage 2 or 3; `params` and `grads` allocated with allocate_sparse_blocks where their blocks'
  // stretch is sharded (grads under 2 and 3, params under 3). Sets params.t.gate.
  ShardedBlocks(DataParallelGrads& dp, Parameters& params, Parameters& grads, int stage);
  ~ShardedBlocks() override;
  ShardedBlocks(const ShardedBlocks&) = delete;
  ShardedBlocks& operator=(const ShardedBlocks&) = delete;

  void enter(int block, Use use, int next) override;
  void weight_done(int block) override;
  bool grads_per_microbatch() const override { return true; }

  // Before a step's backward: zeroes the gradients this rank keeps (the edge tensors' part of the
  // slab and the shard of sums).
  void begin_step();
  // After the step's last W: every block's reduction has landed in the shard; the gathered
  // parameters are dropped (the update is about to change them).
  void finish();
  // The slab ranges of this rank's shard of the blocks (ZeRO-3 initialises only those).
  std::vector<std::pair<int64_t, int64_t>> owned_ranges() const;

  // Elements of one block's stretch, and of this rank's part of it.
  int64_t block_elems() const { return block_elems_; }
  int64_t block_part_elems() const { return part_elems_; }

 private:
  struct Gathered {  // ZeRO-3: a block's parameters, whole
    Slab buf;
    int block = -1;
    std::vector<MPI_Request> requests;
    uint64_t used = 0;
  };
  struct Reducing {  // ZeRO-2/3: a block's gradients for one microbatch, and this rank's sum of
                     // them
    Slab whole, part;
    int block = -1;
    bool in_flight = false;
    std::vector<MPI_Request> requests;
    uint64_t started = 0;
  };
  Gathered& gather(int block);  // resident or posted
  void wait(Gathered& g);
  void drop(Gathered& g);
  void complete(Reducing& r);
  int64_t begin_of(int block) const { return params_.layout.block_range(block).first; }

  DataParallelGrads& dp_;
  Parameters& params_;
  Parameters& grads_;
  int stage_;
  int64_t block_elems_ = 0, part_elems_ = 0;
  uint64_t clock_ = 0;
  Gathered gathered_[2];
  Reducing reducing_[2];
};

}  // namespace mpf

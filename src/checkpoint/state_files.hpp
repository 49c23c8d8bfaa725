// A rank's part of the training state in the layout-independent files (docs/design.md,
// "Checkpoints"): the llm.c model file (parameters) and the optimizer file (AdamW's m and v in the
// same order), read and written collectively with MPI-IO. Each rank transfers the elements it holds
// at their serial offsets (shard_runs): TP shards, pipeline stages and ZeRO-1 optimizer shards are
// cut on load from whole tensors, so any layout reads what any other wrote, and no rank holds more
// than its own part.
//
// Of an element's replicas exactly one writes it, and on load the same rule picks the one rank
// that counts it into its tensor's checksum: TP rank 0 for a tensor every TP rank holds whole; DP
// rank 0 for parameters, and for m and v without ZeRO (under ZeRO-1 the DP rank whose shard
// holds it, of its first node's copy under --zero-group node; under ZeRO-3 the blocks' parameters
// too); for the experts under EP, expert-DP rank 0 of
// each EP rank; the first stage for the tied wte.
#pragma once

#include <string>
#include <vector>

#include "io/parallel_file.hpp"
#include "model/shard.hpp"
#include "optim/adamw.hpp"
#include "parallel/grid.hpp"

namespace mpf {

// Whether this rank is the one of a parameter's replicas that writes it (the rule above):
// TP rank 0 for a replicated tensor, DP rank 0, the first stage for the tied wte.
bool writes_parameter(const TpShard& shard, int dp_rank, TensorId tensor);

class StateFiles {
 public:
  // zero: the optimizer's segments are ZeRO shards of the DP group's moments; sharded_params
  // (ZeRO-3): the blocks' parameters are held only at those segments' places, and their owner
  // writes them, as it writes their moments.
  StateFiles(const Grid& grid, const TpShard& shard, const Parameters& params,
             const AdamW& optimizer, bool zero, bool sharded_params = false);
  // The parameters only, for programs that run the model: the optimizer file is not theirs to
  // read or write.
  StateFiles(const Grid& grid, const TpShard& shard, const Parameters& params);

  // Collective over the grid's world. Each returns "" or the first error (the same text on every
  // rank), and fills digests with each section's checksum and non-finite count, summed over the
  // ranks: the 16 tensors of the model file; m's 16 then v's 16 in the optimizer file.
  std::string write_model(const std::string& path, std::vector<Digest>& digests) const;
  std::string read_model(const std::string& path, std::vector<Digest>& digests) const;
  std::string write_optimizer(const std::string& path, std::vector<Digest>& digests) const;
  std::string read_optimizer(const std::string& path, std::vector<Digest>& digests) const;

  // The same files written from a host copy of this rank's state (an asynchronous save's
  // staging buffers: `slab` as many floats as the parameters' slab, `m` and `v` as the moments),
  // collectively over `comm` (the saving thread's own communicator, over the same ranks as the
  // world). Offsets into the slab and the moments are the originals', so the files are the same
  // bytes.
  StateFiles on_host_copy(MPI_Comm comm, float* slab, float* m, float* v) const;

  // For tests: this rank's copy into the model file's staging buffers throws mid-write
  // (ParallelFile::fail_staging_for_tests).
  void fail_staging_for_tests() { fail_staging_ = true; }

  // --zero-group node: the shards are replicated across nodes, and only the copy whose rank among
  // the replicas is 0 writes (and counts) its ZeRO shard's elements; the others read them.
  void set_zero_replica(int rank) { zero_replica_ = rank; }

  // The bytes of the two files.
  int64_t model_bytes() const;
  int64_t optimizer_bytes() const;
  // Names the tensor (and layer) of body position `position` of the model file: "qkvw (layer 1)
  // element 4711". Positions of the optimizer file's v count on from m's.
  std::string describe_position(int64_t position) const;

 private:
  // The runs of this rank's parameters (moments: false) or of m and v (true); all it holds, or
  // only those it writes.
  std::vector<FileRun> runs(bool moments, bool writes_only) const;
  bool writes(TensorId tensor, bool moments) const;
  std::string transfer(bool write, bool moments, const std::string& path,
                       std::vector<Digest>& digests) const;
  StateFiles(const Grid& grid, const TpShard& shard, const Parameters& params,
             const AdamW* optimizer, bool zero, bool sharded_params);

  MPI_Comm world_;
  int world_rank_, tp_rank_, dp_rank_;
  bool zero_, sharded_params_;
  int zero_replica_ = 0;
  TpShard shard_;
  GPTConfig cfg_;
  int64_t count_;            // parameters of the whole model
  PerTensor<int64_t> base_;  // each tensor's first body position
  float* slab_;              // this rank's parameters
  SlabLayout layout_;        // ... where each tensor sits in them
  PerTensor<std::vector<ShardRun>> shard_runs_;
  std::vector<OptimizerSegment> segments_;
  float* m_;  // null without an optimizer
  float* v_;
  bool host_memory_ = false;  // slab_, m_ and v_ are a host copy (on_host_copy)
  bool fail_staging_ = false;
};

}  // namespace mpf

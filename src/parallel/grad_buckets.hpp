// The data-parallel gradient reduction over flat buckets (Megatron's DDP buckets): the gradient
// slab is cut into buckets of about --dp-bucket-mb, each reduced with one nonblocking collective
// on the DP communicator.
//
// A bucket is ready when the last backward piece writing any of its elements has run (the event
// numbering of gpt_backward). The slab is in llm.c's tensor-major order, so layer l's slice of
// every per-layer tensor is final after block l's W: buckets become ready one after another as
// the backward walks down the layers, and with --overlap-grad-reduce each starts right then,
// while the backward goes on.
//
// Plain DP: MPI_Iallreduce in place, every rank ends with the summed gradient.
// ZeRO-1:   MPI_Ireduce_scatter_block: rank d keeps the sum of the d-th 1/D of every bucket in a
//           shard buffer, updates only those parameters (optimizer state 1/D), and the buckets'
//           parameters are then all-gathered.
// Bucket lengths are multiples of D (the slabs are padded to a multiple of D for that).
//
// Pipeline stages: the events are those of the stage's own blocks. A wte tied across stages
// (first and last stage each hold it) is all-reduced over the embedding group by the trainer
// once the whole schedule is done, so its buckets wait for finish().
#pragma once

#include <mpi.h>

#include <vector>

#include "core/types.hpp"
#include "model/shard.hpp"
#include "optim/adamw.hpp"

namespace mpf {

struct GradBucket {
  int64_t begin = 0, end = 0;  // slab range; end - begin is a multiple of D
  int ready_event = 0;         // gpt_backward's event after which every element is final
  int64_t shard_offset = 0;    // ZeRO: where this rank's part of the bucket sits in the shard
};

class DataParallelGrads {
 public:
  // grads: the gradient slab (padded to a multiple of dp size); bucket_elems: target bucket size;
  // tied_wte: wte's gradient is completed by the trainer after the schedule (pipeline stages).
  DataParallelGrads(const Parameters& grads, MPI_Comm dp, int64_t bucket_elems, bool zero,
                    bool tied_wte = false);
  ~DataParallelGrads();
  DataParallelGrads(const DataParallelGrads&) = delete;
  DataParallelGrads& operator=(const DataParallelGrads&) = delete;

  // Starts the reduction of every bucket ready at or before `event` (overlap; events come in
  // increasing order), and lets MPI progress.
  void start_ready(int event);
  // Starts every bucket not yet started, then waits for all.
  void finish();

  bool zero() const { return zero_; }
  // ZeRO: the summed gradients of this rank's parts of the buckets, and the optimizer segments
  // that update exactly those parameters.
  const float* shard_grads() const { return shard_.data(); }
  int64_t shard_size() const { return int64_t(shard_.extent(0)); }
  std::vector<OptimizerSegment> zero_segments() const;
  // ZeRO: after the update, every rank gathers every bucket's parameters from their owners.
  void allgather_params(float* params);

  const std::vector<GradBucket>& buckets() const { return buckets_; }

 private:
  void start(size_t b);

  MPI_Comm dp_;
  int ranks_ = 1, rank_ = 0;
  bool zero_ = false;
  float* grads_ = nullptr;
  std::vector<int64_t> tensor_offsets_;  // kNumParameterTensors + 1 entries
  std::vector<GradBucket> buckets_;
  std::vector<MPI_Request> requests_;
  std::vector<bool> started_;
  Slab shard_;
};

}  // namespace mpf

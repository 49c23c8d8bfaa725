// Causal attention with each sequence spread over the context-parallel (CP) ranks: ring attention
// (Liu, Zaharia and Abbeel 2023) on the fused kernel (attention.hpp), with the load balance of
// Megatron-LM's and torchtitan's context parallelism.
//
// Layout. A sequence of T positions is cut into 2N chunks of T/(2N); CP rank i of N holds chunks i
// and 2N−1−i, so under the causal mask every rank has the same work (an early chunk sees little, a
// late one much). Its local rows are the two chunks one after the other (PositionRuns::two).
//
// Forward. Each rank's K and V (only the kv heads: with grouped-query attention KVH·hs columns
// each) go round the ring with MPI_Isend/MPI_Irecv: at step s a rank attends its queries over the
// block that started on rank r − s, merging the partial output by the logsumexps, while the next
// block is already in transit (posted before the step's compute, completed after it).
//
// Backward. The K/V blocks go round again, each with an accumulator of its dK and dV: a rank adds
// its queries' contribution to the visiting block's accumulator and passes both on; after N steps
// every accumulator is back on the rank that owns its block, holding the sum over all ranks in
// ring order (a fixed order: the same layout gives the same bits). dQ stays local.
//
// Messages go through host buffers when MPI cannot read the kernels' memory
// (parallel/device_mpi.hpp); on one rank this is the plain fused attention.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "core/types.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/attention_path.hpp"

namespace mpf {

class RingAttention {
 public:
  // cp: the CP ranks, in ring order; B sequences whose rows this rank holds T/N of (of T
  // positions each); NH query heads, KVH kv heads of size hs (this rank's, after TP); window: a
  // sliding window's positions (attention.hpp), 0 for none.
  RingAttention(MPI_Comm cp, int B, int T, int NH, int KVH, int hs, int window = 0,
                AttentionPath path = AttentionPath::kFused);

  // The rows CP rank `rank` of `ranks` holds of a sequence of T positions.
  static PositionRuns rows_of(int rank, int ranks, int T);
  const PositionRuns& rows() const { return rows_of_[size_t(rank_)]; }
  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  MPI_Comm comm() const { return cp_; }

  // out (B,Tl,NH·hs), lse (B,NH,Tl) from this rank's packed qkv (B,Tl,(NH + 2·KVH)·hs), Tl = T/N;
  // doc_start (B,Tl) or null as in attention.hpp.
  // row_max (B, NH, rows), when given: each row's largest logit over every block (attention.hpp).
  void forward(Tensor out, Tensor lse, Tensor qkv, const int32_t* doc_start,
               Tensor row_max = Tensor());
  // dqkv (B,Tl,(NH + 2·KVH)·hs) =; delta (B,NH,Tl) scratch; dout, qkv, out, lse as the forward
  // saw and left them.
  void backward_input(Tensor dqkv, Tensor delta, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                      const int32_t* doc_start);

  // The bytes of its message buffers; and what they would be for these shapes (T: the whole
  // sequence), staged through host copies or not.
  int64_t buffer_bytes() const;
  static int64_t bytes(int ranks, int B, int T, int KVH, int hs, bool staged);

 private:
  // The inputs of this rank's queries against the block that started on rank `owner`, held in
  // `kv` ((B,Tl) rows of [K | V]).
  AttentionInputs against(Tensor qkv, const float* kv, int owner, const int32_t* doc) const;

  // One message each way round the ring: `send` to the next rank, `recv` from the previous.
  struct Exchange {
    MPI_Request send = MPI_REQUEST_NULL, recv = MPI_REQUEST_NULL;
    float* recv_buf = nullptr;
    float* recv_host = nullptr;
  };
  void start(Exchange& x, const float* send, float* send_host, float* recv, float* recv_host,
             int tag);
  void finish(Exchange& x);

  MPI_Comm cp_;
  int rank_ = 0, ranks_ = 1;
  int B_, T_, Tl_, NH_, KVH_, hs_, window_;
  AttentionPath path_;
  int64_t count_;  // floats in one block: B·Tl·2·KVH·hs
  std::vector<PositionRuns> rows_of_;
  Slab kv_[2], dkv_[2];
  bool staged_ = false;
  // Host copies of the messages when staged: the blocks sent and received, each way.
  Kokkos::View<float*, PinnedSpace> host_[4];
};

}  // namespace mpf

// MPI on tensors in the kernels' memory (core/types.hpp), which in a GPU build is device memory.
//
// A CUDA-aware MPI reads and writes device memory itself ("direct"). Any other MPI must be handed
// host memory, so each message is staged: copied into page-locked host buffers, which are
// allocated once and reused, before the call, and back after it. Which of the two applies is a
// property of the MPI library the process runs with, decided once at start-up from
// --gpu-aware-mpi (decide_mpi_memory). A CPU build is direct (its tensors are host memory), unless
// a test forces staging: then the same copies run between host buffers, so the staged path is
// exercised without a GPU.
//
// Every call first waits for the kernels that wrote its input: MPI and the host read memory
// outside the execution space's stream order. A call on a 1-rank communicator returns at once.
// PipelineP2P and DataParallelGrads stage their nonblocking messages through buffers of their own
// (a staged message's host buffer must outlive its request); they ask staged() which to do.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/bf16_bits.hpp"

namespace mpf {

enum class MpiMemory { kDirect, kStaged };

struct MpiMemoryChoice {
  MpiMemory memory = MpiMemory::kDirect;
  std::string why;  // for the banner: "MPICH 4.0.2 reports no CUDA support: staged through ..."
};

// From --gpu-aware-mpi: "auto" asks the MPI library in a GPU build (MPIX_Query_cuda_support(),
// where it exists: MPICH and Open MPI), and takes staging when it says no or cannot be asked;
// "yes" hands MPI device memory; "no" stages every message (in a CPU build: to test that path).
// Throws InputError for any other value. After MPI_Init.
MpiMemoryChoice decide_mpi_memory(const std::string& flag);
// The process's choice, direct until set.
void set_mpi_memory(const MpiMemoryChoice& choice);
bool staged();
// The choice's `why`, for the banner ("" until set).
const std::string& describe_mpi_memory();

// Sums (op MPI_SUM) or takes the maximum (MPI_MAX) of x[0, n) over comm, in place.
void allreduce(float* x, int64_t n, MPI_Op op, MPI_Comm comm);
inline void allreduce_sum(float* x, int64_t n, MPI_Comm comm) {
  allreduce(x, n, MPI_SUM, comm);
}
// x (size · count): every rank's count elements, this rank's at rank · count on entry.
void allgather_in_place(float* x, int64_t count, MPI_Comm comm);
// recv (size · count) = every rank's send (count).
void allgather(const float* send, float* recv, int64_t count, MPI_Comm comm);
// x[0, count) = root's x[0, count), on every rank.
void broadcast(float* x, int64_t count, int root, MPI_Comm comm);
// recv (count) = the sum over ranks of their send[rank · count, (rank + 1) · count).
void reduce_scatter_block(const float* send, float* recv, int64_t count, MPI_Comm comm);

// The same collectives with a bf16 payload (--tp-comm-dtype bf16): the floats rounded to bf16 (to
// nearest, ties to even) into a wire buffer of the kernels' memory, half the bytes sent, and
// widened back on arrival. A sum adds each pair of bf16 in fp32 and rounds (bf16_sum(), NCCL's
// bf16 sum): MPI_SUM over bf16 would add in bf16. Every rank ends with the same values, its own
// rows of a gather rounded too. On a 1-rank communicator they are the fp32 calls (nothing moves,
// nothing is rounded). The sums run on the host (a user MPI_Op reads host memory): on a GPU
// through the host copies whatever --gpu-aware-mpi says, as the DP buckets' bf16 sums do.
void allreduce_sum_bf16(float* x, int64_t n, MPI_Comm comm);
void allgather_in_place_bf16(float* x, int64_t count, MPI_Comm comm);
void allgather_bf16(const float* send, float* recv, int64_t count, MPI_Comm comm);
void reduce_scatter_block_bf16(const float* send, float* recv, int64_t count, MPI_Comm comm);
// The MPI_Op over MPI_UINT16_T holding bf16 of the sums above and of the DP buckets under
// --grad-reduce-dtype bf16: inout = bf16(in + inout), each pair added in fp32 and rounded to
// nearest even.
MPI_Op bf16_sum();

// Every rank sends send_counts[r] floats to rank r, from consecutive stretches of `send`, and
// receives recv_counts[r] from rank r into consecutive stretches of `recv` (MPI_Alltoallv).
void alltoallv(const float* send, const int64_t* send_counts, float* recv,
               const int64_t* recv_counts, MPI_Comm comm);
// The same of bf16 values, counted in bf16 elements (half the bytes of the floats').
void alltoallv(const bf16* send, const int64_t* send_counts, bf16* recv, const int64_t* recv_counts,
               MPI_Comm comm);

// A nonblocking MPI_Ialltoallv in flight, with displacements: every rank sends send_counts[r]
// elements from send + send_displs[r] to rank r and receives recv_counts[r] into
// recv + recv_displs[r]. MPI progresses it inside MPI calls (test() is one); wait() finishes it.
// Neither buffer's stretches may be touched until then. Staged, it goes through host buffers of
// its own (held by the object and kept for its next start), which outlive the request.
class PendingAlltoallv {
 public:
  PendingAlltoallv() = default;
  PendingAlltoallv(const PendingAlltoallv&) = delete;
  PendingAlltoallv& operator=(const PendingAlltoallv&) = delete;
  PendingAlltoallv(PendingAlltoallv&&) = default;
  ~PendingAlltoallv();

  void start(const float* send, const int64_t* send_counts, const int64_t* send_displs, float* recv,
             const int64_t* recv_counts, const int64_t* recv_displs, MPI_Comm comm);
  void start(const bf16* send, const int64_t* send_counts, const int64_t* send_displs, bf16* recv,
             const int64_t* recv_counts, const int64_t* recv_displs, MPI_Comm comm);
  // Lets MPI move it on; true once it is done (then as wait()).
  bool test();
  void wait();
  bool active() const { return request_ != MPI_REQUEST_NULL || copy_in_; }

 private:
  template <class T>
  void start_of(const T* send, const int64_t* send_counts, const int64_t* send_displs, T* recv,
                const int64_t* recv_counts, const int64_t* recv_displs, MPI_Datatype type,
                MPI_Comm comm);
  void finish();

  MPI_Request request_ = MPI_REQUEST_NULL;
  std::vector<int> sc_, sd_, rc_, rd_;    // MPI reads them until the request completes
  std::vector<char> host_;                // staged: [send span | recv span]
  char* recv_ = nullptr;                  // staged: where the received stretches go on completion
  size_t recv_offset_ = 0, element_ = 0;  // staged: the received span's place in host_, in bytes
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool copy_in_ = false;
};

}  // namespace mpf

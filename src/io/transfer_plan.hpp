// What one rank moves in a collective transfer of a file's body (ParallelFile::read_runs and
// write_runs), and where: its runs of memory and file, the file view they make, and the rounds of
// collective calls through a staging buffer. Planning makes no MPI call; the ranks agree on the
// number of rounds before the first (parallel_file.cpp).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

namespace mpf {

// `length` floats of this rank's memory (in the Kokkos memory space: host or device) and floats
// [file, file + length) of the file's body. A run without memory writes zeros (and reads nothing):
// the padding between tensors, so the ranks' runs cover the file without holes, which spares
// MPI-IO a read-modify-write.
struct FileRun {
  float* memory = nullptr;
  int64_t file = 0;
  int64_t length = 0;
  int section = -1;  // the digest this run counts into; -1: transferred, not counted
};

struct TransferPlan {
  int64_t body = 0;             // the body's byte offset in the file: the view's displacement
  std::vector<FileRun> pieces;  // the runs in ascending file order, cut to int lengths
  // The file view (an hindexed type of floats): each piece's length and its byte offset in the
  // body.
  std::vector<int> view_lengths;
  std::vector<MPI_Aint> view_offsets;
  int64_t total = 0;    // floats this rank moves
  int64_t staging = 1;  // floats in each of the two staging buffers: a round's worth
  int64_t rounds = 0;   // this rank's rounds (every rank makes the most any rank needs)

  // Round r's collective call: count(r) floats (0 once this rank's pieces are done) at element
  // offset(r) of the view.
  MPI_Offset offset(int64_t round) const { return round * staging; }
  int count(int64_t round) const;
};

// `sections`: the digests the runs count into (FileRun::section). Staging buffers of 32 MiB, or
// of half the largest section's floats if smaller, so a transfer holds at most one tensor's worth
// beyond the training state.
TransferPlan plan_transfer(int64_t body, std::vector<FileRun> runs, size_t sections);

}  // namespace mpf

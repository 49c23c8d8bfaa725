// Collective MPI-IO of a flat file of floats whose pieces live on many ranks (the checkpoints,
// docs/design.md, "Checkpoints"). Every rank reads or writes its own pieces at their offsets in the
// file: no rank ever holds more than its part, and ROMIO's two-phase collective buffering turns
// the scattered pieces into large contiguous accesses (on Lustre and GPFS too).
//
// Failures are recorded, never thrown mid-way: a rank that gave up would leave the others waiting
// in the next collective. Every call is made on every rank; afterwards the caller agrees on the
// outcome (agree()) and reports it on every rank alike.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "io/transfer_plan.hpp"

namespace mpf {

// What a section of a file holds, summed over the ranks that count it: an order-independent
// checksum Σ mix(position in the body, bits) mod 2^64 (so each layout's ranks add up their parts
// with one all-reduce, and a changed element always changes the sum), and its non-finite values.
struct Digest {
  uint64_t checksum = 0;
  int64_t nonfinite = 0;
  int64_t first_nonfinite = -1;  // body position of the first non-finite value, -1 if none
};

// (offset, bytes) stretches of a file, ascending; adjacent ones merged by add_range.
using ByteRanges = std::vector<std::pair<int64_t, int64_t>>;
void add_range(ByteRanges& ranges, int64_t offset, int64_t bytes);

class ParallelFile {
 public:
  enum class Mode { kCreate, kRead };
  // Collective over comm. kCreate never replaces an existing file (MPI_MODE_EXCL).
  ParallelFile(MPI_Comm comm, std::string path, Mode mode);
  ~ParallelFile();  // closes if still open (collective)
  ParallelFile(const ParallelFile&) = delete;
  ParallelFile& operator=(const ParallelFile&) = delete;

  const std::string& path() const { return path_; }
  // The file's size in bytes (kRead), the same on every rank.
  int64_t size() const { return size_; }

  // The runs' memory is host memory whatever the build (an asynchronous save's staging copy,
  // train/run_saver.hpp): copied with memcpy, never through a device transfer.
  void set_host_memory() { host_memory_ = true; }

  // This rank alone writes raw bytes (a header).
  void write_at(int64_t offset, const void* data, int64_t bytes);

  // Collective: the runs of the body starting at byte `body`, each rank its own (those written
  // must not overlap between ranks). Runs counted in a section add to digests[section] as they
  // pass (in write: what is written; in read: what is read). Each follows plan_transfer's plan.
  void write_runs(int64_t body, std::vector<FileRun> runs, std::vector<Digest>& digests);
  void read_runs(int64_t body, std::vector<FileRun> runs, std::vector<Digest>& digests);

  // Collective: MPI_File_sync (kCreate) and close.
  void close();

  // Collective: "" if every rank succeeded so far, else the lowest failing rank's first error
  // (the same string on every rank).
  std::string agree();

  // For tests: this rank's staging (or, reading, unstaging) of round `round` of each transfer
  // throws, or of its last round if it has fewer: a copy that fails mid-way.
  void fail_staging_for_tests(int64_t round) { test_failure_round_ = round; }

 private:
  // The drivers: each moves its plan's pieces through two staging buffers, round by round.
  void write_plan(const TransferPlan& plan, std::vector<Digest>& digests);
  void read_plan(const TransferPlan& plan, std::vector<Digest>& digests);
  // Collective: the rounds every rank makes (the most any rank's plan needs), with the file view
  // set to this rank's pieces; 0 if there is nothing to move anywhere or the file is not open.
  int64_t begin_transfer(const TransferPlan& plan);
  // Streaming writes leave the page cache: the round just written starts its writeback and the
  // one before it, on disk by then, is dropped, so the kernel recycles the same pages instead of
  // filling memory with a dirty copy of the checkpoint (evicting the cached training data, and
  // leaving it all for the final sync). Advice only (Linux; ignored where unsupported).
  void write_behind(const ByteRanges& written, const ByteRanges& before);
  void fail(const std::string& what, int rc, bool writing = false);
  // This rank's own work between collective calls, which must not throw out of them: "" or what
  // it threw.
  static std::string own_work(const std::function<void()>& work);
  // The runs' plan; an empty one (and this rank's error) if planning threw.
  TransferPlan planned(int64_t body, std::vector<FileRun> runs, size_t sections);
  // Records a staging failure (`what` non-empty): this rank moves nothing more in the transfer.
  void staging_failed(const std::string& what);

  MPI_Comm comm_;
  std::string path_;
  Mode mode_;
  MPI_File fh_ = MPI_FILE_NULL;
  int posix_fd_ = -1;  // the same file, for write_behind
  int64_t size_ = 0;
  bool host_memory_ = false;
  bool staging_broken_ = false;
  int64_t test_failure_round_ = -1;  // fail_staging_for_tests's; -1: none
  std::string error_;
};

// Sums digests over comm (checksums mod 2^64, counts added, the first non-finite position kept).
void allreduce_digests(std::vector<Digest>& digests, MPI_Comm comm);

// The digest of `n` host floats at body positions [position, position + n), added to d.
void add_to_digest(Digest& d, const float* values, int64_t n, int64_t position);

}  // namespace mpf

#include "io/parallel_file.hpp"

#include <sys/stat.h>

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>

#include "core/error.hpp"
#include "core/transfer.hpp"
#include "core/types.hpp"
#include "parallel/agreement.hpp"
#include "parallel/grid.hpp"

namespace mpf {

namespace {

// MurmurHash3's 64-bit finaliser: a bijection, so for a fixed position two different values never
// give the same term.
inline uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, text, &n);
  std::string s(text, n);
  // ROMIO appends an "error stack" after the first line: keep the reason only.
  const size_t cut = s.find(", error stack");
  if (cut != std::string::npos) s = s.substr(0, cut);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// The staging copies run on a helper thread (parallel_file.hpp): in a CPU build a memcpy, which
// needs no Kokkos; in a GPU build a transfer of the kernels' memory.
void to_host(float* host, const float* memory, int64_t n) {
  if constexpr (!kDeviceMemory) {
    std::memcpy(host, memory, size_t(n) * sizeof(float));
  } else {
    copy_to_host(host, memory, size_t(n) * sizeof(float), "d2h checkpoint");
  }
}

void from_host(float* memory, const float* host, int64_t n) {
  if constexpr (!kDeviceMemory) {
    std::memcpy(memory, host, size_t(n) * sizeof(float));
  } else {
    copy_from_host(memory, host, size_t(n) * sizeof(float), "h2d checkpoint");
  }
}

// A plan's pieces through two staging buffers: a helper thread fills (write) or empties (read)
// one while this thread, the only one calling MPI, transfers the other, so copying and
// checksumming overlap the I/O. The pieces are walked in order, a round's worth at a time.
class Staging {
 public:
  explicit Staging(const TransferPlan& plan)
      : pieces_(plan.pieces),
        bufs_{std::unique_ptr<float[]>(new float[plan.staging]),
              std::unique_ptr<float[]>(new float[plan.staging])} {}
  float* buffer(int b) { return bufs_[b].get(); }
  // Calls f(piece, elements of it already passed, position in the buffer, length) for each
  // stretch of the next n elements that lies in one piece.
  template <class F>
  void next(int64_t n, F f) {
    for (int64_t at = 0; at < n;) {
      const FileRun& p = pieces_[piece_];
      const int64_t k = std::min(p.length - within_, n - at);
      f(p, within_, at, k);
      at += k;
      within_ += k;
      if (within_ == p.length) {
        ++piece_;
        within_ = 0;
      }
    }
  }

 private:
  const std::vector<FileRun>& pieces_;
  std::unique_ptr<float[]> bufs_[2];
  size_t piece_ = 0;    // the piece the cursor is in
  int64_t within_ = 0;  // elements of it already passed
};

}  // namespace

void add_range(ByteRanges& ranges, int64_t offset, int64_t bytes) {
  if (!ranges.empty() && ranges.back().first + ranges.back().second == offset) {
    ranges.back().second += bytes;
  } else {
    ranges.push_back({offset, bytes});
  }
}

void add_to_digest(Digest& d, const float* values, int64_t n, int64_t position) {
  // One term per element: for a fixed position, bits -> bits·K (K odd), xor, fmix64 are each
  // one-to-one, so a changed value always changes its term. Integer-only, so it vectorizes; the
  // non-finite test is on the exponent bits (all ones: Inf or NaN).
  constexpr uint64_t K = 0x9e3779b97f4a7c15ULL;
  uint64_t sum = 0;
  int64_t bad = 0;
#pragma omp parallel for simd reduction(+ : sum, bad) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, values + i, sizeof bits);
    sum += fmix64(uint64_t(position + i) ^ (uint64_t(bits) * K));
    bad += (bits & 0x7f800000u) == 0x7f800000u;
  }
  d.checksum += sum;
  if (bad == 0) return;
  d.nonfinite += bad;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) {
      if (d.first_nonfinite < 0 || position + i < d.first_nonfinite)
        d.first_nonfinite = position + i;
      break;
    }
  }
}

void allreduce_digests(std::vector<Digest>& digests, MPI_Comm comm) {
  const int n = int(digests.size());
  std::vector<uint64_t> sums(n);
  std::vector<int64_t> bad(n), first(n);
  for (int i = 0; i < n; ++i) {
    sums[i] = digests[i].checksum;
    bad[i] = digests[i].nonfinite;
    first[i] = digests[i].first_nonfinite < 0 ? INT64_MAX : digests[i].first_nonfinite;
  }
  // Unsigned addition wraps: the sum mod 2^64, in any order.
  MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums.data(), n, MPI_UINT64_T, MPI_SUM, comm));
  MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bad.data(), n, MPI_INT64_T, MPI_SUM, comm));
  MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, first.data(), n, MPI_INT64_T, MPI_MIN, comm));
  for (int i = 0; i < n; ++i) {
    digests[i] = {sums[i], bad[i], first[i] == INT64_MAX ? -1 : first[i]};
  }
}

ParallelFile::ParallelFile(MPI_Comm comm, std::string path, Mode mode)
    : comm_(comm), path_(std::move(path)), mode_(mode) {
  const int amode =
      mode == Mode::kCreate ? MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_WRONLY : MPI_MODE_RDONLY;
  // A file to read must be a regular one: MPI_File_open of a FIFO waits for a writer forever.
  // Every rank sees the same file, so every rank skips the open alike.
  struct stat st;
  const bool regular =
      mode == Mode::kCreate || stat(path_.c_str(), &st) != 0 || S_ISREG(st.st_mode);
  if (!regular) {
    error_ = path_ + ": not a regular file (a FIFO, a socket, a device or a directory)";
  } else if (const int rc = MPI_File_open(comm_, path_.c_str(), amode, MPI_INFO_NULL, &fh_);
             rc != MPI_SUCCESS) {
    fh_ = MPI_FILE_NULL;
    fail(mode == Mode::kCreate ? "cannot create" : "cannot open", rc);
  }
  // Open everywhere or nowhere: the collectives below must see the same handles on every rank.
  int opened = fh_ != MPI_FILE_NULL;
  MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &opened, 1, MPI_INT, MPI_MIN, comm_));
  if (!opened) {
    // A handle open on some ranks only cannot be closed (closing is collective): let it go.
    fh_ = MPI_FILE_NULL;
    if (error_.empty()) error_ = path_ + ": could not be opened on another rank";
    return;
  }
  // A plain descriptor of the file being written, for write-behind advice to the page cache.
  if (mode == Mode::kCreate) posix_fd_ = ::open(path_.c_str(), O_RDONLY);
  if (mode == Mode::kRead) {
    MPI_Offset bytes = 0;
    if (const int r = MPI_File_get_size(fh_, &bytes); r != MPI_SUCCESS) fail("cannot stat", r);
    size_ = bytes;
  }
}

ParallelFile::~ParallelFile() {
  if (posix_fd_ >= 0) ::close(posix_fd_);
  if (fh_ != MPI_FILE_NULL) MPI_File_close(&fh_);
}

void ParallelFile::fail(const std::string& what, int rc, bool writing) {
  if (!error_.empty()) return;
  error_ = path_ + ": " + what + " (" + mpi_error_text(rc);
  // MPI-IO often reports a full disk as a generic I/O error: say what the file system has left.
  struct statvfs fs;
  const size_t slash = path_.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path_.substr(0, slash);
  if (writing && statvfs(dir.c_str(), &fs) == 0) {
    const double free_mb = double(fs.f_bavail) * double(fs.f_frsize) / 1e6;
    char text[96];
    std::snprintf(text, sizeof text, "; %.1f MB free on its file system%s", free_mb,
                  free_mb < 1.0 ? ": No space left on device" : "");
    error_ += text;
  }
  error_ += ")";
}

void ParallelFile::write_at(int64_t offset, const void* data, int64_t bytes) {
  if (fh_ == MPI_FILE_NULL || bytes <= 0) return;
  const int rc = MPI_File_write_at(fh_, offset, data, int(bytes), MPI_BYTE, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) fail("write failed", rc, /*writing=*/true);
}

int64_t ParallelFile::begin_transfer(const TransferPlan& plan) {
  int64_t rounds = plan.rounds;
  MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &rounds, 1, MPI_INT64_T, MPI_MAX, comm_));
  // Nothing anywhere, or this file never opened (then every rank failed the open alike).
  if (rounds == 0 || fh_ == MPI_FILE_NULL) return 0;
  // A rank without pieces sees one float and transfers nothing.
  MPI_Datatype view = MPI_FLOAT;
  if (!plan.pieces.empty()) {
    MPF_MPI_CHECK(MPI_Type_create_hindexed(int(plan.pieces.size()), plan.view_lengths.data(),
                                           plan.view_offsets.data(), MPI_FLOAT, &view));
    MPF_MPI_CHECK(MPI_Type_commit(&view));
  }
  const int rc = MPI_File_set_view(fh_, plan.body, MPI_FLOAT, view, "native", MPI_INFO_NULL);
  if (rc != MPI_SUCCESS) fail("cannot set the file view", rc);
  if (view != MPI_FLOAT) MPI_Type_free(&view);
  return rounds;
}

TransferPlan ParallelFile::planned(int64_t body, std::vector<FileRun> runs, size_t sections) {
  TransferPlan plan;
  const std::string failed =
      own_work([&] { plan = plan_transfer(body, std::move(runs), sections); });
  if (!failed.empty()) {
    // Nothing to move from this rank, which still makes every collective call with the others.
    plan = TransferPlan{};
    plan.body = body;
    if (error_.empty()) error_ = path_ + ": " + failed;
  }
  return plan;
}

std::string ParallelFile::own_work(const std::function<void()>& work) {
  try {
    work();
  } catch (const std::exception& e) {
    return e.what()[0] ? e.what() : "an exception";
  } catch (...) {
    return "an unknown exception";
  }
  return "";
}

void ParallelFile::write_runs(int64_t body, std::vector<FileRun> runs,
                              std::vector<Digest>& digests) {
  write_plan(planned(body, std::move(runs), digests.size()), digests);
}

void ParallelFile::read_runs(int64_t body, std::vector<FileRun> runs,
                             std::vector<Digest>& digests) {
  read_plan(planned(body, std::move(runs), digests.size()), digests);
}

void ParallelFile::staging_failed(const std::string& what) {
  if (what.empty()) return;
  staging_broken_ = true;
  if (error_.empty()) error_ = path_ + ": staging failed (" + what + ")";
}

// A rank's own work between the collective calls (the staging buffers, the copies, the digests)
// may throw, on this thread or the helper: it becomes this rank's error, and the rank goes on
// making every round's collective call, moving nothing more, so no rank is left waiting in one
// and agree() reports the error on every rank (the checkpoint is then not published).
void ParallelFile::write_plan(const TransferPlan& plan, std::vector<Digest>& digests) {
  const int64_t rounds = begin_transfer(plan);
  if (rounds == 0) return;
  std::unique_ptr<Staging> staging;
  staging_broken_ = false;
  staging_failed(own_work([&] { staging = std::make_unique<Staging>(plan); }));
  ByteRanges ranges[2];  // the file bytes each buffer's round covers (write-behind)
  // Fills buffer b with round r's n elements (zeros for a run without memory), counting them
  // into their digests.
  auto stage = [&](int b, int64_t r, int64_t n) {
    return own_work([&] {
      if (test_failure_round_ >= 0 && r == std::min(test_failure_round_, plan.rounds - 1)) {
        throw std::runtime_error("a failure made for a test, staging round " + std::to_string(r));
      }
      staging->next(n, [&](const FileRun& p, int64_t within, int64_t at, int64_t k) {
        add_range(ranges[b], plan.body + int64_t(sizeof(float)) * (p.file + within),
                  int64_t(sizeof(float)) * k);
        float* host = staging->buffer(b) + at;
        if (p.memory && host_memory_) {
          std::memcpy(host, p.memory + within, size_t(k) * sizeof(float));
        } else if (p.memory) {
          to_host(host, p.memory + within, k);
        } else {
          std::fill(host, host + k, 0.0f);
        }
        if (p.section >= 0) add_to_digest(digests[p.section], host, k, p.file + within);
      });
    });
  };
  std::future<std::string> helper;
  if (!staging_broken_) staging_failed(stage(0, 0, plan.count(0)));
  for (int64_t round = 0; round < rounds; ++round) {
    const int b = int(round % 2);
    if (helper.valid()) staging_failed(helper.get());  // round's buffer is staged
    ByteRanges before = std::move(ranges[1 - b]);      // the previous round's, written
    ranges[1 - b].clear();
    if (round + 1 < rounds && !staging_broken_)
      helper = std::async(std::launch::async, stage, 1 - b, round + 1, plan.count(round + 1));
    // Once staging failed this rank writes nothing more, but still joins every round.
    const int n = staging_broken_ ? 0 : plan.count(round);
    MPI_Status status;
    const int rc = MPI_File_write_at_all(
        fh_, plan.offset(round), n > 0 ? staging->buffer(b) : nullptr, n, MPI_FLOAT, &status);
    if (rc != MPI_SUCCESS) fail("write failed", rc, /*writing=*/true);
    if (!staging_broken_) write_behind(ranges[b], before);
  }
  if (helper.valid()) staging_failed(helper.get());
}

void ParallelFile::read_plan(const TransferPlan& plan, std::vector<Digest>& digests) {
  const int64_t rounds = begin_transfer(plan);
  if (rounds == 0) return;
  std::unique_ptr<Staging> staging;
  staging_broken_ = false;
  staging_failed(own_work([&] { staging = std::make_unique<Staging>(plan); }));
  // Empties buffer b's n elements of round r into memory (a run without memory takes nothing),
  // counting them into their digests.
  auto unstage = [&](int b, int64_t r, int64_t n) {
    return own_work([&] {
      if (test_failure_round_ >= 0 && r == std::min(test_failure_round_, plan.rounds - 1)) {
        throw std::runtime_error("a failure made for a test, staging round " + std::to_string(r));
      }
      staging->next(n, [&](const FileRun& p, int64_t within, int64_t at, int64_t k) {
        const float* host = staging->buffer(b) + at;
        if (p.memory) from_host(p.memory + within, host, k);
        if (p.section >= 0) add_to_digest(digests[p.section], host, k, p.file + within);
      });
    });
  };
  std::future<std::string> helper;
  for (int64_t round = 0; round < rounds; ++round) {
    const int b = int(round % 2);
    // Once staging failed this rank reads nothing more, but still joins every round.
    const int n = staging_broken_ ? 0 : plan.count(round);
    MPI_Status status;
    const int rc = MPI_File_read_at_all(
        fh_, plan.offset(round), n > 0 ? staging->buffer(b) : nullptr, n, MPI_FLOAT, &status);
    int got = 0;
    MPI_Get_count(&status, MPI_FLOAT, &got);
    if (rc != MPI_SUCCESS) {
      fail("read failed", rc);
    } else if (got != n && error_.empty()) {
      error_ = path_ + ": short read (the file is truncated)";
    }
    if (helper.valid()) staging_failed(helper.get());  // the previous round is in memory
    if (!staging_broken_) helper = std::async(std::launch::async, unstage, b, round, int64_t(n));
  }
  if (helper.valid()) staging_failed(helper.get());
}

void ParallelFile::write_behind(const ByteRanges& written, const ByteRanges& before) {
#ifdef __linux__
  if (posix_fd_ < 0) return;
  for (const auto& [offset, bytes] : written) {
    sync_file_range(posix_fd_, offset, bytes, SYNC_FILE_RANGE_WRITE);
  }
  for (const auto& [offset, bytes] : before) {
    sync_file_range(
        posix_fd_, offset, bytes,
        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    posix_fadvise(posix_fd_, offset, bytes, POSIX_FADV_DONTNEED);
  }
#endif
}

void ParallelFile::close() {
  if (posix_fd_ >= 0) ::close(posix_fd_);
  posix_fd_ = -1;
  if (fh_ == MPI_FILE_NULL) return;
  if (mode_ == Mode::kCreate) {
    // The data reaches the disk before anyone renames the file into view.
    if (const int rc = MPI_File_sync(fh_); rc != MPI_SUCCESS) fail("sync failed", rc);
  }
  if (const int rc = MPI_File_close(&fh_); rc != MPI_SUCCESS) fail("close failed", rc);
  fh_ = MPI_FILE_NULL;
}

std::string ParallelFile::agree() {
  return first_error(comm_, error_);
}

}  // namespace mpf

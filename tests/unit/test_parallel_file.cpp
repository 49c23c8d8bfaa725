// ParallelFile under mpiexec (1, 2 and 4 ranks): pieces written by some ranks at their offsets
// read back whole under another decomposition, digests independent of who counted what, refusals
// agreed on every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "io/parallel_file.hpp"
#include "parallel/grid.hpp"
#include "test_helpers.hpp"

namespace mpf {
namespace {

using test::rank_of;
using test::size_of;
using ::testing::HasSubstr;

constexpr int64_t kBody = 64;  // a header of 64 bytes, then the floats
constexpr int64_t kN = 1000;   // floats in the body, two sections of 500

float value(int64_t i) {
  return 0.001f * float(i) - 0.3f;
}

class ParallelFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory for all ranks: rank 0 makes it.
    std::string dir;
    if (rank_of(world_) == 0) {
      char tmpl[] = "/tmp/mpf_pfile_XXXXXX";
      ASSERT_NE(mkdtemp(tmpl), nullptr);
      dir = tmpl;
    }
    dir_ = broadcast(dir, 0, world_);
  }
  void TearDown() override {
    MPI_Barrier(world_);
    if (rank_of(world_) == 0) std::filesystem::remove_all(dir_);
  }
  // The runs of this rank's host buffer `mine` (all kN elements, only some transferred): the
  // 7-element blocks whose index mod size is this rank; sections by half.
  std::vector<FileRun> strided(std::vector<float>& mine) const {
    std::vector<FileRun> runs;
    for (int64_t b = 0; b * 7 < kN; ++b) {
      if (b % size_of(world_) != rank_of(world_)) continue;
      const int64_t lo = b * 7, hi = std::min(kN, lo + 7);
      // Split at the section boundary so a run counts into one section.
      const int64_t mid = (lo < kN / 2 && hi > kN / 2) ? kN / 2 : hi;
      runs.push_back({mine.data() + lo, lo, mid - lo, int(lo / (kN / 2))});
      if (mid < hi) runs.push_back({mine.data() + mid, mid, hi - mid, 1});
    }
    return runs;
  }
  std::string write_file(const std::string& name, std::vector<float>& data,
                         std::vector<Digest>& digests) const {
    ParallelFile f(world_, dir_ + "/" + name, ParallelFile::Mode::kCreate);
    if (rank_of(world_) == 0) {
      const std::string header(kBody, 'h');
      f.write_at(0, header.data(), kBody);
    }
    digests.assign(2, Digest{});
    f.write_runs(kBody, strided(data), digests);
    f.close();
    allreduce_digests(digests, world_);
    return f.agree();
  }

  MPI_Comm world_ = MPI_COMM_WORLD;
  std::string dir_;
};

TEST_F(ParallelFileTest, WrittenInPiecesReadInAnotherSplit) {
  std::vector<float> data(kN);
  for (int64_t i = 0; i < kN; ++i) data[i] = value(i);
  std::vector<Digest> written;
  ASSERT_EQ(write_file("a.bin", data, written), "");

  // The serial digest of each half, on one rank, no MPI.
  std::vector<Digest> serial(2);
  add_to_digest(serial[0], data.data(), kN / 2, 0);
  add_to_digest(serial[1], data.data() + kN / 2, kN / 2, kN / 2);
  EXPECT_EQ(written[0].checksum, serial[0].checksum);
  EXPECT_EQ(written[1].checksum, serial[1].checksum);
  EXPECT_NE(serial[0].checksum, serial[1].checksum);

  // Read back as contiguous blocks, one per rank, every rank also reading all of section 0
  // uncounted (overlapping reads are fine).
  const int r = rank_of(world_), n = size_of(world_);
  std::vector<float> back(kN, 0.0f);
  const int64_t lo = kN * r / n, hi = kN * (r + 1) / n;
  std::vector<FileRun> runs;
  for (int64_t a = lo; a < hi;) {
    const int64_t b = a < kN / 2 ? std::min(hi, kN / 2) : hi;
    runs.push_back({back.data() + a, a, b - a, int(a / (kN / 2))});
    a = b;
  }
  std::vector<float> first_half(kN / 2, 0.0f);
  runs.push_back({first_half.data(), 0, kN / 2, -1});
  ParallelFile f(world_, dir_ + "/a.bin", ParallelFile::Mode::kRead);
  EXPECT_EQ(f.size(), kBody + int64_t(sizeof(float)) * kN);
  std::vector<Digest> read(2);
  f.read_runs(kBody, runs, read);
  f.close();
  ASSERT_EQ(f.agree(), "");
  allreduce_digests(read, world_);
  for (int64_t i = lo; i < hi; ++i) ASSERT_EQ(back[i], value(i)) << i;
  for (int64_t i = 0; i < kN / 2; ++i) ASSERT_EQ(first_half[i], value(i)) << i;
  EXPECT_EQ(read[0].checksum, serial[0].checksum);
  EXPECT_EQ(read[1].checksum, serial[1].checksum);
  // The header is where rank 0 put it.
  std::ifstream in(dir_ + "/a.bin", std::ios::binary);
  std::string header(kBody, ' ');
  in.read(header.data(), kBody);
  EXPECT_EQ(header, std::string(kBody, 'h'));
}

TEST_F(ParallelFileTest, DigestSeesEveryChangeAndNonFiniteValues) {
  std::vector<float> data(kN);
  for (int64_t i = 0; i < kN; ++i) data[i] = value(i);
  Digest a, b, swapped;
  add_to_digest(a, data.data(), kN, 0);
  data[123] = std::nextafter(data[123], 1.0f);  // one ulp
  add_to_digest(b, data.data(), kN, 0);
  EXPECT_NE(a.checksum, b.checksum);
  data[123] = value(123);
  std::swap(data[5], data[6]);  // the same values in other places
  add_to_digest(swapped, data.data(), kN, 0);
  EXPECT_NE(a.checksum, swapped.checksum);
  std::swap(data[5], data[6]);

  data[321] = std::numeric_limits<float>::quiet_NaN();
  data[700] = std::numeric_limits<float>::infinity();
  std::vector<Digest> digests;
  ASSERT_EQ(write_file("nan.bin", data, digests), "");
  EXPECT_EQ(digests[0].nonfinite, 1);
  EXPECT_EQ(digests[0].first_nonfinite, 321);
  EXPECT_EQ(digests[1].nonfinite, 1);
  EXPECT_EQ(digests[1].first_nonfinite, 700);
}

TEST_F(ParallelFileTest, CreateNeverReplacesAFile) {
  if (rank_of(world_) == 0) std::ofstream(dir_ + "/exists.bin") << "user data";
  MPI_Barrier(world_);
  std::vector<float> data(kN, 1.0f);
  std::vector<Digest> digests;
  const std::string error = write_file("exists.bin", data, digests);
  EXPECT_THAT(error, HasSubstr("exists.bin: cannot create"));
  std::ifstream in(dir_ + "/exists.bin");
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "user data");
}

TEST_F(ParallelFileTest, ShortFileIsAnErrorOnEveryRank) {
  if (rank_of(world_) == 0) {
    std::ofstream out(dir_ + "/short.bin", std::ios::binary);
    const std::vector<float> some(100, 2.0f);
    out.write(std::string(kBody, 'h').data(), kBody);
    out.write(reinterpret_cast<const char*>(some.data()), sizeof(float) * some.size());
  }
  MPI_Barrier(world_);
  std::vector<float> back(kN);
  std::vector<FileRun> runs;
  // Only the last rank asks for what is missing; every rank hears of it.
  if (rank_of(world_) == size_of(world_) - 1) runs.push_back({back.data(), 0, kN, 0});
  ParallelFile f(world_, dir_ + "/short.bin", ParallelFile::Mode::kRead);
  std::vector<Digest> d(1);
  f.read_runs(kBody, runs, d);
  f.close();
  EXPECT_THAT(f.agree(), HasSubstr("truncated"));
}

// A rank whose own copy throws in the middle of a collective transfer (on the helper thread, or
// on this one for a rank of one round) still makes every round's call with the others: nobody is
// left waiting, and every rank hears the error (a checkpoint is then not published).
TEST_F(ParallelFileTest, StagingThatThrowsMidTransferIsAnErrorOnEveryRank) {
  const bool last = rank_of(world_) == size_of(world_) - 1;
  std::vector<float> data(kN);
  for (int64_t i = 0; i < kN; ++i) data[i] = value(i);
  {
    ParallelFile f(world_, dir_ + "/broken.bin", ParallelFile::Mode::kCreate);
    if (last) f.fail_staging_for_tests(1);
    std::vector<Digest> d(2);
    f.write_runs(kBody, strided(data), d);
    f.close();
    EXPECT_THAT(f.agree(), HasSubstr("broken.bin: staging failed (a failure made for a test"));
  }
  std::vector<Digest> written;
  ASSERT_EQ(write_file("whole.bin", data, written), "");
  std::vector<float> back(kN, 0.0f);
  ParallelFile f(world_, dir_ + "/whole.bin", ParallelFile::Mode::kRead);
  if (last) f.fail_staging_for_tests(1);
  std::vector<Digest> d(2);
  f.read_runs(kBody, strided(back), d);
  f.close();
  EXPECT_THAT(f.agree(), HasSubstr("whole.bin: staging failed (a failure made for a test"));
}

TEST_F(ParallelFileTest, MissingFileIsAnErrorOnEveryRank) {
  ParallelFile f(world_, dir_ + "/none.bin", ParallelFile::Mode::kRead);
  std::vector<Digest> d(1);
  std::vector<float> back(10);
  f.read_runs(kBody, {{back.data(), 0, 10, 0}}, d);
  f.close();
  EXPECT_THAT(f.agree(), HasSubstr("none.bin: cannot open"));
}

}  // namespace
}  // namespace mpf

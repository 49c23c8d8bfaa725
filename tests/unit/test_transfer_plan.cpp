// plan_transfer, what a rank moves in a collective read or write of a checkpoint's body: its runs
// in file order (cut where an MPI count would overflow), the view they make, and the rounds of
// staged collective calls.
#include <gtest/gtest.h>

#include <vector>

#include "io/transfer_plan.hpp"

namespace mpf {
namespace {

TEST(TransferPlan, PiecesAscendInTheFileWithTheirView) {
  std::vector<float> a(10), b(5);
  const TransferPlan plan =
      plan_transfer(64, {{a.data(), 100, 10, 0}, {b.data(), 20, 5, -1}, {nullptr, 25, 75, -1}}, 1);
  ASSERT_EQ(plan.pieces.size(), 3u);
  EXPECT_EQ(plan.body, 64);
  EXPECT_EQ(plan.pieces[0].memory, b.data());
  EXPECT_EQ(plan.pieces[1].memory, nullptr);
  EXPECT_EQ(plan.pieces[2].memory, a.data());
  EXPECT_EQ(plan.view_lengths, (std::vector<int>{5, 75, 10}));
  EXPECT_EQ(plan.view_offsets, (std::vector<MPI_Aint>{80, 100, 400}));
  EXPECT_EQ(plan.total, 90);
}

TEST(TransferPlan, RunsLongerThanAnIntAreCut) {
  const int64_t block = int64_t(1) << 30, n = 2 * block + 3;
  const TransferPlan plan = plan_transfer(0, {{nullptr, 7, n, -1}}, 0);
  ASSERT_EQ(plan.pieces.size(), 3u);
  EXPECT_EQ(plan.view_lengths, (std::vector<int>{int(block), int(block), 3}));
  EXPECT_EQ(plan.pieces[1].file, 7 + block);
  EXPECT_EQ(plan.pieces[2].file, 7 + 2 * block);
  EXPECT_EQ(plan.total, n);
}

TEST(TransferPlan, RoundsStageHalfTheLargestSection) {
  // Sections of 40 and 100 floats and 30 uncounted: staging holds 50, so 170 floats take four
  // rounds, the last of 20; later rounds (another rank needs more) move nothing.
  const TransferPlan plan =
      plan_transfer(0, {{nullptr, 0, 40, 0}, {nullptr, 40, 100, 1}, {nullptr, 140, 30, -1}}, 2);
  EXPECT_EQ(plan.staging, 50);
  EXPECT_EQ(plan.rounds, 4);
  EXPECT_EQ(plan.count(0), 50);
  EXPECT_EQ(plan.offset(3), 150);
  EXPECT_EQ(plan.count(3), 20);
  EXPECT_EQ(plan.count(4), 0);
  // A rank with nothing to move still has a staging buffer of one float and no rounds.
  const TransferPlan none = plan_transfer(0, {}, 2);
  EXPECT_EQ(none.staging, 1);
  EXPECT_EQ(none.rounds, 0);
  EXPECT_EQ(none.count(0), 0);
}

TEST(TransferPlan, StagingIsAtMost32MiB) {
  const TransferPlan plan = plan_transfer(0, {{nullptr, 0, int64_t(1) << 26, 0}}, 1);
  EXPECT_EQ(plan.staging, int64_t(1) << 23);
  EXPECT_EQ(plan.rounds, 8);
}

}  // namespace
}  // namespace mpf

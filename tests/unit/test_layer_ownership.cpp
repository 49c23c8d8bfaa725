#include <gtest/gtest.h>

#include "pipeline/layer_ownership.hpp"
#include "test_helpers.hpp"

namespace mpf {

using test::input_error;

TEST(LayerOwnership, EvenSplitWithTheRemainderFirst) {
  for (int L = 1; L <= 13; ++L) {
    for (int n = 1; n <= L; ++n) {
      const auto r = distribute_layers(L, n);
      ASSERT_EQ(int(r.size()), n);
      EXPECT_EQ(r.front().begin, 0);
      EXPECT_EQ(r.back().end, L);
      for (int c = 0; c < n; ++c) {
        EXPECT_EQ(r[c].size(), L / n + (c < L % n ? 1 : 0)) << L << " over " << n;
        if (c > 0) EXPECT_EQ(r[c].begin, r[c - 1].end);  // contiguous, in order
      }
    }
  }
}

TEST(LayerOwnership, NoEmptyChunk) {
  EXPECT_NE(input_error([] { distribute_layers(3, 4); }).find("3 layers cannot fill 4"),
            std::string::npos);
}

TEST(LayerOwnership, ExplicitLayout) {
  const auto r = parse_layer_layout("3,3,2", 8, 3);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[1].begin, 3);
  EXPECT_EQ(r[2].end, 8);
  EXPECT_NE(input_error([] { parse_layer_layout("3,3", 8, 3); }).find("2 entries for 3"),
            std::string::npos);
  EXPECT_NE(input_error([] { parse_layer_layout("4,3,2", 8, 3); }).find("sums to 9"),
            std::string::npos);
  EXPECT_NE(input_error([] { parse_layer_layout("4,0,4", 8, 3); }).find("'0'"), std::string::npos);
  EXPECT_NE(input_error([] { parse_layer_layout("4,x,4", 8, 3); }).find("'x'"), std::string::npos);
}

TEST(LayerOwnership, InterleavedVirtualStages) {
  // P = 4 ranks, V = 2 chunks: rank 1 runs virtual stages 1 and 5.
  EXPECT_EQ(virtual_stage(0, 1, 4), 1);
  EXPECT_EQ(virtual_stage(1, 1, 4), 5);
}

}  // namespace mpf

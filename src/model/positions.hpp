// Where the local rows of a sequence sit in the whole sequence: at most two runs of consecutive
// positions. One run for a whole sequence; context parallelism's two chunks (chunk i and 2N−1−i
// of 2N, model/layers/ring_attention.hpp) for a rank's share of one. The attention's masks, the
// rotary tables and GPT-2's position table read positions through it.
#pragma once

#include <Kokkos_Core.hpp>

namespace mpf {

struct PositionRuns {
  struct Run {
    int row = 0;  // the run's first local row
    int pos = 0;  // its position in the sequence
    int len = 0;  // rows in the run
  };
  int rows = 0;  // local rows per sequence: the runs' lengths summed
  int count = 0;
  Run run[2];

  // `rows` consecutive positions from `first`.
  static PositionRuns contiguous(int rows, int first = 0) {
    PositionRuns r;
    r.rows = rows;
    r.count = 1;
    r.run[0] = {0, first, rows};
    return r;
  }
  // Two runs of `len` rows each, at positions first_pos and second_pos.
  static PositionRuns two(int len, int first_pos, int second_pos) {
    PositionRuns r;
    r.rows = 2 * len;
    r.count = 2;
    r.run[0] = {0, first_pos, len};
    r.run[1] = {len, second_pos, len};
    return r;
  }
  // The position of local row t (0 <= t < rows).
  KOKKOS_INLINE_FUNCTION int position(int t) const {
    return count > 1 && t >= run[1].row ? run[1].pos + (t - run[1].row) : run[0].pos + t;
  }
  // Whether the rows are positions 0..rows-1 in order.
  bool whole() const { return count == 1 && run[0].pos == 0; }
};

}  // namespace mpf

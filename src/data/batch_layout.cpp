#include "data/batch_layout.hpp"

namespace mpf {

void take_positions(const int32_t* full, int rows, int T, const PositionRuns& mine, int32_t* out) {
  for (int r = 0; r < rows; ++r) {
    const int32_t* src = full + int64_t(r) * T;
    int32_t* dst = out + int64_t(r) * mine.rows;
    for (int t = 0; t < mine.rows; ++t) dst[t] = src[mine.position(t)];
  }
}

void document_starts(const int32_t* tokens, int rows, int T, int32_t doc_token, int32_t* starts,
                     bool after) {
  for (int r = 0; r < rows; ++r) {
    int32_t start = 0;
    for (int t = 0; t < T; ++t) {
      if (!after && tokens[int64_t(r) * T + t] == doc_token) start = t;
      if (after && t > 0 && tokens[int64_t(r) * T + t - 1] == doc_token) start = t;
      starts[int64_t(r) * T + t] = start;
    }
  }
}

}  // namespace mpf

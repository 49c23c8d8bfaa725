// A rank's share of a step's batch in the kernels' memory: its inputs, then its targets (then,
// with --doc-mask, where each position's document starts), filled on the host and copied in one
// transfer; each microbatch's are views into it (microbatch m is rows [m·b, (m+1)·b) of the rank's
// rows). With context parallelism a rank holds its positions of each row (model/positions.hpp),
// so whole rows are assembled on the host first.
#pragma once

#include <vector>

#include "core/types.hpp"
#include "data/loader.hpp"
#include "model/positions.hpp"

namespace mpf {

class BatchBuffers {
 public:
  BatchBuffers() = default;
  // rows: the DP rank's rows; seq_len: a whole row's positions; mine: this rank's positions of
  // each row; microbatches: M, dividing rows; doc_token >= 0: --doc-mask's document token, which
  // ends each document when doc_token_after (an end-of-sequence token), else starts it.
  BatchBuffers(int rows, int seq_len, const PositionRuns& mine, int microbatches, int doc_token,
               bool doc_token_after = false);

  // The DP rank's rows [row_begin, row_begin + rows) of the loader's next batch.
  void load(DataLoader& loader, int row_begin);
  // The DP rank's rows given whole (rows x seq_len inputs and targets), without document starts.
  void place(const int32_t* inputs, const int32_t* targets);

  const std::vector<Tokens>& inputs() const { return inputs_; }
  const std::vector<Tokens>& targets() const { return targets_; }
  // Per microbatch with --doc-mask, else null.
  const std::vector<Tokens>* doc_starts() const {
    return doc_starts_.empty() ? nullptr : &doc_starts_;
  }
  int microbatches() const { return int(inputs_.size()); }

 private:
  // From whole rows on the host (in, tg, and docs unless null) to this rank's positions, then to
  // the kernels' memory.
  void send(const int32_t* in, const int32_t* tg, bool docs);

  int rows_ = 0, seq_len_ = 0, doc_token_ = -1;
  bool doc_token_after_ = false;
  PositionRuns mine_;
  Tokens batch_;
  HostTokens host_;        // the same, where the loader fills it
  HostTokens whole_rows_;  // with CP or --doc-mask: the DP rank's whole rows
  std::vector<Tokens> inputs_, targets_, doc_starts_;
};

}  // namespace mpf

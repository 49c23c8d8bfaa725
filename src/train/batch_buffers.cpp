#include "train/batch_buffers.hpp"

#include <algorithm>

#include "core/transfer.hpp"
#include "data/batch_layout.hpp"

namespace mpf {

BatchBuffers::BatchBuffers(int rows, int seq_len, const PositionRuns& mine, int microbatches,
                           int doc_token, bool doc_token_after)
    : rows_(rows),
      seq_len_(seq_len),
      doc_token_(doc_token),
      doc_token_after_(doc_token_after),
      mine_(mine) {
  const int M = microbatches;
  const int64_t tokens = int64_t(rows) * mine.rows, mb_tokens = tokens / M;
  const int parts = doc_token >= 0 ? 3 : 2;
  batch_ = Tokens("mpf::batch", parts * tokens);
  host_ = HostTokens("mpf::host_batch", parts * tokens);
  if (!mine.whole() || mine.rows != seq_len || doc_token >= 0) {
    whole_rows_ = HostTokens("mpf::whole_rows", 3 * int64_t(rows) * seq_len);
  }
  auto part = [&](int p, int mb) {
    return Kokkos::subview(
        batch_, std::make_pair(p * tokens + mb * mb_tokens, p * tokens + (mb + 1) * mb_tokens));
  };
  for (int mb = 0; mb < M; ++mb) {
    inputs_.push_back(part(0, mb));
    targets_.push_back(part(1, mb));
    if (parts == 3) doc_starts_.push_back(part(2, mb));
  }
}

void BatchBuffers::load(DataLoader& loader, int row_begin) {
  const int64_t tokens = int64_t(rows_) * mine_.rows;
  if (whole_rows_.extent(0) == 0) {
    int32_t* host = host_.data();
    loader.next_batch(row_begin, rows_, host, host + tokens);
    send(nullptr, nullptr, false);
    return;
  }
  const int64_t whole = int64_t(rows_) * seq_len_;
  int32_t *in = whole_rows_.data(), *tg = in + whole, *docs = tg + whole;
  loader.next_batch(row_begin, rows_, in, tg);
  if (doc_token_ >= 0) document_starts(in, rows_, seq_len_, doc_token_, docs, doc_token_after_);
  send(in, tg, doc_token_ >= 0);
}

void BatchBuffers::place(const int32_t* inputs, const int32_t* targets) {
  if (doc_token_ >= 0) {
    // Each row one document: every position's document starts at 0.
    int32_t* docs = whole_rows_.data() + 2 * int64_t(rows_) * seq_len_;
    std::fill(docs, docs + int64_t(rows_) * seq_len_, 0);
  }
  send(inputs, targets, doc_token_ >= 0);
}

void BatchBuffers::send(const int32_t* in, const int32_t* tg, bool docs) {
  const int64_t tokens = int64_t(rows_) * mine_.rows;
  const int parts = doc_token_ >= 0 ? 3 : 2;
  int32_t* host = host_.data();
  if (in) {
    take_positions(in, rows_, seq_len_, mine_, host);
    take_positions(tg, rows_, seq_len_, mine_, host + tokens);
    if (docs) {
      const int32_t* starts = whole_rows_.data() + 2 * int64_t(rows_) * seq_len_;
      take_positions(starts, rows_, seq_len_, mine_, host + 2 * tokens);
    }
  }
  copy_from_host(batch_.data(), host, size_t(parts * tokens) * sizeof(int32_t), "h2d batch");
}

}  // namespace mpf

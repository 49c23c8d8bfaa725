#include "data/shard_writer.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "core/error.hpp"
#include "data/token_stream.hpp"
#include "io/input_file.hpp"
#include "io/llmc_format.hpp"
#include "io/output_file.hpp"
#include "io/sha256.hpp"
#include "parallel/agreement.hpp"

namespace mpf {
namespace {}  // namespace

std::string ShardWriter::file_name(const ShardLayout& layout, bool val, int index) {
  char number[16];
  std::snprintf(number, sizeof number, "%06d", index);
  return layout.name + (val ? "_val_" : "_train_") + number + ".bin";
}

ShardWriter::ShardWriter(MPI_Comm comm, ShardLayout layout)
    : comm_(comm), layout_(std::move(layout)) {
  MPI_Comm_rank(comm_, &rank_);
  if (!layout_.validation) {
    val_end_ = 0;
    return;
  }
  const std::string path = layout_.dir + "/" + file_name(layout_, true, 0) + ".partial";
  auto f = std::make_unique<ParallelFile>(comm_, path, ParallelFile::Mode::kCreate);
  const std::string error = f->agree();
  if (error.empty()) {
    partials_.push_back(path);
    open_[0] = std::move(f);
  }
  check(error);
}

ShardWriter::~ShardWriter() {
  if (published_) return;
  for (auto& [index, f] : open_) f->close();
  open_.clear();
  if (rank_ == 0) {
    for (const auto& p : partials_) std::remove(p.c_str());
  }
}

void ShardWriter::check(const std::string& agreed) const {
  if (!agreed.empty())
    throw InputError(agreed + "; check the output directory's space and permissions");
}

void ShardWriter::set_validation_end(int64_t v) {
  require(v <= INT32_MAX, "the validation split holds " + std::to_string(v) +
                              " tokens, more than one shard can (2^31 - 1); pass a smaller "
                              "--val-tokens");
  val_end_ = v;
}

void ShardWriter::open_train(int64_t k) {
  const int index = train_index(k);
  const std::string path = layout_.dir + "/" + file_name(layout_, false, index) + ".partial";
  auto f = std::make_unique<ParallelFile>(comm_, path, ParallelFile::Mode::kCreate);
  const std::string error = f->agree();
  check(error);
  partials_.push_back(path);
  open_[index] = std::move(f);
}

// A piece at a time (a write well inside an int count of bytes), through one buffer of a piece.
void ShardWriter::put(ParallelFile& f, int64_t offset, const TokenReader& read, int64_t from,
                      int64_t n) {
  const int w = layout_.width;
  std::vector<int32_t> piece(size_t(std::min(n, kPieceTokens)));
  std::vector<uint16_t> narrow(w == 2 ? piece.size() : 0);
  for (int64_t done = 0; done < n;) {
    const int64_t count = std::min(n - done, kPieceTokens);
    read(from + done, count, piece.data());
    const int64_t at = llmc::kHeaderBytes + (offset + done) * w;
    if (w == 2) {
      std::copy(piece.begin(), piece.begin() + count, narrow.begin());
      f.write_at(at, narrow.data(), count * w);
    } else {
      f.write_at(at, piece.data(), count * w);  // int32 ids below 2^31: the uint32 bytes
    }
    done += count;
  }
}

void ShardWriter::close(int index, int64_t tokens) {
  ParallelFile& f = *open_.at(index);
  const bool val = layout_.validation && index == 0;
  if (rank_ == 0) {
    const std::vector<int32_t> header = shard_header(tokens, layout_.width);
    f.write_at(0, header.data(), llmc::kHeaderBytes);
  }
  f.close();
  const std::string error = f.agree();
  open_.erase(index);
  check(error);
  closed_.push_back({file_name(layout_, val, index), val ? "val" : "train", tokens, ""});
}

void ShardWriter::write(int64_t round_begin, int64_t round_end, int64_t begin,
                        const std::vector<int32_t>& tokens) {
  write(round_begin, round_end, begin, int64_t(tokens.size()),
        [&](int64_t from, int64_t n, int32_t* out) {
          std::copy(tokens.begin() + from, tokens.begin() + from + n, out);
        });
}

void ShardWriter::write(int64_t round_begin, int64_t round_end, int64_t begin, int64_t count,
                        const TokenReader& read) {
  const int64_t S = layout_.shard_tokens;
  const int64_t end = begin + count;
  if (!validation_end_known()) {
    // Everything so far is validation data, one shard of at most 2^31 - 1 tokens.
    require(round_end <= INT32_MAX,
            "the validation split passes 2^31 - 1 tokens (one shard's most); pass a smaller "
            "--val-tokens");
    if (end > begin) put(*open_.at(0), begin, read, 0, end - begin);
  } else {
    const int64_t V = val_end_;
    // The training shards this round reaches, opened in order on every rank.
    if (round_end > V) {
      const int64_t last = (round_end - 1 - V) / S;
      while (train_opened_ <= last) open_train(train_opened_++);
    }
    if (begin < V) put(*open_.at(0), begin, read, 0, std::min(end, V) - begin);
    for (int64_t g = std::max(begin, V); g < end;) {
      const int64_t k = (g - V) / S;
      const int64_t stop = std::min(end, V + (k + 1) * S);
      put(*open_.at(train_index(k)), g - V - k * S, read, g - begin, stop - g);
      g = stop;
    }
  }
  // Every rank's writes so far succeeded (a failure is the same error on every rank).
  std::string error;
  for (auto& [index, f] : open_) {
    const std::string e = f->agree();
    if (error.empty()) error = e;
  }
  check(error);
  // Shards complete by now: the validation shard once its end is known and passed, training
  // shards whose last token is below round_end.
  if (validation_end_known() && layout_.validation && open_.count(0) && val_end_ <= round_end) {
    close(0, val_end_);
  }
  for (int64_t k = 0; k < train_opened_; ++k) {
    const int index = train_index(k);
    if (open_.count(index) && val_end_ + (k + 1) * S <= round_end) close(index, S);
  }
}

std::vector<ShardInfo> ShardWriter::finish(int64_t total) {
  if (!validation_end_known()) set_validation_end(total);
  if (layout_.validation && open_.count(0)) close(0, val_end_);
  for (int64_t k = 0; k < train_opened_; ++k) {
    const int index = train_index(k);
    if (open_.count(index)) close(index, total - val_end_ - k * layout_.shard_tokens);
  }
  // In index order, as partials_ (the validation shard first).
  std::sort(closed_.begin(), closed_.end(), [](const ShardInfo& a, const ShardInfo& b) {
    return std::make_pair(a.split != "val", a.file) < std::make_pair(b.split != "val", b.file);
  });
  // Hashing reads every shard back: the ranks take them in turn.
  int size = 1;
  MPI_Comm_size(comm_, &size);
  const int n = int(closed_.size());
  std::vector<char> digests(size_t(n) * 64, 0);
  std::string error;
  for (int i = rank_; i < n; i += size) {
    try {
      const std::string hex = sha256_of_file(partials_[size_t(i)], "shard " + partials_[size_t(i)]);
      std::copy(hex.begin(), hex.end(), digests.begin() + int64_t(i) * 64);
    } catch (const InputError& e) {
      if (error.empty()) error = e.what();
    }
  }
  check(first_error(comm_, error));
  MPF_MPI_CHECK(
      MPI_Allreduce(MPI_IN_PLACE, digests.data(), int(digests.size()), MPI_BYTE, MPI_BOR, comm_));
  for (int i = 0; i < n; ++i) closed_[size_t(i)].sha256.assign(&digests[size_t(i) * 64], 64);
  return closed_;
}

void ShardWriter::publish(const std::function<std::string()>& seal) {
  // Into place, never over a file that appeared meanwhile; on failure this run's shards go.
  std::string error;
  if (rank_ == 0) {
    const int n = int(closed_.size());
    int moved = 0;
    for (; moved < n; ++moved) {
      const std::string to = layout_.dir + "/" + closed_[size_t(moved)].file;
      if (rename_no_replace(partials_[size_t(moved)], to) != 0) {
        error = "shard " + to + ": cannot move into place (" + errno_text() + ")";
        break;
      }
    }
    if (error.empty()) error = seal();
    if (!error.empty()) {
      for (int j = 0; j < moved; ++j) {
        std::remove((layout_.dir + "/" + closed_[size_t(j)].file).c_str());
      }
    }
  }
  check(first_error(comm_, error));
  published_ = true;
}

}  // namespace mpf

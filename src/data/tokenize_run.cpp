#include "data/tokenize_run.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <new>
#include <optional>

#include <fcntl.h>
#include <unistd.h>

#include "checkpoint/save_lock.hpp"
#include "core/error.hpp"
#include "core/text_affixes.hpp"
#include "data/corpus_reader.hpp"
#include "data/shard_manifest.hpp"
#include "data/shard_writer.hpp"
#include "io/input_file.hpp"
#include "io/llmc_format.hpp"
#include "io/output_file.hpp"
#include "parallel/agreement.hpp"
#include "parallel/grid.hpp"
#include "text/unicode_text.hpp"

namespace mpf {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kProgressSeconds = 5.0;

// The output directory, which rank 0 has locked (so no other run writes there). What an earlier
// run cut off left is removed, with a note: its shard partials, and a manifest partial with the
// shards it had begun to move into place (shards are published only after their manifest is
// written whole, so a published shard always has manifest.json or a partial one listing it).
// Then the directory is refused if it holds this --name's shards or a manifest: nothing a user
// has is overwritten, and two data sets never mix.
void prepare_output(const TokenizeOptions& o, std::vector<std::string>& notes) {
  std::error_code ec;
  fs::create_directories(o.output_dir, ec);
  require(!ec && is_directory(o.output_dir), "--output-dir " + o.output_dir +
                                                 ": cannot create the directory (" + ec.message() +
                                                 "); choose another --output-dir");
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(o.output_dir, ec)) {
    names.push_back(entry.path().filename().string());
  }
  require(!ec, "--output-dir " + o.output_dir + ": cannot list (" + ec.message() +
                   "); check the directory's permissions");
  std::sort(names.begin(), names.end());
  const auto is_shard_partial = [](const std::string& f) {
    return ends_with(f, ".bin.partial") &&
           (f.find("_val_") != std::string::npos || f.find("_train_") != std::string::npos);
  };
  std::vector<std::string> unfinished;
  for (const std::string& f : names) {
    if (starts_with(f, "manifest.json.partial-")) {
      std::string text;
      try {
        text = read_input_text(o.output_dir + "/" + f, "manifest partial", "", 1'000'000'000);
      } catch (const InputError&) {
      }
      for (const std::string& shard : manifest_shard_files(text)) {
        if (std::binary_search(names.begin(), names.end(), shard)) unfinished.push_back(shard);
      }
      unfinished.push_back(f);
    } else if (is_shard_partial(f)) {
      unfinished.push_back(f);
    }
  }
  if (!unfinished.empty()) {
    std::sort(unfinished.begin(), unfinished.end());
    std::string list;
    for (const std::string& f : unfinished) {
      const std::string path = o.output_dir + "/" + f;
      if (std::remove(path.c_str()) != 0 && errno != ENOENT) {
        throw InputError("--output-dir " + o.output_dir + ": cannot remove " + path +
                         ", left by a run that stopped before publishing its data set (" +
                         errno_text() + "); remove it");
      }
      list += (list.empty() ? "" : ", ") + f;
    }
    notes.push_back("--output-dir " + o.output_dir + ": removed " +
                    std::to_string(unfinished.size()) +
                    " file(s) a run left when it stopped before publishing its data set: " + list);
    names.erase(std::remove_if(names.begin(), names.end(),
                               [&](const std::string& f) {
                                 return std::binary_search(unfinished.begin(), unfinished.end(), f);
                               }),
                names.end());
  }
  for (const std::string& f : names) {
    const bool shard = (starts_with(f, o.name + "_val_") || starts_with(f, o.name + "_train_")) &&
                       f.find(".bin") != std::string::npos;
    require(!shard && f != "manifest.json",
            "--output-dir " + o.output_dir + " already holds " + f +
                "; choose another --output-dir or --name, or remove the old data set");
  }
}

// The file list, as one text for broadcasting: "format bytes path" records, each ended by a NUL
// (the one byte no path holds).
std::string pack_files(const std::vector<CorpusFile>& files) {
  std::string s;
  for (const auto& f : files) {
    s += (f.format == CorpusFormat::kJsonl ? "j " : "t ") + std::to_string(f.bytes) + " " + f.path;
    s += '\0';
  }
  return s;
}

std::vector<CorpusFile> unpack_files(const std::string& s) {
  std::vector<CorpusFile> files;
  for (size_t at = 0; at < s.size();) {
    const size_t end = s.find('\0', at);
    const std::string line = s.substr(at, end - at);
    const size_t space = line.find(' ', 2);
    files.push_back({line.substr(space + 1),
                     line[0] == 'j' ? CorpusFormat::kJsonl : CorpusFormat::kText,
                     std::stoll(line.substr(2, space - 2))});
    at = end + 1;
  }
  return files;
}

double megabytes(int64_t bytes) {
  return double(bytes) / 1e6;
}

// A rank's tokens of one work unit: the newest in memory, the rest spilled to a file in the
// output directory, so what a rank holds is bounded whatever the size of the unit's documents
// (their tokens' place in the stream is known only once every rank has finished its unit). The
// file is unlinked as soon as it is made: nothing is left behind, however the run ends.
class TokenSpool {
 public:
  static constexpr size_t kMemoryTokens = size_t(1) << 20;

  explicit TokenSpool(std::string dir) : dir_(std::move(dir)) {}
  ~TokenSpool() {
    if (fd_ >= 0) ::close(fd_);
  }
  TokenSpool(const TokenSpool&) = delete;
  TokenSpool& operator=(const TokenSpool&) = delete;

  std::vector<int32_t> tail;  // the tokens after the spilled ones

  int64_t size() const { return spilled_ + int64_t(tail.size()); }
  int64_t spilled() const { return spilled_; }
  void clear() {
    spilled_ = 0;
    tail.clear();
  }
  // Keeps the first n tokens (a skipped document's are taken back).
  void truncate(int64_t n) {
    if (n >= spilled_) {
      tail.resize(size_t(n - spilled_));
    } else {
      tail.clear();
      spilled_ = n;
    }
  }
  // The tail to the file once it is large. Throws InputError when the file cannot be written.
  void spill_if_large() {
    if (tail.size() < kMemoryTokens) return;
    if (fd_ < 0) {
      std::string path = dir_ + "/.tokenize-spool-XXXXXX";
      fd_ = mkstemp(path.data());
      require(fd_ >= 0, "--output-dir " + dir_ +
                            ": cannot create a spool file for a work unit's "
                            "tokens (" +
                            errno_text() + "); check the directory's permissions");
      ::unlink(path.c_str());
    }
    const char* p = reinterpret_cast<const char*>(tail.data());
    size_t left = tail.size() * sizeof(int32_t);
    off_t at = off_t(spilled_) * off_t(sizeof(int32_t));
    while (left > 0) {
      const ssize_t n = ::pwrite(fd_, p, left, at);
      require(n > 0, "--output-dir " + dir_ +
                         ": cannot write a work unit's tokens to its spool "
                         "file (" +
                         errno_text() + "); free space in the directory");
      p += n;
      at += n;
      left -= size_t(n);
    }
    spilled_ += int64_t(tail.size());
    tail.clear();
  }
  // Tokens [from, from + n) into out. Never throws (the shard writer reads inside collectives):
  // a failed read is kept in error().
  void read(int64_t from, int64_t n, int32_t* out) {
    while (n > 0 && from < spilled_) {
      const int64_t take = std::min(n, spilled_ - from);
      const ssize_t got =
          ::pread(fd_, out, size_t(take) * sizeof(int32_t), off_t(from) * off_t(sizeof(int32_t)));
      if (got <= 0 || got % ssize_t(sizeof(int32_t)) != 0) {
        if (error_.empty())
          error_ = "cannot read a work unit's tokens back from its spool file (" +
                   (got < 0 ? errno_text() : std::string("short read")) + ")";
        std::fill(out, out + n, 0);
        return;
      }
      const int64_t k = int64_t(got) / int64_t(sizeof(int32_t));
      out += k;
      from += k;
      n -= k;
    }
    if (n > 0) std::copy_n(tail.begin() + (from - spilled_), n, out);
  }
  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  int fd_ = -1;
  int64_t spilled_ = 0;
  std::string error_;
};

// What the documents of a round lost or had replaced (--unknown-bytes, --invalid-utf8).
struct RoundRepairs {
  int64_t documents = 0, unknown_dropped = 0, unknown_replaced = 0, invalid_utf8 = 0, skipped = 0;
  std::string records;  // "file byte dropped replaced invalid skipped\n" per document, in order
};

// Appends the unit's documents to `tokens`, each between its document tokens, and each document's
// end to `doc_ends`; adds the text's bytes to `text_bytes` and what the documents lost or had
// replaced to `repairs`. A document skipped for its bytes (--invalid-utf8 skip-document) gives no
// tokens.
void tokenize_unit(const std::vector<CorpusFile>& files, const CorpusUnit& unit,
                   const TokenizeOptions& opts, const DocumentEncoder& encoder, TokenSpool& tokens,
                   std::vector<int64_t>& doc_ends, int64_t& text_bytes, RoundRepairs& repairs) {
  std::optional<DocumentStream> doc;
  int64_t doc_begin = 0;  // where the document's tokens start in the unit's
  int doc_file = 0;
  int64_t doc_byte = 0;
  size_t checked = 0;  // the tail's tokens before this are known to be in the vocabulary
  const auto check_ids = [&] {
    // The message is built only for a bad id: this loop sees every token.
    const auto bad = std::find_if(tokens.tail.begin() + std::ptrdiff_t(checked), tokens.tail.end(),
                                  [&](int32_t id) { return id < 0 || id >= encoder.vocab_size; });
    if (bad != tokens.tail.end()) {
      throw InputError("tokenizer " + opts.tokenizer + " gave token " + std::to_string(*bad) +
                       " outside its vocabulary of " + std::to_string(encoder.vocab_size) +
                       "; check the tokenizer file");
    }
    checked = tokens.tail.size();
  };
  const auto spill = [&] {
    check_ids();
    tokens.spill_if_large();
    checked = std::min(checked, tokens.tail.size());
  };
  read_unit(
      files, unit, opts.text_field,
      [&](std::string_view chunk, bool last) {
        if (!doc) {
          doc_begin = tokens.size();
          tokens.tail.insert(tokens.tail.end(), encoder.before.begin(), encoder.before.end());
          doc.emplace(encoder, tokens.tail);
        }
        doc->add(chunk);
        text_bytes += int64_t(chunk.size());
        if (last) doc->finish();
        const DocumentRepairs r = doc->repairs();
        if (r.skipped) {
          tokens.truncate(doc_begin);
          checked = std::min(checked, tokens.tail.size());
        }
        if (!last) {
          spill();
          return;
        }
        doc.reset();
        if (!r.skipped) {
          tokens.tail.insert(tokens.tail.end(), encoder.after.begin(), encoder.after.end());
          doc_ends.push_back(tokens.size());
        }
        spill();
        if (r.any()) {
          ++repairs.documents;
          repairs.unknown_dropped += r.unknown_dropped;
          repairs.unknown_replaced += r.unknown_replaced;
          repairs.invalid_utf8 += r.invalid_utf8;
          repairs.skipped += r.skipped ? 1 : 0;
          repairs.records += std::to_string(doc_file) + " " + std::to_string(doc_byte) + " " +
                             std::to_string(r.unknown_dropped) + " " +
                             std::to_string(r.unknown_replaced) + " " +
                             std::to_string(r.invalid_utf8) + " " + (r.skipped ? "1" : "0") + "\n";
        }
      },
      [&](int file, int64_t byte) {
        doc_file = file;
        doc_byte = byte;
      });
  check_ids();
}

// Rank 0 gathers the ranks' records in rank order (the units' order) onto `listed`, up to
// kListedRepairs in all.
constexpr size_t kListedRepairs = 10000;
void gather_repairs(const std::string& records, const std::vector<CorpusFile>& files,
                    std::vector<RepairedDocument>& listed, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // Only what still fits the list travels.
  std::string mine = records;
  int length = listed.size() >= kListedRepairs ? 0 : int(std::min<size_t>(mine.size(), INT_MAX));
  std::vector<int> lengths(size_t(size), 0);
  MPF_MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm));
  std::vector<int> displs(size_t(size), 0);
  int total = 0;
  for (int p = 0; p < size; ++p) {
    displs[size_t(p)] = total;
    total += lengths[size_t(p)];
  }
  std::string all(size_t(rank == 0 ? total : 0), '\0');
  MPF_MPI_CHECK(MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(),
                            displs.data(), MPI_CHAR, 0, comm));
  if (rank != 0) return;
  for (size_t at = 0; at < all.size() && listed.size() < kListedRepairs;) {
    const size_t end = all.find('\n', at);
    long long file = 0, byte = 0, dropped = 0, replaced = 0, invalid = 0;
    int skipped = 0;
    std::sscanf(all.c_str() + at, "%lld %lld %lld %lld %lld %d", &file, &byte, &dropped, &replaced,
                &invalid, &skipped);
    RepairedDocument d;
    d.input = files[size_t(file)].path;
    d.byte = byte;
    d.repairs.unknown_dropped = dropped;
    d.repairs.unknown_replaced = replaced;
    d.repairs.invalid_utf8 = invalid;
    d.repairs.skipped = skipped != 0;
    listed.push_back(d);
    at = end + 1;
  }
}

}  // namespace

TokenizeSummary run_tokenize(const TokenizeOptions& opts, const DocumentEncoder& encoder,
                             const std::string& tokenizer_sha256, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const auto start = Clock::now();

  // Rank 0 alone reads the listings, so every rank works from one view of the file system.
  std::string packed;
  // One writer per output directory: rank 0 holds its lock until the data set is published.
  std::optional<checkpoint::SaveLock> lock;
  std::vector<std::string> notes;
  on_every_rank(comm, [&] {
    if (rank != 0) return;
    packed = pack_files(resolve_corpus(opts.inputs));
    lock.emplace(opts.output_dir, notes, "--output-dir");
    prepare_output(opts, notes);
  });
  if (rank == 0) {
    for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
    std::fflush(stdout);
  }
  const std::vector<CorpusFile> files = unpack_files(broadcast(packed, 0, comm));
  const std::vector<CorpusUnit> units = plan_units(files, opts.unit_bytes);
  int64_t corpus_bytes = 0;
  for (const auto& f : files) corpus_bytes += f.bytes;

  ShardLayout layout;
  layout.dir = opts.output_dir;
  layout.name = opts.name;
  layout.width = encoder.vocab_size <= llmc::kUint16Vocab ? 2 : 4;
  layout.shard_tokens = opts.shard_tokens;
  layout.validation = opts.val_tokens > 0;
  ShardWriter writer(comm, layout);

  // Text bytes count the documents' text (the rate); file bytes the inputs read (the progress).
  int64_t done_tokens = 0, done_docs = 0, done_bytes = 0, done_file_bytes = 0, val_docs = 0;
  RoundRepairs repaired;  // the totals so far (records: unused)
  std::vector<RepairedDocument> listed;
  auto last_print = start;
  TokenSpool tokens(opts.output_dir);
  std::vector<int64_t> doc_ends;  // each local document's end, from this rank's first token
  const int64_t rounds = (int64_t(units.size()) + size - 1) / size;
  constexpr int kCounts = 9;
  for (int64_t round = 0; round < rounds; ++round) {
    tokens.clear();
    doc_ends.clear();
    RoundRepairs repairs;
    // tokens, documents, text bytes, file bytes, then the repairs' counts
    int64_t mine[kCounts] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    on_every_rank(comm, [&] {
      const int64_t u = round * size + rank;
      if (u >= int64_t(units.size())) return;
      for (const CorpusPiece& p : units[size_t(u)]) mine[3] += p.end - p.begin;
      try {
        tokenize_unit(files, units[size_t(u)], opts, encoder, tokens, doc_ends, mine[2], repairs);
      } catch (const std::bad_alloc&) {
        const CorpusFile& first = files[size_t(units[size_t(u)].front().file)];
        throw InputError("rank " + std::to_string(rank) + " ran out of memory tokenizing " +
                         first.path + " (its work unit holds " + std::to_string(tokens.size()) +
                         " tokens so far); give each rank more "
                         "memory (fewer ranks per node) or split the file");
      }
      mine[0] = tokens.size();
      mine[1] = int64_t(doc_ends.size());
      mine[4] = repairs.documents;
      mine[5] = repairs.unknown_dropped;
      mine[6] = repairs.unknown_replaced;
      mine[7] = repairs.invalid_utf8;
      mine[8] = repairs.skipped;
    });
    std::vector<int64_t> all(size_t(kCounts) * size);
    MPF_MPI_CHECK(
        MPI_Allgather(mine, kCounts, MPI_INT64_T, all.data(), kCounts, MPI_INT64_T, comm));
    int64_t base = done_tokens, round_end = done_tokens;
    const int64_t docs_before = done_docs;
    for (int p = 0; p < size; ++p) {
      const int64_t* r = &all[size_t(kCounts * p)];
      if (p < rank) base += r[0];
      round_end += r[0];
      done_docs += r[1];
      done_bytes += r[2];
      done_file_bytes += r[3];
      repaired.documents += r[4];
      repaired.unknown_dropped += r[5];
      repaired.unknown_replaced += r[6];
      repaired.invalid_utf8 += r[7];
      repaired.skipped += r[8];
    }
    gather_repairs(repairs.records, files, listed, comm);
    // The validation split ends with the document that holds token val_tokens - 1.
    if (!writer.validation_end_known()) {
      int64_t end = INT64_MAX;
      for (int64_t e : doc_ends) {
        if (base + e >= opts.val_tokens) {
          end = base + e;
          break;
        }
      }
      MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &end, 1, MPI_INT64_T, MPI_MIN, comm));
      if (end != INT64_MAX) {
        writer.set_validation_end(end);
        int64_t in_val = std::count_if(doc_ends.begin(), doc_ends.end(),
                                       [&](int64_t e) { return base + e <= end; });
        MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &in_val, 1, MPI_INT64_T, MPI_SUM, comm));
        val_docs = docs_before + in_val;
      }
    }
    writer.write(done_tokens, round_end, base, tokens.size(),
                 [&](int64_t from, int64_t n, int32_t* out) { tokens.read(from, n, out); });
    on_every_rank(comm, [&] {
      require(tokens.error().empty(), "--output-dir " + opts.output_dir + ": " + tokens.error() +
                                          "; check the directory's disk");
    });
    done_tokens = round_end;
    const auto now = Clock::now();
    if (rank == 0 && std::chrono::duration<double>(now - last_print).count() >= kProgressSeconds) {
      const double s = std::chrono::duration<double>(now - start).count();
      std::printf("tokenize: %.1f of %.1f MB (%.0f%%) | %lld documents | %lld tokens | %.1f MB/s\n",
                  megabytes(done_file_bytes), megabytes(corpus_bytes),
                  corpus_bytes > 0 ? 100.0 * double(done_file_bytes) / double(corpus_bytes) : 100.0,
                  (long long)done_docs, (long long)done_tokens, megabytes(done_file_bytes) / s);
      std::fflush(stdout);
      last_print = now;
    }
  }
  require(done_docs > 0 || repaired.skipped == 0,
          "--invalid-utf8 skip-document left out all " + std::to_string(repaired.skipped) +
              " documents (none is UTF-8); pass --invalid-utf8 replace to read their bytes as "
              "U+FFFD");
  require(done_docs > 0,
          "the inputs hold no documents (only empty .jsonl files or blank lines); pass inputs "
          "that hold text");
  // Every document in the validation split would leave nothing to train on.
  require(!layout.validation ||
              (writer.validation_end_known() && writer.validation_end() < done_tokens),
          "--val-tokens " + std::to_string(opts.val_tokens) + " takes all " +
              std::to_string(done_tokens) + " tokens (" + std::to_string(done_docs) +
              " documents) into the validation split, leaving none to train on; pass a smaller "
              "--val-tokens");
  const std::vector<ShardInfo> shards = writer.finish(done_tokens);

  ShardManifest m;
  m.tokenizer = opts.tokenizer;
  m.tokenizer_sha256 = tokenizer_sha256;
  m.vocab_size = encoder.vocab_size;
  m.doc_token_text = encoder.doc_token_text;
  m.doc_token = encoder.doc_token;
  m.doc_token_after = encoder.doc_token_after;
  m.width = layout.width;
  m.shard_tokens = opts.shard_tokens;
  m.val_tokens = opts.val_tokens;
  m.text_field = opts.text_field;
  m.inputs = files;
  m.documents = done_docs;
  m.val_documents = layout.validation ? val_docs : 0;
  m.tokens = done_tokens;
  m.text_bytes = done_bytes;
  m.shards = shards;
  m.unknown_bytes = unknown_bytes_name(opts.unknown_bytes);
  m.invalid_utf8 = invalid_utf8_name(opts.invalid_utf8);
  m.unicode = unicode::data_version();
  m.repaired_documents = repaired.documents;
  m.unknown_dropped = repaired.unknown_dropped;
  m.unknown_replaced = repaired.unknown_replaced;
  m.invalid_utf8_replaced = repaired.invalid_utf8;
  m.skipped_documents = repaired.skipped;
  m.repaired = std::move(listed);
  // The manifest is written whole (synced) before any shard takes its name, and put in place
  // after the last: a cut-off run leaves a manifest partial that lists what it moved.
  std::optional<PendingFile> manifest;
  std::string error;
  if (rank == 0) {
    manifest.emplace(opts.output_dir + "/manifest.json");
    const std::string text = manifest_json(m);
    manifest->write(text.data(), text.size());
    error = manifest->sync();
  }
  error = first_error(comm, error);
  require(error.empty(), "manifest " + error +
                             "; no shard was published: free space in the output directory or "
                             "choose another --output-dir");
  writer.publish([&] {
    const std::string e = manifest->commit();
    return e.empty() ? e : "manifest " + e;
  });

  TokenizeSummary summary;
  summary.documents = done_docs;
  summary.tokens = done_tokens;
  summary.text_bytes = done_bytes;
  summary.shards = int64_t(shards.size());
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (rank == 0) {
    const double rate = megabytes(done_bytes) / std::max(summary.seconds, 1e-9);
    std::printf(
        "tokenize: done | %lld documents | %lld tokens (%lld in validation) | %lld shards "
        "| %.1f MB of text in %.2f s | %.1f MB/s | %.2f MB/s per rank | unknown bytes (%s): "
        "%lld dropped, %lld replaced | invalid UTF-8 (%s): %lld replaced, %lld documents "
        "skipped\n",
        (long long)done_docs, (long long)done_tokens,
        (long long)(layout.validation ? writer.validation_end() : 0), (long long)summary.shards,
        megabytes(done_bytes), summary.seconds, rate, rate / size, m.unknown_bytes.c_str(),
        (long long)m.unknown_dropped, (long long)m.unknown_replaced, m.invalid_utf8.c_str(),
        (long long)m.invalid_utf8_replaced, (long long)m.skipped_documents);
    std::fflush(stdout);
  }
  return summary;
}

}  // namespace mpf

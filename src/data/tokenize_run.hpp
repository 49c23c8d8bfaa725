// One run of mpiformer-tokenize (docs/data.md): the corpus's documents, each behind the document
// token, tokenized on every rank and written as llm.c shards with a manifest.
//
// The corpus is cut into work units (data/corpus_reader.hpp) dealt to the ranks in turn: in round
// r rank p tokenizes unit r·P + p. The ranks then learn each other's token counts (one
// all-gather), so each knows where its tokens start in the stream, and write them there
// (data/shard_writer.hpp). The stream, and so every shard, is the units' tokens in unit order
// whatever the rank count. A rank holds a document's text since its last cut
// (data/document_encoder.hpp) and at most a million of its tokens at a time, the rest waiting in a
// spool file until their place is known.
#pragma once

#include <mpi.h>

#include <string>

#include "data/document_encoder.hpp"
#include "data/tokenize_options.hpp"

namespace mpf {

struct TokenizeSummary {
  int64_t documents = 0, tokens = 0, text_bytes = 0, shards = 0;
  double seconds = 0;
};

// Collective over comm. Throws InputError, the same on every rank, for bad input (a missing
// input, a bad .jsonl line, an output that exists) or a failed write; nothing is left in the
// output directory then. Rank 0 prints progress every few seconds and a last summary line.
// `tokenizer_sha256` is recorded in the manifest (rank 0's matters).
TokenizeSummary run_tokenize(const TokenizeOptions& opts, const DocumentEncoder& encoder,
                             const std::string& tokenizer_sha256, MPI_Comm comm);

}  // namespace mpf

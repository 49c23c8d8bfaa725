// mpiformer-tokenize: a driver. Parses flags, loads the tokenizer on every rank and runs the
// tokenization (data/tokenize_run.hpp). Input errors print once (from the lowest failing rank,
// normally rank 0) and every rank exits with status 2.
#include <mpi.h>

#include <cstdio>
#include <string>

#include "core/error.hpp"
#include "data/document_encoder.hpp"
#include "data/tokenize_options.hpp"
#include "data/tokenize_run.hpp"
#include "io/sha256.hpp"
#include "runtime.hpp"
#include "train/exit_status.hpp"

int main(int argc, char** argv) {
  mpf::Runtime runtime(&argc, &argv);
  const int rank = runtime.world_rank();
  const MPI_Comm world = MPI_COMM_WORLD;

  mpf::TokenizeOptions opts;
  if (!mpf::all_ranks_succeed(world, [&] { opts = mpf::parse_tokenize_options(argc, argv); })) {
    return runtime.finish(mpf::kExitBadInput);
  }
  if (opts.help) {
    if (rank == 0) std::fputs(mpf::tokenize_usage().c_str(), stdout);
    return runtime.finish(0);
  }
  mpf::DocumentEncoder encoder;
  std::string tokenizer_sha256;
  const bool ok =
      mpf::all_ranks_succeed(
          world,
          [&] {
            encoder = mpf::load_document_encoder(opts.tokenizer, opts.doc_token, opts.parse_special,
                                                 opts.unknown_bytes, opts.invalid_utf8);
            if (rank == 0) {
              tokenizer_sha256 = mpf::sha256_of_file(opts.tokenizer, "tokenizer " + opts.tokenizer);
            }
          }) &&
      mpf::all_ranks_succeed(world,
                             [&] { mpf::run_tokenize(opts, encoder, tokenizer_sha256, world); });
  return runtime.finish(ok ? 0 : mpf::kExitBadInput);
}

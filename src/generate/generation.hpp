// A generation run (mpiformer-generate): the model's shards loaded onto the TP ranks, the prompt
// through the Decoder in one pass, then one token per step, chosen by next_token on every rank
// alike and streamed by rank 0 as text. It stops after --max-new-tokens, at the tokenizer's
// end-of-text, or when the sequence fills the model's max_seq_len positions (a note says which:
// positions are learned embeddings, so there is no sliding window past them).
#pragma once

#include <mpi.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpointing.hpp"
#include "generate/decoder.hpp"
#include "generate/options.hpp"
#include "generate/sampler.hpp"
#include "generate/tokenizer_file.hpp"
#include "io/llmc_tokenizer.hpp"
#include "model/config.hpp"
#include "parallel/grid.hpp"
#include "parallel/groups.hpp"

namespace mpf {

// The files and flags, checked against each other. Loading involves no MPI call: the app agrees
// on the outcome before building the run.
struct GenerateInputs {
  GenerateOptions opts;
  GPTConfig cfg;
  std::optional<ResumePoint> checkpoint;  // --load
  std::optional<Tokenizer> tokenizer;     // decodes (either kind of --tokenizer file)
  std::optional<BpeTokenizer> encoder;    // encodes --prompt text (a tokenizer.json)
  std::vector<int32_t> prompt;
  size_t prompt_shown_from =
      0;  // the prompt's echo skips the template's prefix (<|begin_of_text|>)
  std::vector<std::string> notes;  // for rank 0 to print
};

// Throws InputError for a bad model file or checkpoint directory, tokenizer, prompt (ids outside
// the vocabulary, text for a model that is not byte-level, longer than max_seq_len) or output
// path (rank 0 checks those: they must not exist). With --load, `step` is the checkpoint world
// rank 0 chose (choose_checkpoint, -1: none) and broadcast, `notes` rank 0's notes on it.
GenerateInputs load_generate_inputs(const GenerateOptions& opts, int64_t step,
                                    const std::vector<std::string>& notes, int world_rank);

class Generation {
 public:
  // Collective over world, whose size must be --tp. Reads this rank's shard of the parameters.
  // Throws InputError on every rank alike (a layout that does not fit, a file that does not
  // load).
  Generation(GenerateInputs inputs, MPI_Comm world);
  ~Generation();

  // Generates, rank 0 streaming the text to stdout and the summary to stderr. Throws InputError
  // on every rank alike if the logits are not finite or an output file cannot be written.
  void run();

 private:
  GenerateInputs in_;
  std::unique_ptr<Grid> grid_;
  ParallelGroups groups_;  // the grid's, as the model was built with them
  TpShard shard_;
  Parameters params_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<TokenSampler> sampler_;
  int threads_ = 1;
};

}  // namespace mpf

// llm.c's GPT-2 model file (train_gpt2.c gpt2_build_from_checkpoint): 256 int32 header
// (magic 20240326, version 3 = fp32, max_seq_len, vocab, layers, heads, channels, padded vocab),
// then every parameter as one flat fp32 array in llm.c's tensor order (see parameters.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/llmc_format.hpp"
#include "model/config.hpp"

namespace mpf {

// Reads and validates the header. Throws InputError for a missing file, wrong magic, a version
// other than 3 (version 5 is llm.c's bf16: the message says to export fp32), bad sizes, or a file
// whose size is not 1024 + 4 * parameter_count(cfg).
GPTConfig read_checkpoint_config(const std::string& path);

// The same checks for the optimizer file of a training checkpoint (checkpoint_info.hpp), whose
// header has the model file's layout with its own magic and whose body is two floats per
// parameter.
GPTConfig read_optimizer_config(const std::string& path);

// The 256-int32 header of a model file, or of a checkpoint's optimizer file.
void make_header(const GPTConfig& cfg, bool optimizer, int32_t* header);

// Reads all parameters (parameter_count(cfg) floats, llm.c order) into `out`. Throws InputError
// if the file's header differs from cfg or the file is short.
void read_checkpoint_params(const std::string& path, const GPTConfig& cfg, std::vector<float>& out);

// Writes header + params to `path` through a temporary file renamed into place, so a crash never
// leaves a half-written checkpoint. Throws InputError if `path` already exists (nothing a user
// wrote is overwritten) or cannot be written.
void write_checkpoint(const std::string& path, const GPTConfig& cfg,
                      const std::vector<float>& params);

// Throws InputError if `path` exists or its directory is not writable: checked at start-up so a
// run does not discover at the end that it cannot save.
void check_checkpoint_writable(const std::string& path);

}  // namespace mpf

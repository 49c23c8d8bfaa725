// state_NNNNNNNN.txt, the part of a checkpoint that is not a tensor: `key = value` lines a person
// can read and a script can parse. What a resumed run needs to be the same run (the step, hence
// the learning rate; where the data continues), what it must agree with (the model, the options
// that define the run), the layout that wrote it (for the record: any layout may load it), and a
// checksum of every tensor in the two binary files (parallel_file.hpp's Digest).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/config.hpp"
#include "model/parameters.hpp"

namespace mpf {

// Bumped whenever the files' meaning changes; a checkpoint of another version is refused.
inline constexpr int kCheckpointFormat = 1;
// The optimizer file: an llm.c-style header (256 int32: magic, version, then the model's sizes in
// the model file's slots), then m and v, each parameter_count(model) floats in the model file's
// order.
inline constexpr int32_t kOptimizerMagic = 20261123;
inline constexpr int32_t kOptimizerVersion = 1;

struct CheckpointInfo {
  int format = kCheckpointFormat;
  int64_t step = 0;  // optimizer steps taken; the next run starts at step + 1
  GPTConfig model;
  // The run's settings, `key = value` in the order written ("optimizer.lr" = "0.00100000005"):
  // the trainer's table of settings says which there are and what a resumed run does with each.
  std::vector<std::pair<std::string, std::string>> settings;
  // The data: where the next training batch starts (file index in the resolved list, token in
  // that file), the tokens trained on so far, and the validation stream's position.
  int64_t train_data_tokens = 0;  // tokens in all training files, to notice changed data
  int64_t train_file = 0, train_position = 0, tokens_seen = 0;
  int64_t val_file = 0, val_position = 0;
  // The outlier windows (the trainer's OutlierWindow: the last losses and gradient norms, oldest
  // first) and the updates skipped so far; empty in a checkpoint written before there were any.
  std::vector<double> loss_window, norm_window;
  int64_t skipped_updates = 0;
  // Checksums of each tensor of the model file, and of m and v in the optimizer file.
  std::array<uint64_t, kNumParameterTensors> params_checksum{}, m_checksum{}, v_checksum{};
};

std::string to_text(const CheckpointInfo& info);

// The saved setting `key`'s value; nullopt when the file has none.
std::optional<std::string> setting(const CheckpointInfo& info, const std::string& key);

// Reads and checks a state file. Throws InputError naming the file and the field for a missing
// file, a format version other than kCheckpointFormat, a missing or malformed field.
CheckpointInfo read_checkpoint_info(const std::string& path);
// The same, from the text of a state file; `path` names it in the errors (a local shard that
// carries one: checkpoint/local_shards.hpp).
CheckpointInfo parse_checkpoint_info(const std::string& text, const std::string& path);

}  // namespace mpf

#include "checkpoint/checkpoint_info.hpp"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <variant>
#include <vector>

#include "core/error.hpp"

namespace mpf {

namespace {

struct Hex {
  uint64_t* value;
};
using Ref = std::variant<int*, int64_t*, uint64_t*, float*, bool*, std::string*, Hex>;
struct Field {
  std::string key;
  Ref ref;
};

// Every field, in the order written. One table serves writing and reading.
std::vector<Field> fields(CheckpointInfo& c) {
  std::vector<Field> f = {
      {"format", &c.format},
      {"step", &c.step},
      {"model.max_seq_len", &c.model.max_seq_len},
      {"model.vocab", &c.model.vocab},
      {"model.padded_vocab", &c.model.padded_vocab},
      {"model.layers", &c.model.layers},
      {"model.heads", &c.model.heads},
      {"model.channels", &c.model.channels},
      {"run.seed", &c.seed},
      {"run.batch", &c.batch},
      {"run.seq_len", &c.seq_len},
      {"run.steps", &c.steps},
      {"optimizer.lr", &c.lr},
      {"optimizer.lr_schedule", &c.lr_schedule},
      {"optimizer.lr_decay_steps", &c.lr_decay_steps},
      {"optimizer.warmup", &c.warmup},
      {"optimizer.final_lr_frac", &c.final_lr_frac},
      {"optimizer.beta1", &c.beta1},
      {"optimizer.beta2", &c.beta2},
      {"optimizer.eps", &c.eps},
      {"optimizer.weight_decay", &c.weight_decay},
      {"optimizer.grad_clip", &c.grad_clip},
      {"data.train", &c.train_data},
      {"data.train_tokens", &c.train_data_tokens},
      {"data.train_file", &c.train_file},
      {"data.train_position", &c.train_position},
      {"data.tokens_seen", &c.tokens_seen},
      {"data.val", &c.val_data},
      {"data.val_file", &c.val_file},
      {"data.val_position", &c.val_position},
      {"layout.tp", &c.tp},
      {"layout.pp", &c.pp},
      {"layout.dp", &c.dp},
      {"layout.virtual_stages", &c.virtual_stages},
      {"layout.schedule", &c.schedule},
      {"layout.microbatches", &c.microbatches},
      {"layout.pp_layout", &c.pp_layout},
      {"layout.zero", &c.zero},
      {"layout.sequence_parallel", &c.sequence_parallel},
  };
  GPTConfig any;
  const auto infos = parameter_infos(any);
  for (int i = 0; i < kNumParameterTensors; ++i) {
    const std::string t = infos[i].name;
    f.push_back({"checksum.model." + t, Hex{&c.params_checksum[i]}});
    f.push_back({"checksum.m." + t, Hex{&c.m_checksum[i]}});
    f.push_back({"checksum.v." + t, Hex{&c.v_checksum[i]}});
  }
  return f;
}

std::string format(const Ref& ref) {
  char buf[64];
  if (auto p = std::get_if<int*>(&ref)) return std::to_string(**p);
  if (auto p = std::get_if<int64_t*>(&ref)) return std::to_string(**p);
  if (auto p = std::get_if<uint64_t*>(&ref)) return std::to_string(**p);
  if (auto p = std::get_if<bool*>(&ref)) return **p ? "true" : "false";
  if (auto p = std::get_if<std::string*>(&ref)) return **p;
  if (auto p = std::get_if<float*>(&ref)) {
    std::snprintf(buf, sizeof buf, "%.9g", double(**p));  // 9 digits: the float back, exactly
    return buf;
  }
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, *std::get<Hex>(ref).value);
  return buf;
}

// Parses `text` into the field; false if malformed.
bool parse(const std::string& text, const Ref& ref) {
  if (auto p = std::get_if<std::string*>(&ref)) {
    **p = text;
    return true;
  }
  if (auto p = std::get_if<bool*>(&ref)) {
    if (text != "true" && text != "false") return false;
    **p = text == "true";
    return true;
  }
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  if (auto p = std::get_if<float*>(&ref)) {
    **p = std::strtof(text.c_str(), &end);
  } else if (auto p = std::get_if<int*>(&ref)) {
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (v < INT32_MIN || v > INT32_MAX) return false;
    **p = int(v);
  } else if (auto p = std::get_if<int64_t*>(&ref)) {
    **p = std::strtoll(text.c_str(), &end, 10);
  } else if (auto p = std::get_if<uint64_t*>(&ref)) {
    **p = std::strtoull(text.c_str(), &end, 10);
  } else {
    *std::get<Hex>(ref).value = std::strtoull(text.c_str(), &end, 16);
  }
  return errno == 0 && *end == '\0';
}

}  // namespace

std::string to_text(const CheckpointInfo& info) {
  CheckpointInfo c = info;
  std::string out =
      "# mpiformer checkpoint: the training state after step " + std::to_string(c.step) +
      " that is not a tensor.\n# Parameters: the llm.c model file beside this one; AdamW's m and "
      "v: the optimizer file.\n";
  for (const Field& f : fields(c)) out += f.key + " = " + format(f.ref) + "\n";
  return out;
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  std::ifstream in(path);
  require(bool(in),
          "checkpoint " + path +
              ": cannot open (the checkpoint is incomplete or unreadable); check the path");
  std::map<std::string, std::string> values;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find(" = ");
    require(eq != std::string::npos, "checkpoint " + path + ": malformed line '" +
                                         line.substr(0, 60) + "'; the file is corrupt");
    values[line.substr(0, eq)] = line.substr(eq + 3);
  }
  CheckpointInfo c;
  c.format = 0;
  const auto format_it = values.find("format");
  require(format_it != values.end() && parse(format_it->second, &c.format),
          "checkpoint " + path + ": no format version; not an mpiformer checkpoint, or corrupt");
  require(c.format == kCheckpointFormat,
          "checkpoint " + path + ": format version " + std::to_string(c.format) +
              ", but this mpiformer reads version " + std::to_string(kCheckpointFormat) +
              "; use the mpiformer that wrote it");
  for (const Field& f : fields(c)) {
    const auto it = values.find(f.key);
    require(it != values.end(), "checkpoint " + path + ": field '" + f.key +
                                    "' is missing; the file is truncated or corrupt");
    require(parse(it->second, f.ref), "checkpoint " + path + ": field '" + f.key + "' = '" +
                                          it->second + "' is malformed; the file is corrupt");
  }
  validate(c.model, "checkpoint " + path);
  require(c.step >= 1 && c.batch >= 1 && c.seq_len >= 1 && c.train_file >= 0 &&
              c.train_position >= 0 && c.val_file >= 0 && c.val_position >= 0,
          "checkpoint " + path +
              ": step, batch, sequence length or data position out of range; "
              "the file is corrupt");
  return c;
}

}  // namespace mpf

#include "checkpoint/checkpoint_info.hpp"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <variant>
#include <vector>

#include "core/error.hpp"
#include "io/input_file.hpp"
#include "model/tensors.hpp"

namespace mpf {

namespace {

struct Hex {
  uint64_t* value;
};
using Ref = std::variant<int*, int64_t*, Hex, float*, bool*>;
struct Field {
  std::string key;
  Ref ref;
};

// The fixed fields, in the order written (the settings follow the model's sizes, then the data's
// positions, then the checksums). One table serves writing and reading.
std::vector<Field> head_fields(CheckpointInfo& c) {
  std::vector<Field> f = {
      {"format", &c.format},
      {"step", &c.step},
      {"model.max_seq_len", &c.model.max_seq_len},
      {"model.vocab", &c.model.vocab},
      {"model.padded_vocab", &c.model.padded_vocab},
      {"model.layers", &c.model.layers},
      {"model.heads", &c.model.heads},
      {"model.channels", &c.model.channels},
  };
  return f;
}

// A Llama-family model's fields, after the sizes; a GPT-2 checkpoint has none (nor model.arch).
std::vector<Field> llama_fields(CheckpointInfo& c) {
  GPTConfig& m = c.model;
  return {
      {"model.kv_heads", &m.kv_heads},
      {"model.ffn_dim", &m.ffn_dim},
      {"model.norm_eps", &m.norm_eps},
      {"model.rope_theta", &m.rope_theta},
      {"model.rope_factor", &m.rope_factor},
      {"model.rope_low_freq_factor", &m.rope_low_freq_factor},
      {"model.rope_high_freq_factor", &m.rope_high_freq_factor},
      {"model.rope_original_max_pos", &m.rope_original_max_pos},
      {"model.tied", &m.tied},
  };
}

// The fields only some models have, absent from checkpoints written before them: a sliding
// window, a head size apart from C/NH, the experts. `held`: only those the model has.
std::vector<Field> optional_model_fields(CheckpointInfo& c, bool held) {
  GPTConfig& m = c.model;
  std::vector<Field> out;
  if (!held || m.sliding_window > 0) out.push_back({"model.sliding_window", &m.sliding_window});
  if (!held || m.head_dim > 0) out.push_back({"model.head_dim", &m.head_dim});
  if (!held || m.moe()) {
    out.push_back({"model.experts", &m.experts});
    out.push_back({"model.experts_per_token", &m.experts_per_token});
    out.push_back({"model.moe_renormalize", &m.moe_renormalize});
    out.push_back({"model.moe_aux_coef", &m.moe_aux_coef});
  }
  if (!held || m.shared_expert()) out.push_back({"model.shared_ffn", &m.shared_ffn});
  if (!held || m.features().moe_choice_bias) {  // DeepSeekMoE's routing
    out.push_back({"model.moe_sigmoid", &m.moe_sigmoid});
    out.push_back({"model.moe_noaux", &m.moe_noaux});
    out.push_back({"model.moe_groups", &m.moe_groups});
    out.push_back({"model.moe_topk_groups", &m.moe_topk_groups});
    out.push_back({"model.moe_scale", &m.moe_scale});
  }
  if (!held || m.no_qkv_bias) out.push_back({"model.no_qkv_bias", &m.no_qkv_bias});
  if (!held || m.mixed()) {  // dense blocks before the experts' (first_k_dense_replace)
    out.push_back({"model.dense_layers", &m.dense_layers});
    out.push_back({"model.dense_ffn", &m.dense_ffn});
  }
  if (!held || m.mla()) {  // multi-head latent attention's sizes (deepseek_v3)
    out.push_back({"model.q_lora_rank", &m.q_lora_rank});
    out.push_back({"model.kv_lora_rank", &m.kv_lora_rank});
    out.push_back({"model.qk_nope_dim", &m.qk_nope_dim});
    out.push_back({"model.qk_rope_dim", &m.qk_rope_dim});
    out.push_back({"model.v_head_dim", &m.v_head_dim});
    out.push_back({"model.rope_interleave", &m.rope_interleave});
  }
  if (!held || m.mtp > 0) out.push_back({"model.mtp", &m.mtp});  // multi-token prediction
  if (!held || m.rope_yarn) {  // YaRN's rope scaling, beside rope_factor and the original context
    out.push_back({"model.rope_yarn", &m.rope_yarn});
    out.push_back({"model.yarn_beta_fast", &m.yarn_beta_fast});
    out.push_back({"model.yarn_beta_slow", &m.yarn_beta_slow});
    out.push_back({"model.yarn_mscale", &m.yarn_mscale});
    out.push_back({"model.yarn_mscale_all_dim", &m.yarn_mscale_all_dim});
  }
  return out;
}

// The data's positions, after the settings.
std::vector<Field> position_fields(CheckpointInfo& c) {
  std::vector<Field> f = {
      {"data.train_tokens", &c.train_data_tokens},
      {"data.train_file", &c.train_file},
      {"data.train_position", &c.train_position},
      {"data.tokens_seen", &c.tokens_seen},
      {"data.val_file", &c.val_file},
      {"data.val_position", &c.val_position},
  };
  for (int i = 0; i < kNumParameterTensors; ++i) {
    if (!present(TensorId(i), c.model)) continue;  // a tensor the family does not have
    const std::string t = kTensors[i].name;
    f.push_back({"checksum.model." + t, Hex{&c.params_checksum[i]}});
    f.push_back({"checksum.m." + t, Hex{&c.m_checksum[i]}});
    f.push_back({"checksum.v." + t, Hex{&c.v_checksum[i]}});
  }
  return f;
}

std::string format(const Ref& ref) {
  if (auto p = std::get_if<int*>(&ref)) return std::to_string(**p);
  if (auto p = std::get_if<int64_t*>(&ref)) return std::to_string(**p);
  if (auto p = std::get_if<bool*>(&ref)) return **p ? "1" : "0";
  char buf[32];
  if (auto p = std::get_if<float*>(&ref)) {
    std::snprintf(buf, sizeof buf, "%.9g", double(**p));  // 9 digits: the same float back
    return buf;
  }
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, *std::get<Hex>(ref).value);
  return buf;
}

// Parses `text` into the field; false if malformed.
bool parse(const std::string& text, const Ref& ref) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  if (auto p = std::get_if<int*>(&ref)) {
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (v < INT32_MIN || v > INT32_MAX) return false;
    **p = int(v);
  } else if (auto p = std::get_if<int64_t*>(&ref)) {
    **p = std::strtoll(text.c_str(), &end, 10);
  } else if (auto p = std::get_if<float*>(&ref)) {
    **p = std::strtof(text.c_str(), &end);
  } else if (auto p = std::get_if<bool*>(&ref)) {
    if (text != "0" && text != "1") return false;
    **p = text == "1";
    return true;
  } else {
    *std::get<Hex>(ref).value = std::strtoull(text.c_str(), &end, 16);
  }
  return errno == 0 && *end == '\0';
}

// outliers.loss = 5.1,5.0,...: every value as the double it was (17 digits).
std::string format_list(const std::vector<double>& values) {
  std::string out;
  char buf[32];
  for (const double v : values) {
    std::snprintf(buf, sizeof buf, "%.17g", v);
    out += (out.empty() ? "" : ",") + std::string(buf);
  }
  return out;
}

bool parse_list(const std::string& text, std::vector<double>& values) {
  values.clear();
  if (text.empty()) return true;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || errno != 0 || *end != '\0') return false;
    values.push_back(v);
    at = comma + 1;
  }
  return true;
}

const char* const kOutlierKeys[] = {"outliers.loss", "outliers.norm", "outliers.skipped"};

bool is_fixed(CheckpointInfo& c, const std::string& key) {
  if (key == "model.arch") return true;
  for (const char* k : kOutlierKeys) {
    if (key == k) return true;
  }
  for (const auto& fields :
       {head_fields(c), llama_fields(c), optional_model_fields(c, false), position_fields(c)}) {
    for (const Field& f : fields) {
      if (f.key == key) return true;
    }
  }
  return false;
}

}  // namespace

std::string to_text(const CheckpointInfo& info) {
  CheckpointInfo c = info;
  std::string out =
      "# mpiformer checkpoint: the training state after step " + std::to_string(c.step) +
      " that is not a tensor.\n# Parameters: the llm.c model file beside this one; AdamW's m and "
      "v: the optimizer file.\n";
  for (const Field& f : head_fields(c)) out += f.key + " = " + format(f.ref) + "\n";
  if (c.model.llama()) {
    out += std::string("model.arch = ") + arch_name(c.model.arch) + "\n";
    for (const Field& f : llama_fields(c)) out += f.key + " = " + format(f.ref) + "\n";
    for (const Field& f : optional_model_fields(c, true))
      out += f.key + " = " + format(f.ref) + "\n";
  }
  for (const auto& [key, value] : c.settings) out += key + " = " + value + "\n";
  for (const Field& f : position_fields(c)) out += f.key + " = " + format(f.ref) + "\n";
  out += "outliers.loss = " + format_list(c.loss_window) + "\n";
  out += "outliers.norm = " + format_list(c.norm_window) + "\n";
  out += "outliers.skipped = " + std::to_string(c.skipped_updates) + "\n";
  return out;
}

std::optional<std::string> setting(const CheckpointInfo& info, const std::string& key) {
  for (const auto& [k, value] : info.settings) {
    if (k == key) return value;
  }
  return std::nullopt;
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  // A state file is a few hundred lines; 64 MB is far past any.
  return parse_checkpoint_info(
      read_input_text(path, "checkpoint " + path,
                      "a checkpoint's state file (the checkpoint is incomplete?)",
                      int64_t(64) << 20),
      path);
}

CheckpointInfo parse_checkpoint_info(const std::string& text, const std::string& path) {
  std::istringstream in(text);
  std::vector<std::pair<std::string, std::string>> lines;  // in the file's order
  std::map<std::string, std::string> values;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find(" = ");
    require(eq != std::string::npos, "checkpoint " + path + ": malformed line '" +
                                         line.substr(0, 60) + "'; the file is corrupt");
    lines.emplace_back(line.substr(0, eq), line.substr(eq + 3));
    values[lines.back().first] = lines.back().second;
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
  auto read_fields = [&](const std::vector<Field>& fields) {
    for (const Field& f : fields) {
      const auto it = values.find(f.key);
      require(it != values.end(), "checkpoint " + path + ": field '" + f.key +
                                      "' is missing; the file is truncated or corrupt");
      require(parse(it->second, f.ref), "checkpoint " + path + ": field '" + f.key + "' = '" +
                                            it->second + "' is malformed; the file is corrupt");
    }
  };
  read_fields(head_fields(c));
  const auto arch = values.find("model.arch");
  if (arch != values.end()) {
    require(parse_arch(arch->second, c.model.arch) && c.model.arch != Arch::kGpt2,
            "checkpoint " + path + ": model.arch '" + arch->second +
                "' is not an architecture this mpiformer knows");
    read_fields(llama_fields(c));
    // Absent from checkpoints written before them, and from models without them.
    for (const Field& f : optional_model_fields(c, false)) {
      const auto it = values.find(f.key);
      if (it == values.end()) continue;
      require(parse(it->second, f.ref),
              "checkpoint " + path + ": field '" + f.key + "' is malformed; the file is corrupt");
    }
  }
  read_fields(position_fields(c));  // after the model: which tensors have checksums
  // The outlier windows: absent from checkpoints written before them (empty windows then).
  const auto window = [&](const char* key, std::vector<double>& into) {
    const auto it = values.find(key);
    require(it == values.end() || parse_list(it->second, into),
            "checkpoint " + path + ": field '" + key + "' is malformed; the file is corrupt");
  };
  window("outliers.loss", c.loss_window);
  window("outliers.norm", c.norm_window);
  const auto skipped = values.find("outliers.skipped");
  require(skipped == values.end() ||
              (parse(skipped->second, &c.skipped_updates) && c.skipped_updates >= 0),
          "checkpoint " + path + ": field 'outliers.skipped' is malformed; the file is corrupt");
  // Everything else is a setting; the trainer's table checks those it needs.
  for (const auto& kv : lines) {
    if (!is_fixed(c, kv.first)) c.settings.push_back(kv);
  }
  validate(c.model, "checkpoint " + path);
  require(c.step >= 1 && c.train_file >= 0 && c.train_position >= 0 && c.val_file >= 0 &&
              c.val_position >= 0,
          "checkpoint " + path + ": step or data position out of range; the file is corrupt");
  return c;
}

}  // namespace mpf

#include "checkpoint/hf_checkpoint.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "checkpoint/state_files.hpp"
#include "core/error.hpp"
#include "core/transfer.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "io/parallel_file.hpp"
#include "parallel/agreement.hpp"

namespace mpf {

namespace {

using safetensors::Reader;
using safetensors::TensorEntry;

constexpr const char* kHfConfig = "config.json";
constexpr const char* kHfGenerationConfig = "generation_config.json";
constexpr const char* kHfModelFile = "model.safetensors";
constexpr const char* kHfIndexFile = "model.safetensors.index.json";
constexpr const char* kHfTokenizer = "tokenizer.json";
// A block read or written at once: 4M floats (16 MB of staging).
constexpr int64_t kHfBlockElements = int64_t(1) << 22;

std::string trimmed_path(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// ---- the files of a source and where each tensor is --------------------------------------------

struct Located {
  const Reader* file = nullptr;
  const TensorEntry* entry = nullptr;
};

class HfSource {
 public:
  explicit HfSource(const std::string& path);
  const std::string& origin() const { return origin_; }
  const std::string& config() const { return config_; }  // "" if none
  Located find(const std::string& name) const {
    const auto it = where_.find(name);
    return it == where_.end() ? Located{} : it->second;
  }
  // "safetensors file X" or "model directory D" for a missing tensor.
  std::string holder() const { return holder_; }
  const std::map<std::string, Located>& tensors() const { return where_; }

 private:
  std::string origin_, config_, holder_;
  std::vector<std::unique_ptr<Reader>> files_;
  std::map<std::string, Located> where_;
};

HfSource::HfSource(const std::string& path_in) : origin_(trimmed_path(path_in)) {
  if (!is_directory(origin_)) {
    files_.push_back(std::make_unique<Reader>(origin_));
    const std::string beside = directory_of(origin_) + "/" + kHfConfig;
    if (path_exists(beside)) config_ = beside;
    holder_ = "safetensors file " + origin_;
    for (const TensorEntry& t : files_[0]->tensors()) where_[t.name] = {files_[0].get(), &t};
    return;
  }
  holder_ = "model directory " + origin_;
  config_ = origin_ + "/" + kHfConfig;
  require(path_exists(config_),
          holder_ + " has no " + kHfConfig +
              "; pass a Hugging Face model directory (config.json and "
              "model.safetensors); a training checkpoint resumes with --load");
  const std::string index = origin_ + "/" + kHfIndexFile;
  if (!path_exists(index)) {
    require(path_exists(origin_ + "/" + kHfModelFile),
            holder_ + " holds neither " + kHfModelFile + " nor " + kHfIndexFile +
                "; pass a Hugging Face model directory with safetensors weights");
    files_.push_back(std::make_unique<Reader>(origin_ + "/" + kHfModelFile));
    for (const TensorEntry& t : files_[0]->tensors()) where_[t.name] = {files_[0].get(), &t};
    return;
  }
  std::map<std::string, const Reader*> opened;
  for (const auto& [name, file] : safetensors::read_index(index)) {
    const Reader*& reader = opened[file];
    if (reader == nullptr) {
      files_.push_back(std::make_unique<Reader>(origin_ + "/" + file));
      reader = files_.back().get();
    }
    const TensorEntry* entry = reader->find(name);
    require(entry != nullptr, "safetensors index " + index + ": tensor " + name + " is in " + file +
                                  " by its weight_map, but that file does not hold it; " +
                                  "the checkpoint is incomplete or corrupt");
    where_[name] = {reader, entry};
  }
}

// ---- the names: this trainer's tensors as Hugging Face's -------------------------------------

// One Hugging Face tensor holding `rows` consecutive rows of one of this trainer's tensors (one
// layer's slice); `transposed`: stored (cols, rows), as GPT-2's Conv1D weights are.
struct HfPiece {
  std::string name;
  int64_t rows = 0;
  bool transposed = false;
};

// The config of the blocks that hold t: a mixed model's dense MLP (dfcw, dfcprojw) has the dense
// blocks' shape; every other tensor one shape in all the blocks holding it.
GPTConfig held_config(TensorId t, const GPTConfig& cfg) {
  return tensor_spec(t).needs == Needs::kDenseBlocks ? cfg.block_config(0) : cfg;
}
// The first layer holding per-layer tensor t: the serial tensor's slices start there, one per
// layer (a mixed model's experts' tensors from its first experts' block on).
int first_layer_of(TensorId t, const GPTConfig& cfg) {
  if (tensor_spec(t).needs == Needs::kMtp) return cfg.layers;  // the modules' blocks
  return tensor_spec(t).per_layer() && !present_in_block(t, cfg, 0) ? cfg.dense_layers : 0;
}

// The serial shape of one layer's slice of t: the unpadded vocabulary rows.
int64_t rows_of(TensorId t, const GPTConfig& cfg) {
  return dim_size(tensor_spec(t).rows, held_config(t, cfg), /*padded=*/false);
}
int64_t cols_of(TensorId t, const GPTConfig& cfg) {
  return dim_size(tensor_spec(t).cols, held_config(t, cfg));
}

// GPT2LMHeadModel's names, without the "transformer." prefix; %d is the layer.
struct Gpt2Name {
  const char* name;
  bool conv1d;  // a Conv1D weight, stored (in, out)
};
constexpr Gpt2Name kGpt2Names[kNumParameterTensors] = {
    {"wte.weight", false},
    {"wpe.weight", false},
    {"h.%d.ln_1.weight", false},
    {"h.%d.ln_1.bias", false},
    {"h.%d.attn.c_attn.weight", true},
    {"h.%d.attn.c_attn.bias", false},
    {"h.%d.attn.c_proj.weight", true},
    {"h.%d.attn.c_proj.bias", false},
    {"h.%d.ln_2.weight", false},
    {"h.%d.ln_2.bias", false},
    {"h.%d.mlp.c_fc.weight", true},
    {"h.%d.mlp.c_fc.bias", false},
    {"h.%d.mlp.c_proj.weight", true},
    {"h.%d.mlp.c_proj.bias", false},
    {"ln_f.weight", false},
    {"ln_f.bias", false},
    {"", false},  // lmhead, q_normw, k_normw, routerw, sfcw, sfcprojw, sgatew and the latent
    {"", false},  // attention's six: GPT-2 has none
    {"", false},
    {"", false},
    {"", false},
    {"", false},
    {"", false},
    {"", false},
    {"", false},
    {"", false},
    {"", false},
    {"", false},
    {"", false},
    {"", false},
    {"", false},  // dfcw, dfcprojw
    {"", false},
};

// The names of the families of Llama blocks (LlamaForCausalLM's; Qwen2's adds the Q, K, V
// biases). Several of their tensors stack into one of ours (shared decision in model/tensors.hpp):
// qkvw = [q_proj | k_proj | v_proj], fcw = [gate_proj | up_proj], which Phi-3 stores fused as
// qkv_proj and gate_up_proj, in the same row order.
std::vector<const char*> llama_names(TensorId t, const ModelFeatures& f) {
  switch (t) {
    case TensorId::wte:
      return {"model.embed_tokens.weight"};
    case TensorId::ln1w:  // the attention's norm, before it or after it (OLMo-2)
      if (f.norm_placement == NormPlacement::kPost)
        return {"model.layers.%d.post_attention_layernorm.weight"};
      return {"model.layers.%d.input_layernorm.weight"};
    case TensorId::qkvw:
      if (f.fused_hf_projections) return {"model.layers.%d.self_attn.qkv_proj.weight"};
      return {"model.layers.%d.self_attn.q_proj.weight", "model.layers.%d.self_attn.k_proj.weight",
              "model.layers.%d.self_attn.v_proj.weight"};
    case TensorId::qkvb:
      return {"model.layers.%d.self_attn.q_proj.bias", "model.layers.%d.self_attn.k_proj.bias",
              "model.layers.%d.self_attn.v_proj.bias"};
    case TensorId::attprojw:
      return {"model.layers.%d.self_attn.o_proj.weight"};
    case TensorId::ln2w:  // the MLP's
      if (f.norm_placement == NormPlacement::kPost)
        return {"model.layers.%d.post_feedforward_layernorm.weight"};
      return {"model.layers.%d.post_attention_layernorm.weight"};
    case TensorId::fcw:
      if (f.fused_hf_projections) return {"model.layers.%d.mlp.gate_up_proj.weight"};
      return {"model.layers.%d.mlp.gate_proj.weight", "model.layers.%d.mlp.up_proj.weight"};
    case TensorId::fcprojw:
    case TensorId::dfcprojw:  // a mixed model's dense blocks' MLP, named as a dense model's
      return {"model.layers.%d.mlp.down_proj.weight"};
    case TensorId::dfcw:
      return {"model.layers.%d.mlp.gate_proj.weight", "model.layers.%d.mlp.up_proj.weight"};
    case TensorId::lnfw:
      return {"model.norm.weight"};
    case TensorId::lmhead:
      return {"lm_head.weight"};
    case TensorId::q_normw:
      return {"model.layers.%d.self_attn.q_norm.weight"};
    case TensorId::k_normw:
      return {"model.layers.%d.self_attn.k_norm.weight"};
    case TensorId::routerw:
      if (f.hf_block_sparse_moe) return {"model.layers.%d.block_sparse_moe.gate.weight"};
      return {"model.layers.%d.mlp.gate.weight"};
    case TensorId::sfcw:
      if (!f.shared_expert_gate)  // DeepSeekMoE's shared_experts: n_shared of them as one SwiGLU
        return {"model.layers.%d.mlp.shared_experts.gate_proj.weight",
                "model.layers.%d.mlp.shared_experts.up_proj.weight"};
      return {"model.layers.%d.mlp.shared_expert.gate_proj.weight",
              "model.layers.%d.mlp.shared_expert.up_proj.weight"};
    case TensorId::sfcprojw:
      if (!f.shared_expert_gate) return {"model.layers.%d.mlp.shared_experts.down_proj.weight"};
      return {"model.layers.%d.mlp.shared_expert.down_proj.weight"};
    case TensorId::sgatew:
      return {"model.layers.%d.mlp.shared_expert_gate.weight"};
    case TensorId::qaw:  // DeepSeek-V3's latent attention
      return {"model.layers.%d.self_attn.q_a_proj.weight"};
    case TensorId::qanw:
      return {"model.layers.%d.self_attn.q_a_layernorm.weight"};
    case TensorId::qbw:  // q_proj when there is no query rank (NameMap::pieces)
      return {"model.layers.%d.self_attn.q_b_proj.weight"};
    case TensorId::kvaw:
      return {"model.layers.%d.self_attn.kv_a_proj_with_mqa.weight"};
    case TensorId::kvanw:
      return {"model.layers.%d.self_attn.kv_a_layernorm.weight"};
    case TensorId::kvbw:
      return {"model.layers.%d.self_attn.kv_b_proj.weight"};
    case TensorId::moebias:
      return {"model.layers.%d.mlp.gate.e_score_correction_bias"};
    case TensorId::mtpenw:  // DeepSeek-V3's multi-token prediction modules, model.layers.{L+k-1}
      return {"model.layers.%d.enorm.weight"};
    case TensorId::mtphnw:
      return {"model.layers.%d.hnorm.weight"};
    case TensorId::mtpehw:
      return {"model.layers.%d.eh_proj.weight"};
    case TensorId::mtpshw:
      return {"model.layers.%d.shared_head.norm.weight"};
    default:
      return {};  // a tensor these families do not hold
  }
}

// A mixture of experts' MLP tensors, one name per expert (layer, expert): fcw = each expert's
// [gate | up], fcprojw each one's down projection, stacked expert by expert.
std::vector<const char*> expert_names(TensorId t, const ModelFeatures& f) {
  const bool mixtral = f.hf_block_sparse_moe;
  if (t == TensorId::fcw) {
    if (mixtral)
      return {"model.layers.%d.block_sparse_moe.experts.%d.w1.weight",
              "model.layers.%d.block_sparse_moe.experts.%d.w3.weight"};
    return {"model.layers.%d.mlp.experts.%d.gate_proj.weight",
            "model.layers.%d.mlp.experts.%d.up_proj.weight"};
  }
  if (mixtral) return {"model.layers.%d.block_sparse_moe.experts.%d.w2.weight"};
  return {"model.layers.%d.mlp.experts.%d.down_proj.weight"};
}

class NameMap {
 public:
  NameMap(const GPTConfig& cfg, std::string prefix) : cfg_(cfg), prefix_(std::move(prefix)) {}
  // The pieces of layer `layer`'s slice of t (layer 0 for a tensor that is not per layer).
  std::vector<HfPiece> pieces(TensorId t, int layer) const {
    char name[128];
    if (!cfg_.llama()) {
      const Gpt2Name& n = kGpt2Names[int(t)];
      std::snprintf(name, sizeof name, n.name, layer);
      return {{prefix_ + name, rows_of(t, cfg_), n.conv1d}};
    }
    if (cfg_.moe() && (t == TensorId::fcw || t == TensorId::fcprojw)) {
      const std::vector<const char*> names = expert_names(t, cfg_.features());
      const int64_t rows = t == TensorId::fcw ? cfg_.ffn_width() : cfg_.channels;
      std::vector<HfPiece> out;
      for (int e = 0; e < cfg_.experts; ++e) {
        for (const char* n : names) {
          std::snprintf(name, sizeof name, n, layer, e);
          out.push_back({name, rows, false});
        }
      }
      return out;
    }
    std::vector<const char*> names = llama_names(t, cfg_.features());
    if (t == TensorId::qbw && cfg_.q_lora_rank == 0)
      names = {"model.layers.%d.self_attn.q_proj.weight"};
    // The stacked row blocks: Q, K, V (NH·hs, KVH·hs, KVH·hs); gate, up (F each).
    const std::vector<int64_t> rows = names.size() > 1
                                          ? row_blocks(tensor_spec(t), held_config(t, cfg_))
                                          : std::vector<int64_t>{rows_of(t, cfg_)};
    std::vector<HfPiece> out;
    for (size_t i = 0; i < names.size(); ++i) {
      std::snprintf(name, sizeof name, names[i], layer);
      out.push_back({name, rows[i], false});
    }
    return out;
  }
  // A tied head stored anyway (transformers' GPT-2 files may hold it).
  std::string lm_head() const { return "lm_head.weight"; }
  // A piece's shape as stored.
  std::vector<int64_t> shape(TensorId t, const HfPiece& p) const {
    const int64_t cols = cols_of(t, cfg_);
    if (p.transposed) return {cols, p.rows};
    if (cols == 1) return {p.rows};
    return {p.rows, cols};
  }

 private:
  GPTConfig cfg_;
  std::string prefix_;
};

// Names with or without the "transformer." prefix, as the file has them.
NameMap name_map(const HfSource& source, const GPTConfig& cfg) {
  const bool bare = !source.find("transformer.wte.weight").entry && source.find("wte.weight").entry;
  return NameMap(cfg, bare ? "" : "transformer.");
}

int layers_of(TensorId t, const GPTConfig& cfg) {
  return tensor_spec(t).per_layer() ? cfg.blocks() : 1;
}

// The Q, K, V biases the file holds for a model built without them (Qwen2-MoE's qkv_bias false):
// transformers does not use them, and neither does this trainer.
std::set<std::string> dropped_biases(const HfSource& source, const GPTConfig& cfg) {
  std::set<std::string> out;
  if (!cfg.no_qkv_bias) return out;
  GPTConfig with = cfg;
  with.no_qkv_bias = false;
  const NameMap names = name_map(source, with);
  for (int l = 0; l < cfg.layers; ++l) {
    for (const HfPiece& p : names.pieces(TensorId::qkvb, l)) {
      if (source.find(p.name).entry) out.insert(p.name);
    }
  }
  return out;
}

// The tensors of the multi-token prediction modules a deepseek_v3 file carries after its blocks
// (every model.layers.{L+k-1}.* for k = 1..num_nextn_predict_layers: enorm, hnorm, eh_proj,
// shared_head, the module's block, and the copies of the embedding and head some files hold)
// that the model does not read: the modules past cfg.mtp (--mtp) whole, passed over, neither read
// nor refused (hf_unused_mtp says so), and in the modules it trains the copies of the shared
// embedding and head (embed_tokens, shared_head.head: the model's own are read).
std::set<std::string> mtp_tensors(const HfSource& source, const GPTConfig& cfg) {
  std::set<std::string> out;
  if (!cfg.mla() || source.config().empty()) return out;
  const int depth = read_hf_mtp_depth(source.config());
  const auto ends_with = [](const std::string& name, const std::string& tail) {
    return name.size() >= tail.size() &&
           name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (int l = cfg.layers; l < cfg.layers + depth; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    for (auto it = source.tensors().lower_bound(prefix);
         it != source.tensors().end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      if (l >= cfg.blocks() || ends_with(it->first, ".embed_tokens.weight") ||
          ends_with(it->first, ".shared_head.head.weight"))
        out.insert(it->first);
    }
  }
  return out;
}

// Every tensor the model needs is there with its shape; lm_head.weight, if there, is wte's shape.
void check_tensors(const HfSource& source, const GPTConfig& cfg, const std::string& cfg_origin) {
  const NameMap names = name_map(source, cfg);
  auto check = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const Located at = source.find(name);
    require(at.entry != nullptr, source.holder() + ": tensor " + name + " is missing; " +
                                     cfg_origin + " (" + describe(cfg) + ") needs it");
    require(at.entry->shape == shape, "safetensors file " + at.file->path() + ": tensor " + name +
                                          " has shape " + safetensors::shape_text(at.entry->shape) +
                                          " but " + cfg_origin + " (" + describe(cfg) +
                                          ") makes it " + safetensors::shape_text(shape) +
                                          "; pass the matching config or sizes");
    require(at.entry->dtype == "F32" || at.entry->dtype == "BF16" || at.entry->dtype == "F16",
            "safetensors file " + at.file->path() + ": tensor " + name + " is " + at.entry->dtype +
                "; weights are read from F32, BF16 or F16");
  };
  std::set<std::string> read{names.lm_head()};
  for (const TensorSpec& s : kTensors) {
    if (tensor_size(s.id, cfg) == 0) continue;
    for (int l = 0; l < layers_of(s.id, cfg); ++l) {
      if (s.per_layer() && !present_in_block(s.id, cfg, l)) continue;  // a mixed model's
      for (const HfPiece& p : names.pieces(s.id, l)) {
        check(p.name, names.shape(s.id, p));
        read.insert(p.name);
      }
    }
  }
  if (cfg.tied && source.find(names.lm_head()).entry) {
    check(names.lm_head(), names.shape(TensorId::wte, names.pieces(TensorId::wte, 0)[0]));
  }
  // A tensor the model would not read is a model other than the config's (more layers, biases):
  // refused, not dropped. Only the buffers transformers' files may hold are not weights: GPT-2's
  // causal masks (attn.bias, attn.masked_bias) and an older Llama's rotary_emb.inv_freq.
  const auto is_buffer = [](const std::string& name) {
    for (const std::string suffix : {".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq"}) {
      if (name.size() >= suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        return true;
    }
    return false;
  };
  const std::set<std::string> dropped = dropped_biases(source, cfg);
  const std::set<std::string> mtp = mtp_tensors(source, cfg);
  for (const auto& [name, at] : source.tensors()) {
    if (read.count(name) || is_buffer(name) || dropped.count(name) || mtp.count(name)) continue;
    throw InputError("safetensors file " + at.file->path() + ": tensor " + name +
                     " is not a tensor of the model of " + cfg_origin + " (" + describe(cfg) +
                     "); the file holds another model (more layers, biases): pass its config "
                     "or sizes");
  }
}

// ---- blocks: a rank's part of a tensor as rectangles inside one Hugging Face tensor ------------

// Rows [row, row + rows) x columns [col0, col1) of layer `layer`'s slice, local elements from
// `local` on (contiguous in the shard).
struct HfRect {
  int layer = 0;
  int64_t row = 0, rows = 0, col0 = 0, col1 = 0, local = 0;
  int64_t width() const { return col1 - col0; }
};

// The shard's runs of t as rectangles, merged where a split leaves the same columns of
// consecutive rows (a row-parallel weight's column slice). `owned`: without the K and V rows of a
// replicated kv head another rank owns (and writes).
std::vector<HfRect> rectangles(const TpShard& shard, TensorId t, bool owned = false) {
  const int64_t R = rows_of(t, shard.cfg), C = cols_of(t, shard.cfg), slice = R * C;
  const int first = first_layer_of(t, shard.cfg);
  std::vector<HfRect> out;
  for (const ShardRun& run : shard_runs(shard, t)) {
    if (owned && run.replica) continue;
    int64_t g = run.global, j = run.local, n = run.length;
    while (n > 0) {
      const int64_t within = g % slice, r = within / C, c = within % C;
      HfRect x{first + int(g / slice), r, 1, c, 0, j};
      if (c == 0 && n >= C) {
        x.rows = std::min(n / C, R - r);
        x.col1 = C;
      } else {
        x.col1 = std::min(C, c + n);
      }
      const int64_t len = x.rows * x.width();
      HfRect* p = out.empty() ? nullptr : &out.back();
      if (p && p->layer == x.layer && p->col0 == x.col0 && p->col1 == x.col1 &&
          p->row + p->rows == x.row && p->local + p->rows * p->width() == x.local) {
        p->rows += x.rows;
      } else {
        out.push_back(x);
      }
      g += len;
      j += len;
      n -= len;
    }
  }
  return out;
}

// A rectangle's part inside one piece, at most kHfBlockElements: rows [row, row + rows) of the
// piece.
struct HfBlock {
  const HfPiece* piece = nullptr;
  int64_t row = 0, rows = 0, col0 = 0, col1 = 0, local = 0;
  int64_t width() const { return col1 - col0; }
  int64_t size() const { return rows * width(); }
};

template <class F>
void for_each_block(const NameMap& names, TensorId t, const std::vector<HfRect>& rects, F&& f) {
  int layer = -1;
  std::vector<HfPiece> pieces;
  for (const HfRect& r : rects) {
    if (r.layer != layer) pieces = names.pieces(t, layer = r.layer);
    const int64_t step = std::max<int64_t>(1, kHfBlockElements / r.width());
    int64_t first = 0;  // the piece's first row in the slice
    for (const HfPiece& p : pieces) {
      const int64_t lo = std::max(r.row, first), hi = std::min(r.row + r.rows, first + p.rows);
      for (int64_t row = lo; row < hi; row += step) {
        const int64_t rows = std::min(step, hi - row);
        f(HfBlock{&p, row - first, rows, r.col0, r.col1, r.local + (row - r.row) * r.width()});
      }
      first += p.rows;
    }
  }
}

// dst (cols, rows) = src (rows, cols) transposed, in tiles that stay in cache (a Conv1D weight of
// GPT-2 124M is 768 x 3072).
void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  constexpr int64_t kTile = 32;
  for (int64_t i0 = 0; i0 < rows; i0 += kTile) {
    for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
      const int64_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
      for (int64_t i = i0; i < i1; ++i) {
        for (int64_t j = j0; j < j1; ++j) dst[j * rows + i] = src[i * cols + j];
      }
    }
  }
}

// The block's elements, row-major (rows x width) in this trainer's orientation, from the file.
void read_block(const Located& at, const HfBlock& b, int64_t cols, std::vector<float>& scratch,
                float* out) {
  const Reader& f = *at.file;
  const TensorEntry& e = *at.entry;
  const int64_t w = b.width();
  if (!b.piece->transposed) {
    if (w == cols) {
      f.read(e, b.row * cols, b.size(), out);
    } else {
      for (int64_t i = 0; i < b.rows; ++i) f.read(e, (b.row + i) * cols + b.col0, w, out + i * w);
    }
    return;
  }
  // Stored (cols, rows): the block is columns [row, row + rows) of stored rows [col0, col1).
  const int64_t R = b.piece->rows;
  scratch.resize(size_t(b.size()));
  if (b.rows == R) {
    f.read(e, b.col0 * R, b.size(), scratch.data());
  } else {
    for (int64_t c = 0; c < w; ++c) {
      f.read(e, (b.col0 + c) * R + b.row, b.rows, scratch.data() + c * b.rows);
    }
  }
  transpose(scratch.data(), w, b.rows, out);
}

// "(row, col)" of a block's element k as the file stores it, for messages.
std::string stored_index(const HfBlock& b, int64_t k) {
  int64_t r = b.row + k / b.width(), c = b.col0 + k % b.width();
  if (b.piece->transposed) std::swap(r, c);
  return "(" + std::to_string(r) + ", " + std::to_string(c) + ")";
}

void read_shard(const HfSource& source, const GPTConfig& cfg, const TpShard& shard,
                Parameters& params) {
  const NameMap names = name_map(source, cfg);
  const Located lm_head = cfg.tied ? source.find(names.lm_head()) : Located{};
  std::vector<float> block, scratch, head;
  for (const TensorSpec& s : kTensors) {
    if (!shard.holds(s.id) || tensor_size(s.id, cfg) == 0) continue;
    const int64_t cols = cols_of(s.id, cfg);
    for_each_block(names, s.id, rectangles(shard, s.id), [&](const HfBlock& b) {
      const Located at = source.find(b.piece->name);
      block.resize(size_t(b.size()));
      read_block(at, b, cols, scratch, block.data());
      for (int64_t k = 0; k < b.size(); ++k) {
        if (std::isfinite(block[size_t(k)])) continue;
        throw InputError("safetensors file " + at.file->path() + ": tensor " + b.piece->name +
                         ": element " + stored_index(b, k) +
                         " is not finite (NaN or Inf); a model cannot train from it");
      }
      // A tied head is the token embedding: a separate lm_head.weight must be the same.
      if (s.id == TensorId::wte && lm_head.entry) {
        head.resize(block.size());
        read_block(lm_head, b, cols, scratch, head.data());
        for (int64_t k = 0; k < b.size(); ++k) {
          if (std::memcmp(&head[size_t(k)], &block[size_t(k)], sizeof(float)) == 0) continue;
          throw InputError("safetensors file " + lm_head.file->path() + ": tensor " +
                           names.lm_head() + " differs from " + b.piece->name + " at " +
                           stored_index(b, k) +
                           "; the model ties them: drop lm_head.weight or make it equal");
        }
      }
      params.layout.for_each_run(
          s.id, b.local, b.size(), [&](int64_t j, int64_t offset, int64_t n) {
            copy_from_host(params.slab.data() + offset, block.data() + (j - b.local),
                           size_t(n) * sizeof(float), "h2d init-from");
          });
    });
  }
}

// ---- writing ---------------------------------------------------------------------------------

// The saved file's tensors in the table's order, every layer's together: GPT2LMHeadModel's names
// with the prefix its state dict has; the tied head is not stored (transformers ties it on
// load).
struct SavedTensor {
  TensorId id;
  int layer;
  HfPiece piece;
};

std::vector<SavedTensor> saved_tensors(const NameMap& names, const GPTConfig& cfg) {
  std::vector<SavedTensor> out;
  auto add = [&](TensorId t, int layer) {
    for (const HfPiece& p : names.pieces(t, layer)) out.push_back({t, layer, p});
  };
  for (const TensorSpec& s : kTensors) {
    if (!s.per_layer() && tensor_size(s.id, cfg) > 0) add(s.id, 0);
    if (s.id == TensorId::wpe) {  // then the blocks, each whole (the MTP modules' last)
      for (int l = 0; l < cfg.blocks(); ++l) {
        for (const TensorSpec& b : kTensors) {
          if (b.per_layer() && present_in_block(b.id, cfg, l) && tensor_size(b.id, cfg) > 0)
            add(b.id, l);
        }
      }
    }
  }
  return out;
}

void write_small_file(const std::string& path, const std::string& text, std::string& error) {
  if (!error.empty()) return;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) error = path + ": write failed (" + std::strerror(errno) + ")";
}

// `from`'s bytes, unchanged, into `to`.
void copy_small_file(const std::string& from, const std::string& to, std::string& error) {
  if (!error.empty()) return;
  std::string bytes;
  try {
    bytes = read_input_text(from, from, "a tokenizer.json to copy", int64_t(1) << 30);
  } catch (const InputError& e) {
    error = std::string(e.what()) + " (to copy into " + to + ")";
    return;
  }
  write_small_file(to, bytes, error);
}

void remove_directory(const std::string& dir) {
  for (const char* f : {kHfConfig, kHfGenerationConfig, kHfModelFile, kHfTokenizer}) {
    std::remove((dir + "/" + f).c_str());
  }
  rmdir(dir.c_str());
}

}  // namespace

bool is_hf_source(const std::string& path) {
  if (is_directory(path)) return true;
  // By its name first: an empty or damaged .safetensors is one to report as such, not an llm.c
  // file.
  if (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0) return true;
  struct stat st;
  // A missing file, or not a regular one: by its name (the reader then names the problem).
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
  }
  int64_t bytes = 0;
  const File f = open_for_reading(path, "--init-from " + path, "a model file or directory", bytes);
  unsigned char head[9] = {};
  const size_t n = std::fread(head, 1, sizeof head, f.get());
  return n == sizeof head && head[8] == '{';
}

std::optional<GPTConfig> hf_source_config(const std::string& path) {
  const HfSource source(path);
  if (source.config().empty()) return std::nullopt;
  return read_hf_config(source.config());
}

int hf_source_mtp_depth(const std::string& path) {
  const HfSource source(path);
  return source.config().empty() ? 0 : read_hf_mtp_depth(source.config());
}

std::string hf_unused_biases(const std::string& path, const GPTConfig& cfg) {
  const HfSource source(path);
  const std::set<std::string> dropped = dropped_biases(source, cfg);
  if (dropped.empty()) return "";
  return "--init-from " + path + ": config.json's qkv_bias is false, so the file's " +
         std::to_string(dropped.size()) + " Q, K and V bias tensors (" + *dropped.begin() +
         ", ...) are not used: the model has no attention biases, as transformers builds it";
}

std::string hf_unused_mtp(const std::string& path, const GPTConfig& cfg) {
  const HfSource source(path);
  if (!cfg.mla() || source.config().empty()) return "";
  const int depth = read_hf_mtp_depth(source.config());
  if (depth <= cfg.mtp) return "";
  const std::set<std::string> mtp = mtp_tensors(source, cfg);
  int unused = 0;  // the passed-over modules' tensors, not the trained modules' copies
  const size_t at = std::string("model.layers.").size();
  for (const std::string& name : mtp) unused += std::atoi(name.c_str() + at) >= cfg.blocks();
  return "--init-from " + path + ": config.json's num_nextn_predict_layers is " +
         std::to_string(depth) + " and --mtp " + std::to_string(cfg.mtp) + " trains " +
         (cfg.mtp == 0 ? "none" : "the first " + std::to_string(cfg.mtp)) +
         " of its multi-token prediction modules: the file's " + std::to_string(unused) +
         " tensors of the untrained ones (model.layers." + std::to_string(cfg.blocks()) + ".*" +
         (depth - cfg.mtp > 1 ? " ..." : "") +
         ") are not read or trained, and --save-hf writes the model without them";
}

std::optional<int> hf_bos_token(const std::string& path) {
  const HfSource source(path);
  return source.config().empty() ? std::nullopt : read_hf_bos_token(source.config());
}

GPTConfig read_hf_model_config(const std::string& path, const std::optional<GPTConfig>& flags_cfg,
                               const std::set<std::string>& given) {
  const HfSource source(path);
  GPTConfig cfg;
  std::string origin;
  if (!source.config().empty()) {
    cfg = read_hf_config(source.config());
    origin = "config " + source.config();
    if (flags_cfg) check_shape_flags(cfg, *flags_cfg, given, origin);
  } else {
    require(flags_cfg.has_value(), source.holder() + " has no " + kHfConfig +
                                       " beside it; put the model's config.json there");
    cfg = *flags_cfg;
    origin = "the flags";
  }
  check_tensors(source, cfg, origin);
  return cfg;
}

void load_hf_model(const std::string& path, const GPTConfig& cfg, const TpShard& shard,
                   Parameters& params, MPI_Comm world) {
  std::string error;
  try {
    const HfSource source(path);
    check_tensors(source, cfg, "the model");
    read_shard(source, cfg, shard, params);
  } catch (const InputError& e) {
    error = e.what();
  }
  error = first_error(world, error);
  require(error.empty(), error);
}

void check_hf_output(const std::string& dir) {
  check_new_output(trimmed_path(dir), "--save-hf " + dir);
}

safetensors::Dtype parse_hf_dtype(const std::string& name) {
  if (name == "f32") return safetensors::Dtype::kF32;
  if (name == "bf16") return safetensors::Dtype::kBF16;
  throw InputError("--save-hf-dtype " + name + " is not a dtype the writer has; use f32 or bf16");
}

std::string save_hf_model(const std::string& dir_in, const Grid& grid, const TpShard& shard,
                          const Parameters& params, safetensors::Dtype dtype,
                          const std::string& tokenizer_json) {
  const std::string dir = trimmed_path(dir_in);
  const MPI_Comm world = grid.world_comm();
  const GPTConfig& cfg = shard.cfg;
  const NameMap names(cfg, "transformer.");  // GPT2LMHeadModel's state dict names
  const std::vector<SavedTensor> saved = saved_tensors(names, cfg);
  std::vector<safetensors::TensorLayout> tensors;
  for (const SavedTensor& t : saved) {
    tensors.push_back({t.piece.name, dtype, names.shape(t.id, t.piece)});
  }
  const safetensors::Layout layout(tensors, {{"format", "pt"}});
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < saved.size(); ++i) index[saved[i].piece.name] = i;

  // Rank 0 makes the partial directory and the small files; the ranks write the weights.
  std::string error, partial;
  if (grid.world_rank() == 0) {
    partial = dir + ".partial-" + std::to_string(getpid());
    if (mkdir(partial.c_str(), 0755) != 0) {
      error = dir + ": cannot create " + partial + " (" + std::strerror(errno) + ")";
      partial.clear();  // not ours to remove
    }
    write_small_file(partial + "/" + kHfConfig, hf_config_json(cfg, dtype), error);
    write_small_file(partial + "/" + kHfGenerationConfig, hf_generation_config_json(cfg), error);
    if (!tokenizer_json.empty()) {
      copy_small_file(tokenizer_json, partial + "/" + kHfTokenizer, error);
    }
  }
  error = broadcast(error, 0, world);
  partial = broadcast(partial, 0, world);
  if (error.empty()) {
    ParallelFile file(world, partial + "/" + kHfModelFile, ParallelFile::Mode::kCreate);
    if (grid.world_rank() == 0) {
      file.write_at(0, layout.header().data(), int64_t(layout.header().size()));
    }
    std::string local;
    std::vector<float> block, stored;
    std::vector<unsigned char> bytes;
    const int64_t width = safetensors::dtype_bytes(dtype);
    for (const TensorSpec& s : kTensors) {
      if (!shard.holds(s.id) || tensor_size(s.id, cfg) == 0) continue;
      if (!writes_parameter(shard, grid.dp_cp_rank(), s.id)) continue;
      const int64_t cols = cols_of(s.id, cfg);
      for_each_block(names, s.id, rectangles(shard, s.id, /*owned=*/true), [&](const HfBlock& b) {
        block.resize(size_t(b.size()));
        params.layout.for_each_run(
            s.id, b.local, b.size(), [&](int64_t j, int64_t offset, int64_t n) {
              copy_to_host(block.data() + (j - b.local), params.slab.data() + offset,
                           size_t(n) * sizeof(float), "d2h save-hf");
            });
        for (int64_t k = 0; k < b.size() && local.empty(); ++k) {
          if (!std::isfinite(block[size_t(k)])) {
            local = "tensor " + b.piece->name + " element " + stored_index(b, k) +
                    " is not finite (NaN or Inf): " + dir + " not written";
          }
        }
        const int64_t at = layout.offset(index.at(b.piece->name));
        const int64_t w = b.width();
        // As stored: rows [row, row + rows) x cols, or for a Conv1D weight stored rows
        // [col0, col1) x columns [row, row + rows).
        const bool t = b.piece->transposed;
        const int64_t segments = t ? w : b.rows, length = t ? b.rows : w;
        const int64_t stride = t ? b.piece->rows : cols;
        const int64_t first = t ? b.col0 * stride + b.row : b.row * cols + b.col0;
        if (t) {
          stored.resize(block.size());
          transpose(block.data(), b.rows, w, stored.data());
        }
        bytes.resize(size_t(b.size() * width));
        safetensors::encode(dtype, t ? stored.data() : block.data(), b.size(), bytes.data());
        if (length == stride) {  // whole stored rows: one stretch
          file.write_at(at + first * width, bytes.data(), b.size() * width);
        } else {
          for (int64_t k = 0; k < segments; ++k) {
            file.write_at(at + (first + k * stride) * width, bytes.data() + k * length * width,
                          length * width);
          }
        }
      });
    }
    file.close();
    const std::string io = file.agree();
    error = first_error(world, local);
    if (error.empty()) error = io;
  }
  if (grid.world_rank() == 0 && !partial.empty()) {
    if (error.empty() && rename_no_replace(partial, dir) != 0) {
      error = dir + ": cannot rename " + partial + " into place (" + std::strerror(errno) + ")";
    }
    if (!error.empty()) remove_directory(partial);
  }
  return broadcast(error, 0, world);
}

}  // namespace mpf

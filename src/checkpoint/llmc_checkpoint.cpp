#include "checkpoint/llmc_checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "checkpoint/checkpoint_info.hpp"
#include "core/error.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"

// The format is little-endian and is read and written with plain memcpy.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "llm.c files are little-endian");

namespace mpf {
namespace {

using llmc::kHeaderBytes;
using llmc::kHeaderInts;

std::string checkpoint_name(const std::string& path) {
  return "checkpoint " + path;
}

File open_llmc_file(const std::string& path, int64_t& bytes) {
  return open_for_reading(path, checkpoint_name(path), "an llm.c model file", bytes);
}

// What a file with an llm.c-style header holds: the model file, or the optimizer state of a
// training checkpoint (its own magic, two floats per parameter).
struct HeaderKind {
  int32_t magic, version;
  int floats_per_parameter;
  const char* name;
};
constexpr HeaderKind kModelFile{llmc::kCheckpointMagic, llmc::kCheckpointVersionFp32, 1,
                                "llm.c GPT-2 model file"};
constexpr HeaderKind kLlamaModelFile{llmc::kLlamaModelMagic, llmc::kLlamaModelVersion, 1,
                                     "mpiformer Llama model file"};

// A Llama-family model's fields in header slots 8..24 (docs/file-formats.md): GPT-2's files
// keep them zero. Slot 8 is the family (Arch's value); floats are stored as their bits; slots 18
// (the sliding window), 19 (a head size apart from C/NH), 20..23 (the experts), 24 (a shared
// expert's width), 25 (the family's Q, K, V biases left out), 26..31 (latent attention),
// 32..36 (YaRN), 37..41 (DeepSeekMoE's routing) and 42..43 (dense blocks before the experts')
// are 0 in files written before them.
enum LlamaSlot {
  kArch = 8,
  kKvHeads,
  kFfnDim,
  kTied,
  kRopeOriginal,
  kNormEps,
  kRopeTheta,
  kRopeFactor,
  kRopeLow,
  kRopeHigh,
  kSlidingWindow,
  kHeadDim,
  kExperts,
  kExpertsPerToken,
  kMoeRenormalize,
  kMoeAuxCoef,
  kSharedFfn,
  kNoQkvBias,
  // 26..31: multi-head latent attention's sizes (deepseek_v3); 32..36: YaRN's rope scaling.
  kQLoraRank,
  kKvLoraRank,
  kQkNopeDim,
  kQkRopeDim,
  kVHeadDim,
  kRopeInterleave,
  kRopeYarn,
  kYarnBetaFast,
  kYarnBetaSlow,
  kYarnMscale,
  kYarnMscaleAllDim,
  // 37..41: DeepSeekMoE's routing (deepseek_v3 with routed experts).
  kMoeSigmoid,
  kMoeNoaux,
  kMoeGroups,
  kMoeTopkGroups,
  kMoeScale,
  // 42..43: the first dense_layers blocks dense, of MLP width dense_ffn (first_k_dense_replace).
  kDenseLayers,
  kDenseFfn,
  // 44: DeepSeek-V3's multi-token prediction modules after the blocks (--mtp).
  kMtp
};
constexpr int kLastArch = int(Arch::kDeepseekV3);
int32_t float_bits(float x) {
  int32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
float bits_float(int32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}
void read_llama_slots(const int32_t* h, GPTConfig& cfg) {
  cfg.arch = h[kArch] >= 1 && h[kArch] <= kLastArch ? Arch(h[kArch]) : Arch::kLlama;
  cfg.sliding_window = h[kSlidingWindow];
  cfg.head_dim = h[kHeadDim];
  cfg.experts = h[kExperts];
  cfg.experts_per_token = h[kExpertsPerToken];
  cfg.shared_ffn = h[kSharedFfn];
  cfg.no_qkv_bias = h[kNoQkvBias] != 0;
  cfg.q_lora_rank = h[kQLoraRank];
  cfg.kv_lora_rank = h[kKvLoraRank];
  cfg.qk_nope_dim = h[kQkNopeDim];
  cfg.qk_rope_dim = h[kQkRopeDim];
  cfg.v_head_dim = h[kVHeadDim];
  if (cfg.mla()) cfg.rope_interleave = h[kRopeInterleave] != 0;
  if (cfg.mla()) cfg.mtp = h[kMtp];
  if (h[kRopeYarn] != 0) {  // else the defaults: zeros in the slots would be another model
    cfg.rope_yarn = true;
    cfg.yarn_beta_fast = bits_float(h[kYarnBetaFast]);
    cfg.yarn_beta_slow = bits_float(h[kYarnBetaSlow]);
    cfg.yarn_mscale = bits_float(h[kYarnMscale]);
    cfg.yarn_mscale_all_dim = bits_float(h[kYarnMscaleAllDim]);
  }
  cfg.moe_renormalize = h[kMoeRenormalize] != 0;
  if (cfg.features().moe_choice_bias) {
    cfg.moe_sigmoid = h[kMoeSigmoid] != 0;
    cfg.moe_noaux = h[kMoeNoaux] != 0;
    cfg.moe_groups = h[kMoeGroups];
    cfg.moe_topk_groups = h[kMoeTopkGroups];
    cfg.moe_scale = bits_float(h[kMoeScale]);
    cfg.dense_layers = h[kDenseLayers];
    cfg.dense_ffn = h[kDenseFfn];
  }
  cfg.moe_aux_coef = bits_float(h[kMoeAuxCoef]);
  cfg.kv_heads = h[kKvHeads];
  cfg.ffn_dim = h[kFfnDim];
  cfg.tied = h[kTied] != 0;
  cfg.rope_original_max_pos = h[kRopeOriginal];
  cfg.norm_eps = bits_float(h[kNormEps]);
  cfg.rope_theta = bits_float(h[kRopeTheta]);
  cfg.rope_factor = bits_float(h[kRopeFactor]);
  cfg.rope_low_freq_factor = bits_float(h[kRopeLow]);
  cfg.rope_high_freq_factor = bits_float(h[kRopeHigh]);
}
constexpr HeaderKind kOptimizerFile{kOptimizerMagic, kOptimizerVersion, 2,
                                    "mpiformer optimizer state file"};

// Reads and checks the header and the file's size; leaves `f` positioned after the header.
GPTConfig read_header(std::FILE* f, int64_t bytes, const std::string& path,
                      const HeaderKind& kind) {
  require(bytes >= kHeaderBytes, checkpoint_name(path) + ": " + std::to_string(bytes) +
                                     " bytes is too short for the 1024-byte header; the file is "
                                     "truncated or not an " +
                                     kind.name);
  int32_t h[kHeaderInts];
  read_exact(f, h, sizeof h, checkpoint_name(path));
  // A model file is llm.c's GPT-2 file or our Llama file, told apart by the magic.
  const HeaderKind& k = (kind.magic == llmc::kCheckpointMagic && h[0] == llmc::kLlamaModelMagic)
                            ? kLlamaModelFile
                            : kind;
  require(h[0] != llmc::kShardMagic,
          checkpoint_name(path) +
              ": this is an llm.c token shard, not a model file; pass a model checkpoint");
  require(h[0] == k.magic, checkpoint_name(path) + ": bad magic " + std::to_string(h[0]) +
                               " (expected " + std::to_string(k.magic) + "); not an " + k.name);
  require(k.magic != llmc::kCheckpointMagic || h[1] != llmc::kCheckpointVersionBf16,
          checkpoint_name(path) +
              ": version 5 is llm.c's bf16 format; only fp32 (version 3) checkpoints are "
              "supported: export fp32 (llm.c train_gpt2.py writes gpt2_124M.bin in fp32)");
  require(h[1] == k.version,
          checkpoint_name(path) + ": unsupported version " + std::to_string(h[1]) +
              (k.magic == llmc::kCheckpointMagic
                   ? "; only fp32 (version 3) checkpoints are supported: export fp32"
                   : " of the " + std::string(k.name) + "; this mpiformer reads version " +
                         std::to_string(k.version) + ": use the mpiformer that wrote it"));
  GPTConfig cfg;
  cfg.max_seq_len = h[2];
  cfg.vocab = h[3];
  cfg.layers = h[4];
  cfg.heads = h[5];
  cfg.channels = h[6];
  cfg.padded_vocab = h[7];
  require(h[kArch] >= 0 && h[kArch] <= kLastArch,
          checkpoint_name(path) + ": unknown architecture " + std::to_string(h[kArch]) +
              "; the header is corrupt, or a newer mpiformer wrote it");
  if (h[0] == llmc::kLlamaModelMagic || h[kArch] >= 1) read_llama_slots(h, cfg);
  require(cfg.kv_heads < (1 << 20) && cfg.ffn_dim < (1 << 28) && cfg.heads < (1 << 20) &&
              cfg.channels < (1 << 24),
          checkpoint_name(path) + ": header sizes are implausible; the header is corrupt");
  validate(cfg, checkpoint_name(path));
  // parameter_count overflows int64 for absurd header sizes; a corrupt header must not wrap
  // around into a plausible count.
  const double C = cfg.channels;
  const double estimate = (2 * double(cfg.padded_vocab) + cfg.max_seq_len + 2) * C +
                          double(cfg.layers) * (double(cfg.qkv_rows()) * C + C * C +
                                                2.0 * double(cfg.mlp_in_rows()) * C + 13 * C);
  require(estimate < 1e15, checkpoint_name(path) + ": header sizes (" + describe(cfg) +
                               ") are implausible; the header is corrupt");
  const int64_t n = parameter_count(cfg);
  const int64_t expected = kHeaderBytes + 4 * k.floats_per_parameter * n;
  require(bytes == expected,
          checkpoint_name(path) + ": size mismatch: expected " + std::to_string(expected) +
              " bytes (1024 + " + std::to_string(4 * k.floats_per_parameter) + " * " +
              std::to_string(n) + " parameters of " + describe(cfg) + "), the file has " +
              std::to_string(bytes) + "; the file is truncated or corrupt");
  return cfg;
}

GPTConfig read_config(const std::string& path, const HeaderKind& kind) {
  int64_t bytes = 0;
  File f = open_llmc_file(path, bytes);
  return read_header(f.get(), bytes, path, kind);
}

}  // namespace

GPTConfig read_checkpoint_config(const std::string& path) {
  return read_config(path, kModelFile);
}

GPTConfig read_optimizer_config(const std::string& path) {
  return read_config(path, kOptimizerFile);
}

void make_header(const GPTConfig& cfg, bool optimizer, int32_t* h) {
  const HeaderKind& k = optimizer ? kOptimizerFile : cfg.llama() ? kLlamaModelFile : kModelFile;
  std::fill(h, h + kHeaderInts, 0);
  h[0] = k.magic;
  h[1] = k.version;
  h[2] = cfg.max_seq_len;
  h[3] = cfg.vocab;
  h[4] = cfg.layers;
  h[5] = cfg.heads;
  h[6] = cfg.channels;
  h[7] = cfg.padded_vocab;
  if (!cfg.llama()) return;
  h[kArch] = int32_t(cfg.arch);
  h[kSlidingWindow] = cfg.sliding_window;
  h[kHeadDim] = cfg.head_dim;
  h[kExperts] = cfg.experts;
  h[kExpertsPerToken] = cfg.experts_per_token;
  h[kMoeRenormalize] = cfg.moe() && cfg.moe_renormalize ? 1 : 0;
  h[kMoeAuxCoef] = float_bits(cfg.moe_aux_coef);
  h[kSharedFfn] = cfg.shared_ffn;
  if (cfg.features().moe_choice_bias) {
    h[kMoeSigmoid] = cfg.moe_sigmoid ? 1 : 0;
    h[kMoeNoaux] = cfg.moe_noaux ? 1 : 0;
    h[kMoeGroups] = cfg.moe_groups;
    h[kMoeTopkGroups] = cfg.moe_topk_groups;
    h[kMoeScale] = float_bits(cfg.moe_scale);
    h[kDenseLayers] = cfg.dense_layers;
    h[kDenseFfn] = cfg.dense_ffn;
  }
  h[kNoQkvBias] = cfg.no_qkv_bias ? 1 : 0;
  if (cfg.mla()) h[kMtp] = cfg.mtp;
  if (cfg.mla()) {
    h[kQLoraRank] = cfg.q_lora_rank;
    h[kKvLoraRank] = cfg.kv_lora_rank;
    h[kQkNopeDim] = cfg.qk_nope_dim;
    h[kQkRopeDim] = cfg.qk_rope_dim;
    h[kVHeadDim] = cfg.v_head_dim;
    h[kRopeInterleave] = cfg.rope_interleave ? 1 : 0;
  }
  if (cfg.rope_yarn) {
    h[kRopeYarn] = 1;
    h[kYarnBetaFast] = float_bits(cfg.yarn_beta_fast);
    h[kYarnBetaSlow] = float_bits(cfg.yarn_beta_slow);
    h[kYarnMscale] = float_bits(cfg.yarn_mscale);
    h[kYarnMscaleAllDim] = float_bits(cfg.yarn_mscale_all_dim);
  }
  h[kKvHeads] = cfg.kv_head_count();
  h[kFfnDim] = cfg.ffn_width();
  h[kTied] = cfg.tied ? 1 : 0;
  h[kRopeOriginal] = cfg.rope_original_max_pos;
  h[kNormEps] = float_bits(cfg.norm_eps);
  h[kRopeTheta] = float_bits(cfg.rope_theta);
  h[kRopeFactor] = float_bits(cfg.rope_factor);
  h[kRopeLow] = float_bits(cfg.rope_low_freq_factor);
  h[kRopeHigh] = float_bits(cfg.rope_high_freq_factor);
}

void read_checkpoint_params(const std::string& path, const GPTConfig& cfg,
                            std::vector<float>& out) {
  int64_t bytes = 0;
  File f = open_llmc_file(path, bytes);
  const GPTConfig file_cfg = read_header(f.get(), bytes, path, kModelFile);
  require(same_shape(file_cfg, cfg), checkpoint_name(path) + ": holds model " + describe(file_cfg) +
                                         " but " + describe(cfg) + " was expected; pass the " +
                                         "matching checkpoint or model sizes");
  out.resize(static_cast<size_t>(parameter_count(cfg)));
  read_exact(f.get(), out.data(), out.size() * sizeof(float), checkpoint_name(path));
}

void write_checkpoint(const std::string& path, const GPTConfig& cfg,
                      const std::vector<float>& params) {
  validate(cfg, "the model written to " + checkpoint_name(path));
  if (static_cast<int64_t>(params.size()) != parameter_count(cfg)) {
    MPF_FATAL("write_checkpoint: " + std::to_string(params.size()) + " parameters for a model of " +
              std::to_string(parameter_count(cfg)));
  }
  require(!path_exists(path),
          checkpoint_name(path) + ": already exists; remove it or choose another output path");

  // Written beside the target (same filesystem, so rename is atomic), named by pid so concurrent
  // writers never share a temporary.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  require(fd >= 0, checkpoint_name(path) + ": cannot create " + tmp + " (" + errno_text() +
                       "); check that the directory exists and is writable");
  File f(fdopen(fd, "wb"));
  bool ok = f != nullptr;
  if (!ok) close(fd);

  int32_t h[kHeaderInts];
  make_header(cfg, /*optimizer=*/false, h);
  ok = ok && std::fwrite(h, sizeof h, 1, f.get()) == 1 &&
       std::fwrite(params.data(), sizeof(float), params.size(), f.get()) == params.size() &&
       std::fflush(f.get()) == 0 && fsync(fileno(f.get())) == 0;  // data on disk before rename
  if (f) ok = (std::fclose(f.release()) == 0) && ok;
  std::string reason = ok ? "" : errno_text();
  // The target is checked again just before the rename, which would replace it silently.
  if (ok && path_exists(path)) {
    ok = false;
    reason = "the path was created by someone else meanwhile";
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    reason = errno_text();
  }
  if (!ok) {
    std::remove(tmp.c_str());
    throw InputError(checkpoint_name(path) + ": write failed (" + reason +
                     "); check free space and permissions, or choose another output path");
  }
}

void check_checkpoint_writable(const std::string& path) {
  check_new_output(path, checkpoint_name(path));
}

}  // namespace mpf

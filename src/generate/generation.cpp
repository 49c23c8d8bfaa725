#include "generate/generation.hpp"

#include <algorithm>
#include <cstdio>

#include "checkpoint/checkpoint_dir.hpp"
#include "checkpoint/hf_checkpoint.hpp"
#include "checkpoint/llmc_checkpoint.hpp"
#include "checkpoint/state_files.hpp"
#include "core/error.hpp"
#include "core/flags.hpp"
#include "core/parallel.hpp"
#include "core/stopwatch.hpp"
#include "generate/sampler.hpp"
#include "generate/token_text.hpp"
#include "io/output_file.hpp"
#include "pipeline/model_builder.hpp"

namespace mpf {

namespace {

// A token's bytes as they are: text may hold NUL bytes, which a C string would end at.
void write_text(const std::string& bytes) {
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
}

// The prompt's ids: --prompt-tokens as given; --prompt text through a tokenizer.json (added tokens
// in it recognised, the template's prefix first, as Hugging Face's encode(text) gives them), or as
// bytes for a byte-level model; neither: the template's prefix, else the end-of-text token.
std::vector<int32_t> prompt_of(const GenerateOptions& o, const GPTConfig& cfg,
                               const Tokenizer* tokenizer, const BpeTokenizer* encoder) {
  std::vector<int32_t> ids = o.prompt_tokens;
  if (o.prompt_given && encoder) {
    ids = encoder->template_prefix();
    const std::vector<int32_t> text = encoder->encode_with_specials(o.prompt);
    ids.insert(ids.end(), text.begin(), text.end());
  } else if (o.prompt_given) {
    require(cfg.vocab == 256,
            "--prompt text needs a tokenizer.json to encode it: this model's vocabulary is " +
                std::to_string(cfg.vocab) + " tokens, not bytes (256)" +
                (tokenizer ? ", and --tokenizer " + o.tokenizer + " (llm.c's) only decodes" : "") +
                ": pass --tokenizer tokenizer.json (Hugging Face's, of the model's training data), "
                "or token ids with --prompt-tokens");
    for (unsigned char c : o.prompt) ids.push_back(c);
  }
  if (ids.empty() && encoder) ids = encoder->template_prefix();
  if (ids.empty()) {
    require(tokenizer && tokenizer->eot >= 0,
            "no prompt: pass --prompt TEXT or --prompt-tokens IDS (without a tokenizer that names "
            "an end-of-text token there is nothing to start from)");
    ids.push_back(tokenizer->eot);
  }
  // Only --prompt-tokens can name such an id: a tokenizer's vocabulary is checked to be the
  // model's.
  const std::string below = std::to_string(cfg.vocab);
  for (const int32_t id : ids) {
    require(id < cfg.vocab, "--prompt-tokens: token " + std::to_string(id) +
                                " is outside the model's vocabulary of " + below +
                                " tokens; give ids below " + below +
                                ", or encode the prompt with this model's tokenizer (--prompt "
                                "TEXT --tokenizer tokenizer.json)");
  }
  require(int64_t(ids.size()) <= cfg.max_seq_len,
          "the prompt has " + std::to_string(ids.size()) +
              " tokens, more than the model's max_seq_len " + std::to_string(cfg.max_seq_len) +
              " (its learned positions; there is no sliding window): shorten it to at most " +
              std::to_string(cfg.max_seq_len) + " tokens");
  return ids;
}

std::string sampling_text(const Sampling& s) {
  if (s.temperature <= 0 || s.top_k == 1) return "greedy";
  char buf[96];
  std::snprintf(buf, sizeof buf, "temperature %g, %s, seed %llu", s.temperature,
                s.top_k > 0 ? ("top-k " + std::to_string(s.top_k)).c_str() : "all tokens",
                static_cast<unsigned long long>(s.seed));
  return buf;
}

// What the KV cache holds on this rank a token: floats and bytes a block, and over the blocks.
std::string cache_text(const KVCache& c, const TpShard& s) {
  const int64_t values = c.floats_per_token_layer(), bytes = values * int64_t(sizeof(float));
  const std::string what = c.latent ? "the latent " + std::to_string(s.cfg.kv_lora_rank) +
                                          " + rotary key " + std::to_string(s.cfg.qk_rope_dim)
                                    : "K and V of " + std::to_string(s.kv_heads) +
                                          " kv head(s) of " + std::to_string(s.head_size);
  return "kv cache " + std::to_string(values) + " values (" + std::to_string(bytes) +
         " B) a token a layer (" + what + "), " + std::to_string(bytes * c.layers) +
         " B a token over " + std::to_string(c.layers) + " layers, per rank";
}

std::string joined(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace

GenerateInputs load_generate_inputs(const GenerateOptions& opts, int64_t step,
                                    const std::vector<std::string>& notes, int world_rank) {
  GenerateInputs in;
  in.opts = opts;
  if (!opts.load.empty()) {
    require_checkpoint_found(opts.load, step);
    in.checkpoint = open_checkpoint(opts.load, step);
    // Say when `latest` was passed over for a newer complete checkpoint (a save cut off).
    for (const std::string& note : notes) in.notes.push_back("note: " + note);
    in.cfg = in.checkpoint->info.model;
  } else {
    in.cfg = is_hf_source(opts.init_from) ? read_hf_model_config(opts.init_from, std::nullopt, {})
                                          : read_checkpoint_config(opts.init_from);
    if (is_hf_source(opts.init_from)) {
      const std::string unused = hf_unused_biases(opts.init_from, in.cfg);
      if (!unused.empty()) in.notes.push_back("warning: " + unused);
    }
  }
  // A Hugging Face model directory may hold its tokenizer.json, as a model repository does: it
  // is the default --tokenizer, as transformers' from_pretrained(dir) takes it.
  if (opts.tokenizer.empty() && !opts.init_from.empty() && is_directory(opts.init_from)) {
    const std::string beside =
        opts.init_from + (opts.init_from.back() == '/' ? "" : "/") + "tokenizer.json";
    if (path_exists(beside)) {
      in.opts.tokenizer = beside;
      in.notes.push_back("note: --tokenizer " + beside +
                         " (the model directory's; pass --tokenizer FILE for another)");
    }
  }
  if (!in.opts.tokenizer.empty()) {
    TokenizerFile file = read_tokenizer_file(in.opts.tokenizer);
    in.tokenizer = std::move(file.decoder);
    in.encoder = std::move(file.encoder);
    require(in.tokenizer->vocab() == in.cfg.vocab,
            "tokenizer " + in.opts.tokenizer + " has " + std::to_string(in.tokenizer->vocab()) +
                " tokens but the model's vocabulary is " + std::to_string(in.cfg.vocab) +
                "; pass the tokenizer of the model's training data (none for a byte-level model)");
  }
  in.prompt = prompt_of(in.opts, in.cfg, in.tokenizer ? &*in.tokenizer : nullptr,
                        in.encoder ? &*in.encoder : nullptr);
  if (opts.prompt_given && in.encoder) in.prompt_shown_from = in.encoder->template_prefix().size();
  // Only the positions a run trained on have learned embeddings (a checkpoint says how many).
  const int64_t fed = int64_t(in.prompt.size()) + opts.max_new_tokens - 1;
  const std::string trained_len =
      in.checkpoint ? setting(in.checkpoint->info, "run.seq_len").value_or("") : "";
  if (!trained_len.empty() && fed > flags::to_int("the checkpoint's run.seq_len", trained_len)) {
    in.notes.push_back("note: the model trained on sequences of " + trained_len +
                       " tokens: the positions past them have untrained embeddings");
  }
  if (world_rank == 0) {
    if (!opts.tokens_out.empty())
      check_new_output(opts.tokens_out, "--tokens-out " + opts.tokens_out);
    if (!opts.logits_out.empty())
      check_new_output(opts.logits_out, "--logits-out " + opts.logits_out);
  }
  return in;
}

Generation::Generation(GenerateInputs in, MPI_Comm world) : in_(std::move(in)) {
  const GenerateOptions& o = in_.opts;
  // EP ranks are the grid's DP ranks: every one decodes the same sequence, each holding its
  // experts and exchanging the tokens' rows with the others. The layout is named in the
  // generator's own flags (the grid would speak of a dp the user never gave).
  int world_size = 0;
  MPI_Comm_size(world, &world_size);
  const std::string layout = "--tp " + std::to_string(o.tp) + " x --ep " + std::to_string(o.ep);
  require(world_size == o.tp * o.ep, layout + " needs " + std::to_string(o.tp * o.ep) +
                                         " ranks, but " + std::to_string(world_size) +
                                         " were launched; change --tp or --ep, or mpiexec -n");
  grid_ = std::make_unique<Grid>(world, o.tp, /*pp=*/1, /*dp=*/o.ep, /*cp=*/1, o.ep);
  // The whole model (no stages), without gradients.
  ModelOnLayout model = build_model(*grid_, in_.cfg, /*stage=*/nullptr);
  groups_ = model.groups;
  shard_ = std::move(model.shard);
  params_ = std::move(model.params);
  const StateFiles files(*grid_, shard_, params_);
  if (in_.checkpoint) {
    load_checkpoint_parameters(files, *in_.checkpoint);
  } else if (is_hf_source(o.init_from)) {
    load_hf_model(o.init_from, in_.cfg, shard_, params_, grid_->world_comm());
  } else {
    load_model_file(files, o.init_from);
  }
  // Every position the model is fed: the prompt, then each new token but the last.
  const int64_t fed = int64_t(in_.prompt.size()) + o.max_new_tokens - 1;
  const int capacity = int(std::min<int64_t>(in_.cfg.max_seq_len, fed));
  decoder_ = std::make_unique<Decoder>(shard_, params_.t, capacity, groups_.model(), o.kv_cache);
  sampler_ = std::make_unique<TokenSampler>(shard_, o.sampling, groups_.tp);
}

Generation::~Generation() = default;

void Generation::run() {
  const GenerateOptions& o = in_.opts;
  const GPTConfig& cfg = in_.cfg;
  const bool root = grid_->world_rank() == 0;
  const Tokenizer* tokenizer = in_.tokenizer ? &*in_.tokenizer : nullptr;
  if (root) {
    std::fprintf(
        stderr, "mpiformer-generate | model %s | from %s | tp %d x %d thread(s) | %s | %s\n",
        describe(cfg).c_str(),
        in_.checkpoint ? checkpoint::path(in_.checkpoint->root, in_.checkpoint->info.step).c_str()
                       : o.init_from.c_str(),
        grid_->tp_size(), host_thread_count(),
        o.kv_cache ? cache_text(decoder_->cache(), shard_).c_str()
                   : "no kv cache: the whole prefix per token",
        sampling_text(o.sampling).c_str());
    for (const std::string& note : in_.notes) std::fprintf(stderr, "%s\n", note.c_str());
  }
  TokenText text(tokenizer, cfg.vocab);
  // The prompt, unless it is only the end-of-text token generation started from (no prompt given).
  const bool implied = !o.prompt_given && o.prompt_tokens.empty();
  if (root && !implied) {
    for (size_t i = in_.prompt_shown_from; i < in_.prompt.size(); ++i)
      write_text(text.next(in_.prompt[i]));
    std::fflush(stdout);
  }
  std::unique_ptr<PendingFile> logits_file;
  if (root && !o.logits_out.empty()) logits_file = std::make_unique<PendingFile>(o.logits_out);

  std::vector<int32_t> sequence = in_.prompt;
  // A token's time: the forward pass that produced its logits, then choosing it.
  Stopwatch clock;
  Tensor logits = decoder_->append(in_.prompt);
  double forward_seconds = clock.seconds(), prompt_seconds = 0.0, step_seconds = 0.0;
  int generated = 0;
  std::string stop;
  for (;;) {
    if (!o.logits_out.empty()) {  // collective; not part of the timing
      const std::vector<float> all = sampler_->gather(logits);
      if (logits_file) logits_file->write(all.data(), all.size() * sizeof(float));
    }
    clock.reset();
    const int32_t id = sampler_->next(logits, uint64_t(generated));
    (generated == 0 ? prompt_seconds : step_seconds) += forward_seconds + clock.seconds();
    sequence.push_back(id);
    ++generated;
    if (tokenizer && id == tokenizer->eot) {
      stop = "stopped at end-of-text (token " + std::to_string(id) + ")";
      break;
    }
    if (root) {
      write_text(text.next(id));
      std::fflush(stdout);
    }
    if (generated == o.max_new_tokens) break;
    if (decoder_->length() == cfg.max_seq_len) {
      stop = "stopped at the model's max_seq_len: the sequence fills its " +
             std::to_string(cfg.max_seq_len) + " positions";
      break;
    }
    clock.reset();
    logits = decoder_->append({id});
    forward_seconds = clock.seconds();
  }
  std::string error;
  if (root) {
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (logits_file) error = logits_file->commit();
    if (error.empty() && !o.tokens_out.empty()) {
      PendingFile tokens(o.tokens_out);
      const std::string line = joined(sequence) + "\n";
      tokens.write(line.data(), line.size());
      error = tokens.commit();
    }
  }
  error = broadcast(error, 0, grid_->world_comm());
  require(error.empty(), error);
  if (!root) return;
  if (!stop.empty()) std::fprintf(stderr, "%s\n", stop.c_str());
  const int steps = generated - 1;  // the first new token came with the prompt's pass
  std::fprintf(stderr,
               "summary | prompt %zu tokens in %.1f ms = %.1f tok/s | generated %d tokens, %d "
               "one-position steps at %.2f ms = %.2f tok/s | %s\n",
               in_.prompt.size(), prompt_seconds * 1e3, in_.prompt.size() / prompt_seconds,
               generated, steps, steps > 0 ? step_seconds * 1e3 / steps : 0.0,
               step_seconds > 0 ? steps / step_seconds : 0.0,
               o.kv_cache ? "kv cache" : "no kv cache");
  std::fflush(stderr);
}

}  // namespace mpf

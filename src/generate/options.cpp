#include "generate/options.hpp"

#include "core/error.hpp"
#include "core/flags.hpp"
#include "io/output_file.hpp"

namespace mpf {

namespace {
// "1,2,3" -> {1, 2, 3}; each a non-negative integer.
std::vector<int32_t> parse_ids(const std::string& flag, const std::string& text) {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    const int id = flags::to_int32(flag, item);
    require(id >= 0, flag + " token ids are non-negative, got " + item);
    ids.push_back(id);
    at = comma + 1;
  }
  return ids;
}
}  // namespace

GenerateOptions parse_generate_options(int argc, const char* const* argv) {
  using flags::to_int32;
  GenerateOptions o;
  auto text = [](std::string& field) {
    return flags::Setter([&field](const std::string&, const std::string& v) { field = v; });
  };
  auto integer = [](int& field) {
    return flags::Setter(
        [&field](const std::string& f, const std::string& v) { field = to_int32(f, v); });
  };
  flags::Table table;
  table.values = {
      {"--init-from", text(o.init_from)},
      {"--load", text(o.load)},
      {"--load-step", [&](auto& f, auto& v) { o.load_step = flags::to_int(f, v); }},
      {"--prompt",
       [&](auto&, auto& v) {
         o.prompt = v;
         o.prompt_given = true;
       }},
      {"--prompt-tokens", [&](auto& f, auto& v) { o.prompt_tokens = parse_ids(f, v); }},
      {"--max-new-tokens", integer(o.max_new_tokens)},
      {"--temperature",
       [&](auto& f, auto& v) { o.sampling.temperature = float(flags::to_double(f, v)); }},
      {"--top-k", integer(o.sampling.top_k)},
      {"--seed",
       [&](auto& f, auto& v) {
         const int64_t s = flags::to_int(f, v);
         require(s >= 0, "--seed must be non-negative, got " + v);
         o.sampling.seed = uint64_t(s);
       }},
      {"--tokenizer", text(o.tokenizer)},
      {"--tokens-out", text(o.tokens_out)},
      {"--logits-out", text(o.logits_out)},
      {"--tp", integer(o.tp)},
      {"--ep", integer(o.ep)},
      {"--pp", integer(o.pp)},
      {"--threads", integer(o.threads)},
      {"--gpu-aware-mpi",
       [&](const std::string& f, const std::string& v) {
         require(v == "auto" || v == "yes" || v == "no",
                 f + " must be auto, yes or no, got '" + v + "'");
         o.gpu_aware_mpi = v;
       }},
  };
  table.switches = {
      {"--help", [&] { o.help = true; }},
      {"-h", [&] { o.help = true; }},
      {"--no-kv-cache", [&] { o.kv_cache = false; }},
  };
  const auto given = flags::parse(argc, argv, table, "mpiformer-generate");
  if (o.help) return o;

  require(o.init_from.empty() != o.load.empty(),
          o.init_from.empty()
              ? "no model: pass --init-from FILE (an llm.c model file, or a Hugging "
                "Face model directory or .safetensors file) or --load DIR (a "
                "training checkpoint directory)"
              : "--init-from and --load both name a model; pass one");
  require(o.load_step >= 0, "--load-step must be >= 0, got " + std::to_string(o.load_step));
  require(o.load_step == 0 || !o.load.empty(),
          "--load-step " + std::to_string(o.load_step) + " needs --load DIR to load from");
  require(!(o.prompt_given && given.count("--prompt-tokens")),
          "--prompt and --prompt-tokens both give the prompt; pass one");
  require(!o.prompt_given || !o.prompt.empty(),
          "--prompt is empty; give some text, or drop it to start from the end-of-text token");
  require(o.max_new_tokens >= 1,
          "--max-new-tokens must be >= 1, got " + std::to_string(o.max_new_tokens));
  require(o.sampling.temperature >= 0,
          "--temperature must be >= 0 (0 is greedy), got " + flags::number(o.sampling.temperature));
  require(o.sampling.top_k >= 0, "--top-k must be >= 0 (0 is the whole vocabulary), got " +
                                     std::to_string(o.sampling.top_k));
  require(o.tp >= 1, "--tp must be >= 1, got " + std::to_string(o.tp));
  require(o.ep >= 1, "--ep must be >= 1, got " + std::to_string(o.ep));
  require(o.pp == 1, "--pp " + std::to_string(o.pp) +
                         ": mpiformer-generate runs tensor parallel only. A checkpoint loads on "
                         "any layout: drop --pp (use --tp)");
  require(o.threads >= 0, "--threads must be >= 0, got " + std::to_string(o.threads));
  check_outputs_apart({{"--tokens-out", o.tokens_out}, {"--logits-out", o.logits_out}}, "");
  return o;
}

std::string generate_usage() {
  return R"(usage: mpiexec -n T mpiformer-generate --init-from FILE | --load DIR [flags]

Writes what a GPT-2 or Llama model (as mpiformer-train trains it, or a Hugging Face directory)
continues a prompt with: the text on stdout, streamed token by token; notes and the tokens/s
summary on stderr. The prompt runs through the model in one pass, then each new token costs one
position (a KV cache). Runs on N ranks with --tp N (tensor parallel), or on one; a mixture of
experts also on --tp N x --ep M ranks (each EP rank holds 1/M of the experts).

model
  --init-from FILE      an llm.c model file (fp32, version 3), e.g. mpiformer-train --save-llmc,
                        or a Hugging Face model directory or .safetensors file with its
                        config.json (mpiformer-train --save-hf)
  --load DIR            a training checkpoint directory (mpiformer-train --save DIR): its latest
  --load-step N         ... or its step N
prompt
  --prompt TEXT         text: encoded by --tokenizer's tokenizer.json (its added tokens, such as
                        <|endoftext|>, recognised; its template's prefix, such as Llama 3's
                        <|begin_of_text|>, first), else as bytes for a byte-level model
                        (vocabulary 256, like make run's)
  --prompt-tokens IDS   token ids, comma-separated (any model)
                        neither: start from the template's prefix, else the tokenizer's
                        end-of-text token, as llm.c does
  --max-new-tokens N    tokens to generate (default 64); generation also stops at end-of-text
                        and at the model's max_seq_len (a note says which)
sampling
  --temperature T       0: greedy, the most likely token (default); > 0: sample from softmax(z/T)
  --top-k K             sample among the K most likely tokens only (default 0: all)
  --seed S              the sampling noise (default 1337): the same seed, the same text, on any
                        --tp
output
  --tokenizer FILE      a Hugging Face tokenizer.json (byte-level BPE: GPT-2's, Llama 3's), which
                        encodes --prompt text, or llm.c's gpt2_tokenizer.bin, which only decodes:
                        decode tokens to text and stop at end-of-text. Default: the --init-from
                        directory's tokenizer.json, if it has one; without any a byte-level
                        model's tokens print as bytes, any other model's as ids
  --tokens-out FILE     write the whole sequence's ids (prompt, then generated), comma-separated
                        (never overwrites)
  --logits-out FILE     write the V logits before each generated token, float32 little-endian,
                        one row per token (never overwrites)
  --no-kv-cache         recompute the whole prefix for every token (a check and a baseline)
layout and system
  --tp N                tensor-parallel ranks (default 1; launch N ranks)
  --ep M                expert-parallel ranks for a mixture of experts (default 1; launch N x M
                        ranks, which all decode the same sequence)
  --threads N           threads per rank (default: OMP_NUM_THREADS, else cores / ranks per node)
  --gpu-aware-mpi M     auto, yes or no: as mpiformer-train's (TP messages in a GPU build)
  --help
)";
}

}  // namespace mpf

#include "generate/options.hpp"

#include "core/error.hpp"
#include "core/flags.hpp"
#include "io/output_file.hpp"
#include "layout/settings.hpp"

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

// mpiformer-generate's flags, rows of the settings table (layout/settings.hpp) bound to `o`:
// parsed with a setting's checks and shown in --help as mpiformer-train's are.
std::vector<FlagGroup> generate_rows(GenerateOptions& o) {
  return {
      {"model",
       {
           {"--init-from", "FILE",
            "an llm.c model file (fp32, version 3), e.g. mpiformer-train --save-llmc, or a Hugging "
            "Face model directory or .safetensors file with its config.json (mpiformer-train "
            "--save-hf)",
            &o.init_from},
           {"--load", "DIR",
            "a training checkpoint directory (mpiformer-train --save DIR): its latest", &o.load},
           {"--load-step", "N", "... or its step N (default 0: the latest)", &o.load_step, 0},
       }},
      {"prompt",
       {
           {"--prompt", "TEXT",
            "text: encoded by --tokenizer's tokenizer.json (its added tokens, such as "
            "<|endoftext|>, recognised; its template's prefix, such as Llama 3's "
            "<|begin_of_text|>, first), else as bytes for a byte-level model (vocabulary 256, like "
            "make run's)",
            &o.prompt},
           {"--prompt-tokens", "IDS",
            "token ids, comma-separated (any model). Neither: start from the template's prefix, "
            "else the tokenizer's end-of-text token, as llm.c does",
            flags::Setter([&o](const std::string& f, const std::string& v) {
              o.prompt_tokens = parse_ids(f, v);
            })},
           {"--max-new-tokens", "N",
            "tokens to generate (default 64); generation also stops at end-of-text and at the "
            "model's max_seq_len (a note says which)",
            &o.max_new_tokens, 1},
       }},
      // Their least values are checked after parsing, the message saying what 0 means.
      {"sampling",
       {
           {"--temperature", "T",
            "0: greedy, the most likely token (default); > 0: sample from softmax(z/T)",
            &o.sampling.temperature},
           {"--top-k", "K", "sample among the K most likely tokens only (default 0: all)",
            &o.sampling.top_k},
           {"--seed", "S",
            "the sampling noise (default 1337): the same seed, the same text, on any --tp",
            &o.sampling.seed},
       }},
      {"output",
       {
           {"--tokenizer", "FILE",
            "a Hugging Face tokenizer.json (byte-level BPE: GPT-2's, Llama 3's), which encodes "
            "--prompt text, or llm.c's gpt2_tokenizer.bin, which only decodes: decode tokens to "
            "text and stop at end-of-text. Default: the --init-from directory's tokenizer.json, if "
            "it has one; without any a byte-level model's tokens print as bytes, any other "
            "model's as ids",
            &o.tokenizer},
           {"--tokens-out", "FILE",
            "write the whole sequence's ids (prompt, then generated), comma-separated (never "
            "overwrites)",
            &o.tokens_out},
           {"--logits-out", "FILE",
            "write the V logits before each generated token, float32 little-endian, one row per "
            "token (never overwrites)",
            &o.logits_out},
           {"--no-kv-cache", "",
            "recompute the whole prefix for every token (a check and a baseline)",
            flags::Setter([&o](const std::string&, const std::string&) { o.kv_cache = false; })},
       }},
      {"layout and system",
       {
           {"--tp", "N", "tensor-parallel ranks (default 1; launch N ranks)", &o.tp, 1},
           {"--ep", "M",
            "expert-parallel ranks for a mixture of experts (default 1; launch N x M ranks, which "
            "all decode the same sequence)",
            &o.ep, 1},
           // Taken to say why it is refused: a checkpoint of any layout loads here.
           {"--pp", "P", "pipeline stages: 1 only, mpiformer-generate runs tensor parallel", &o.pp},
           {"--threads", "N",
            "threads per rank (default: OMP_NUM_THREADS, else cores / ranks per node)", &o.threads,
            0},
           {"--gpu-aware-mpi", "M",
            "auto, yes or no: as mpiformer-train's (TP messages in a GPU build)", &o.gpu_aware_mpi,
            kNoMinimum, "auto,yes,no"},
       }},
  };
}

}  // namespace

GenerateOptions parse_generate_options(int argc, const char* const* argv) {
  GenerateOptions o;
  flags::Table table;
  add_flag_rows(table, generate_rows(o), o.help);
  const auto given = flags::parse(argc, argv, table, "mpiformer-generate");
  if (o.help) return o;
  o.prompt_given = given.count("--prompt") > 0;

  require(o.init_from.empty() != o.load.empty(),
          o.init_from.empty()
              ? "no model: pass --init-from FILE (an llm.c model file, or a Hugging "
                "Face model directory or .safetensors file) or --load DIR (a "
                "training checkpoint directory)"
              : "--init-from and --load both name a model; pass one");
  require(o.load_step == 0 || !o.load.empty(),
          "--load-step " + std::to_string(o.load_step) + " needs --load DIR to load from");
  require(!(o.prompt_given && given.count("--prompt-tokens")),
          "--prompt and --prompt-tokens both give the prompt; pass one");
  require(!o.prompt_given || !o.prompt.empty(),
          "--prompt is empty; give some text, or drop it to start from the end-of-text token");
  require(o.sampling.temperature >= 0,
          "--temperature must be >= 0 (0 is greedy), got " + flags::number(o.sampling.temperature));
  require(o.sampling.top_k >= 0, "--top-k must be >= 0 (0 is the whole vocabulary), got " +
                                     std::to_string(o.sampling.top_k));
  require(o.pp == 1, "--pp " + std::to_string(o.pp) +
                         ": mpiformer-generate runs tensor parallel only. A checkpoint loads on "
                         "any layout: drop --pp (use --tp)");
  check_outputs_apart({{"--tokens-out", o.tokens_out}, {"--logits-out", o.logits_out}}, "");
  return o;
}

std::string generate_usage() {
  GenerateOptions defaults;
  return R"(usage: mpiexec -n T mpiformer-generate --init-from FILE | --load DIR [flags]

Writes what a GPT-2 or Llama model (as mpiformer-train trains it, or a Hugging Face directory)
continues a prompt with: the text on stdout, streamed token by token; notes and the tokens/s
summary on stderr. The prompt runs through the model in one pass, then each new token costs one
position (a KV cache). Runs on N ranks with --tp N (tensor parallel), or on one; a mixture of
experts also on --tp N x --ep M ranks (each EP rank holds 1/M of the experts). Flags take a value
as `--flag V` or `--flag=V`, as mpiformer-train's.

)" + flag_rows_help(generate_rows(defaults)) +
         help_entry("--help", "this text");
}

}  // namespace mpf

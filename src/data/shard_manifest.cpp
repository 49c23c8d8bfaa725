#include "data/shard_manifest.hpp"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "io/input_file.hpp"
#include "io/json.hpp"
#include "io/llmc_format.hpp"

namespace mpf {

std::string manifest_json(const ShardManifest& m) {
  using json::quote;
  const auto n = [](int64_t v) { return std::to_string(v); };
  std::string s = "{\n";
  s += "  \"format\": \"llm.c token shards\",\n";
  s +=
      "  \"shard_magic\": " + n(m.width == 2 ? llmc::kShardMagic : llmc::kShardMagicUint32) + ",\n";
  s += "  \"shard_version\": " + n(m.width == 2 ? llmc::kShardVersion : llmc::kShardVersionUint32) +
       ",\n";
  s += "  \"token_bytes\": " + n(m.width) + ",\n";
  s += "  \"tokenizer\": {\"file\": " + quote(m.tokenizer) +
       ", \"sha256\": " + quote(m.tokenizer_sha256) + ", \"vocab_size\": " + n(m.vocab_size) +
       "},\n";
  s += "  \"doc_token\": {\"text\": " + quote(m.doc_token_text) + ", \"id\": " + n(m.doc_token) +
       ", \"placement\": \"" + (m.doc_token_after ? "after" : "before") + " every document\"},\n";
  s += "  \"text_field\": " + quote(m.text_field) + ",\n";
  s += "  \"shard_tokens\": " + n(m.shard_tokens) + ",\n";
  s += "  \"val_tokens\": " + n(m.val_tokens) + ",\n";
  s += "  \"documents\": " + n(m.documents) + ",\n";
  s += "  \"val_documents\": " + n(m.val_documents) + ",\n";
  s += "  \"tokens\": " + n(m.tokens) + ",\n";
  s += "  \"text_bytes\": " + n(m.text_bytes) + ",\n";
  s += "  \"unicode\": " + quote(m.unicode) + ",\n";
  // What the text lost or had replaced on its way to tokens, in all and document by document.
  s += "  \"unknown_bytes\": " + quote(m.unknown_bytes) + ",\n";
  s += "  \"invalid_utf8\": " + quote(m.invalid_utf8) + ",\n";
  s += "  \"repairs\": {\"documents\": " + n(m.repaired_documents) +
       ", \"unknown_dropped\": " + n(m.unknown_dropped) +
       ", \"unknown_replaced\": " + n(m.unknown_replaced) +
       ", \"invalid_utf8_replaced\": " + n(m.invalid_utf8_replaced) +
       ", \"skipped_documents\": " + n(m.skipped_documents) +
       ", \"listed\": " + n(int64_t(m.repaired.size())) + "},\n";
  s += "  \"repaired_documents\": [";
  for (size_t i = 0; i < m.repaired.size(); ++i) {
    const RepairedDocument& d = m.repaired[i];
    s += std::string(i ? ",\n" : "\n") + "    {\"input\": " + quote(d.input) +
         ", \"byte\": " + n(d.byte) + ", \"unknown_dropped\": " + n(d.repairs.unknown_dropped) +
         ", \"unknown_replaced\": " + n(d.repairs.unknown_replaced) +
         ", \"invalid_utf8_replaced\": " + n(d.repairs.invalid_utf8) +
         ", \"skipped\": " + (d.repairs.skipped ? "true" : "false") + "}";
  }
  s += std::string(m.repaired.empty() ? "" : "\n  ") + "],\n";
  s += "  \"inputs\": [";
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    const CorpusFile& f = m.inputs[i];
    s += std::string(i ? ",\n" : "\n") + "    {\"path\": " + quote(f.path) +
         ", \"format\": " + quote(f.format == CorpusFormat::kJsonl ? "jsonl" : "text") +
         ", \"bytes\": " + n(f.bytes) + "}";
  }
  s += "\n  ],\n  \"shards\": [";
  for (size_t i = 0; i < m.shards.size(); ++i) {
    const ShardInfo& sh = m.shards[i];
    s += std::string(i ? ",\n" : "\n") + "    {\"file\": " + quote(sh.file) +
         ", \"split\": " + quote(sh.split) + ", \"tokens\": " + n(sh.tokens) +
         ", \"sha256\": " + quote(sh.sha256) + "}";
  }
  s += "\n  ]\n}\n";
  return s;
}

int64_t read_manifest_vocab_size(const std::string& path) {
  const std::string what = "manifest " + path;
  const std::string fix = "; tokenize the corpus again (mpiformer-tokenize) or remove the file";
  // A manifest lists every input and shard: large for a large corpus, never gigabytes.
  const std::string text =
      read_input_text(path, what, "the manifest.json mpiformer-tokenize wrote", 1'000'000'000);
  const json::Value root = json::parse(text, what);
  const json::Value* tokenizer = root.find("tokenizer");
  const json::Value* vocab = tokenizer ? tokenizer->find("vocab_size") : nullptr;
  int64_t n = -1;
  if (vocab && vocab->is_number()) {
    try {
      n = vocab->integer();
    } catch (const json::TypeError&) {
    }
  }
  require(n > 0 && n < (int64_t(1) << 31),
          what + ": tokenizer.vocab_size is missing or not a positive integer" + fix);
  return n;
}

std::optional<ManifestDocToken> read_manifest_doc_token(const std::string& path) {
  const std::string what = "manifest " + path;
  const std::string text =
      read_input_text(path, what, "the manifest.json mpiformer-tokenize wrote", 1'000'000'000);
  const json::Value root = json::parse(text, what);
  const json::Value* doc = root.find("doc_token");
  if (doc == nullptr || !doc->is_object()) return std::nullopt;
  const json::Value* id = doc->find("id");
  const json::Value* placement = doc->find("placement");
  const json::Value* content = doc->find("text");
  ManifestDocToken t;
  int64_t n = -1;
  try {
    n = id && id->is_number() ? id->integer() : -1;
  } catch (const json::TypeError&) {
  }
  require(
      n >= 0 && n < (int64_t(1) << 31),
      what + ": doc_token.id is not a token id; tokenize the corpus again (mpiformer-tokenize)");
  t.id = int32_t(n);
  t.after = placement && placement->is_string() && placement->string().rfind("after", 0) == 0;
  if (content && content->is_string()) t.text = content->string();
  return t;
}

std::vector<std::string> manifest_shard_files(const std::string& text) {
  std::vector<std::string> files;
  try {
    const json::Value root = json::parse(text, "manifest");
    const json::Value* shards = root.find("shards");
    if (!shards || !shards->is_array()) return {};
    for (const json::Value& s : shards->array()) {
      const json::Value* f = s.find("file");
      if (!f || !f->is_string() || f->string().empty() ||
          f->string().find('/') != std::string::npos || f->string()[0] == '.') {
        return {};
      }
      files.push_back(f->string());
    }
  } catch (const std::exception&) {
    return {};
  }
  return files;
}

}  // namespace mpf

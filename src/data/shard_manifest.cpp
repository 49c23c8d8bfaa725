#include "data/shard_manifest.hpp"

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
       ", \"placement\": \"before every document\"},\n";
  s += "  \"text_field\": " + quote(m.text_field) + ",\n";
  s += "  \"shard_tokens\": " + n(m.shard_tokens) + ",\n";
  s += "  \"val_tokens\": " + n(m.val_tokens) + ",\n";
  s += "  \"documents\": " + n(m.documents) + ",\n";
  s += "  \"val_documents\": " + n(m.val_documents) + ",\n";
  s += "  \"tokens\": " + n(m.tokens) + ",\n";
  s += "  \"text_bytes\": " + n(m.text_bytes) + ",\n";
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

}  // namespace mpf

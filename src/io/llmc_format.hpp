// The constants of llm.c's file formats (github.com/karpathy/llm.c; docs/file-formats.md gives
// each file's layout): every file starts with a header of 256 little-endian int32 whose first slot
// is a magic number naming the kind of file.
#pragma once

#include <cstdint>

namespace mpf::llmc {

inline constexpr int kHeaderInts = 256;
inline constexpr int64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

inline constexpr int32_t kShardMagic =
    20240520;  // GPT-2 token shard: version, count, uint16 tokens
inline constexpr int32_t kShardVersion = 1;
// Llama 3 token shard (llm.c's dev/data/data_common.py, "llama-3"): version, count, uint32 tokens.
inline constexpr int32_t kShardMagicUint32 = 20240801;
inline constexpr int32_t kShardVersionUint32 = 7;
// The largest vocabulary a uint16 shard holds; larger ones need uint32 shards.
inline constexpr int64_t kUint16Vocab = 65536;
inline constexpr int32_t kCheckpointMagic = 20240326;  // GPT-2 model: sizes, then parameters
inline constexpr int32_t kCheckpointVersionFp32 = 3;
inline constexpr int32_t kCheckpointVersionBf16 = 5;
inline constexpr int32_t kTokenizerMagic = 20240328;  // tokenizer (decode only)
// mpiformer's Llama model file: llm.c's layout (header, then the tensors in the table's order),
// its own magic, the Llama fields in header slots 8..17 (docs/file-formats.md). llm.c's own Llama
// 3 file (magic 20240803) keeps eps and theta as ints and no rope scaling, so it is not used.
inline constexpr int32_t kLlamaModelMagic = 20251125;
inline constexpr int32_t kLlamaModelVersion = 1;

}  // namespace mpf::llmc

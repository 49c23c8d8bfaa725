// The constants of llm.c's file formats (github.com/karpathy/llm.c; docs/file-formats.md gives
// each file's layout): every file starts with a header of 256 little-endian int32 whose first slot
// is a magic number naming the kind of file.
#pragma once

#include <cstdint>

namespace mpf::llmc {

inline constexpr int kHeaderInts = 256;
inline constexpr int64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

inline constexpr int32_t kShardMagic = 20240520;  // token shard: version, count, uint16 tokens
inline constexpr int32_t kShardVersion = 1;
inline constexpr int32_t kCheckpointMagic = 20240326;  // GPT-2 model: sizes, then parameters
inline constexpr int32_t kCheckpointVersionFp32 = 3;
inline constexpr int32_t kCheckpointVersionBf16 = 5;
inline constexpr int32_t kTokenizerMagic = 20240328;  // tokenizer (decode only)

}  // namespace mpf::llmc

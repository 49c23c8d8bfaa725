// The corpus embedded in the program, so the default run needs no download: byte-level English
// text generated from a small grammar with a fixed seed. Its structure (agreement, repeated
// phrases, counting) is learnable, so the loss of a small model visibly falls from ln(256).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mpf {

// split: "train" (about 1 MB) or "val" (about 64 KB, a different seed). Token ids are bytes.
std::vector<int32_t> builtin_corpus(const std::string& split);

}  // namespace mpf

// What the attention tools (attention_rate, attention_dump) share: their inputs, filled with the
// project's counter-based normal numbers so every run and build sees the same values, and the
// flags that give an attention call's shape.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/rng.hpp"
#include "core/types.hpp"

namespace mpf::perf {

// n values of N(0, 0.25) from stream `stream`, in the kernels' memory.
inline Slab filled(const char* name, int64_t n, uint64_t stream = 7) {
  Slab s(std::string(name), n);
  auto h = Kokkos::create_mirror_view(s);
  for (int64_t i = 0; i < n; ++i) h(i) = rng::normal(1, stream, uint64_t(i)) * 0.5f;
  Kokkos::deep_copy(s, h);
  return s;
}

inline Tensor view(const Slab& s) {
  return Tensor(s.data(), s.extent(0));
}

// An attention call's shape as --batch, --heads, --kv-heads, --head-size and --precision set it.
struct AttentionShape {
  int B = 1, NH = 12, KVH = 4, hs = 64;
  bool bf16 = false;
  // Takes argv[i] (and its value, advancing i) if it is one of the shape's flags.
  bool take(int argc, char** argv, int& i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    int* field = a == "--batch"       ? &B
                 : a == "--heads"     ? &NH
                 : a == "--kv-heads"  ? &KVH
                 : a == "--head-size" ? &hs
                                      : nullptr;
    if (field) {
      *field = has_value ? std::atoi(argv[++i]) : 0;
      return true;
    }
    if (a == "--precision") {
      bf16 = has_value && std::string(argv[++i]) == "bf16";
      return true;
    }
    return false;
  }
};

}  // namespace mpf::perf

// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11): the value at a given
// (seed, stream, index) is a pure function of those three, so any rank can materialise any
// shard of a tensor and get exactly the numbers the serial run has (docs/design.md, invariant 1).
#pragma once

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <string>

namespace mpf::rng {

struct U32x4 {
  uint32_t v[4];
};

KOKKOS_INLINE_FUNCTION uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

KOKKOS_INLINE_FUNCTION U32x4 philox4x32_10(U32x4 ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = mulhilo(0xD2511F53u, ctr.v[0], &hi0);
    const uint32_t lo1 = mulhilo(0xCD9E8D57u, ctr.v[2], &hi1);
    ctr = U32x4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

// The four 32-bit outputs at element `index` of stream `stream`.
KOKKOS_INLINE_FUNCTION U32x4 draw(uint64_t seed, uint64_t stream, uint64_t index) {
  const U32x4 ctr{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                   static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)}};
  return philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// A standard normal sample for element `index` of stream `stream` (Box-Muller on the first two
// 32-bit outputs; uniforms in (0, 1] so the log is finite).
KOKKOS_INLINE_FUNCTION float normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const U32x4 r = draw(seed, stream, index);
  const double u1 = (static_cast<double>(r.v[0]) + 1.0) / 4294967296.0;
  const double u2 = static_cast<double>(r.v[1]) / 4294967296.0;
  return static_cast<float>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// A uniform sample in the open interval (0, 1) for element `index` of stream `stream`: the first
// 32-bit output, at the middle of its 2^-32 bin, so neither end is ever reached.
KOKKOS_INLINE_FUNCTION double uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return (static_cast<double>(draw(seed, stream, index).v[0]) + 0.5) / 4294967296.0;
}

// The stream id of a named tensor (FNV-1a of the name), so streams never depend on tensor order.
uint64_t stream_of(const std::string& name);

}  // namespace mpf::rng

// bfloat16 on the project's side of the GEMM seam: rounding fp32 to bf16 and back. A bf16 keeps
// fp32's sign and 8 exponent bits and the top 7 of its 23 mantissa bits (8 significant bits with
// the implicit one), so rounding to it has a relative error of at most 2^-8 ~ 3.9e-3 (half a unit
// in the 8th significant bit).
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/bf16_bits.hpp"
#include "core/types.hpp"

namespace mpf {

// The precision of the model's matrix products (--precision); model/layers/matmul.hpp says what
// bf16 means.
enum class Precision { fp32, bf16 };
const char* precision_name(Precision p);
// "fp32" or "bf16"; InputError naming --precision otherwise.
Precision parse_precision(const std::string& name);

// An owning bf16 buffer (derived data: rounded copies of fp32 tensors).
using Bf16Slab = Kokkos::View<bf16*, MemSpace>;
// A window of bf16 values in a slab (an activation kept rounded, model/activations.hpp); never
// owns memory.
using Tensor16 = Kokkos::View<bf16*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Round to nearest, ties to even (what hardware conversions and PyTorch do); NaN stays NaN.
KOKKOS_INLINE_FUNCTION bf16 to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16((u >> 16) | 0x40u);  // quiet the NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16(u >> 16);
}

KOKKOS_INLINE_FUNCTION float from_bf16(bf16 h) {
  const uint32_t u = uint32_t(h) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// t(i) = x, rounded to bf16 where t holds bf16: kernels that write either kind of tensor.
KOKKOS_INLINE_FUNCTION void put(const Tensor& t, int64_t i, float x) {
  t(i) = x;
}
KOKKOS_INLINE_FUNCTION void put(const Tensor16& t, int64_t i, float x) {
  t(i) = to_bf16(x);
}
// t(i) as fp32: kernels that read either kind of tensor.
KOKKOS_INLINE_FUNCTION float get(const Tensor& t, int64_t i) {
  return t(i);
}
KOKKOS_INLINE_FUNCTION float get(const Tensor16& t, int64_t i) {
  return from_bf16(t(i));
}

// dst[0, n) = to_bf16(src[0, n)), over all threads.
void round_to_bf16(bf16* dst, const float* src, int64_t n);
// dst[0, n) = from_bf16(src[0, n)) (exact), over all threads.
void widen_from_bf16(float* dst, const bf16* src, int64_t n);
// kept[0, n) = to_bf16(x[0, n)) and x rounded in place to the same values, in one pass: an fp32
// tensor that kernels read as it is and whose bf16 copy is kept.
void round_in_place_keeping(bf16* kept, float* x, int64_t n);

}  // namespace mpf

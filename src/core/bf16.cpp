#include "core/bf16.hpp"

#include "core/error.hpp"
#include "core/parallel.hpp"

namespace mpf {

const char* precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : "fp32";
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  throw InputError("--precision " + name +
                   " is not a precision this trainer has; use fp32 or bf16");
}

void round_to_bf16(bf16* dst, const float* src, int64_t n) {
  for_each(
      "mpf::round_to_bf16", n, KOKKOS_LAMBDA(int64_t i) { dst[i] = to_bf16(src[i]); });
}

void widen_from_bf16(float* dst, const bf16* src, int64_t n) {
  for_each(
      "mpf::widen_from_bf16", n, KOKKOS_LAMBDA(int64_t i) { dst[i] = from_bf16(src[i]); });
}

void round_in_place_keeping(bf16* kept, float* x, int64_t n) {
  for_each(
      "mpf::round_in_place_keeping", n, KOKKOS_LAMBDA(int64_t i) {
        const bf16 h = to_bf16(x[i]);
        kept[i] = h;
        x[i] = from_bf16(h);
      });
}

}  // namespace mpf

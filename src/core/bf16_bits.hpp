// A bfloat16 as its bits: the upper half of an IEEE float (sign, 8 exponent bits, 7 stored
// mantissa bits). Defined here, below everything, so the GEMM seam (backends/gemm.hpp) and the
// kernels (core/bf16.hpp rounds to it) name one type without either depending on the other.
#pragma once

#include <cstdint>

namespace mpf {

using bf16 = uint16_t;

}  // namespace mpf

// The denominator of MFU: the best rate this machine reaches for a training-shaped product, with
// the fastest kernels of any GEMM library this build has (oneDNN, OpenBLAS), in the run's
// precision. The library the run uses may be slower (OPENBLAS_CORETYPE forcing narrow kernels, or
// --gemm openblas): its MFU then shows the loss instead of hiding it.
#pragma once

#include <string>

#include "core/bf16.hpp"

namespace mpf {

struct PeakRate {
  double gflops = 0.0;  // on this rank's threads
  std::string library;  // the library that reached it
};

// Best of a few products of GPT-2 124M's fc-layer shape at 512 rows, with every library that
// runs `precision` natively; the selected library is restored. ~0.1 s per library on 2 cores.
PeakRate measure_peak(Precision precision);

// One such product with every library, untimed: what the libraries' first products allocate
// (their threads' buffers) is then in place, as after measure_peak; for a run given
// --peak-gflops, before the memory plan reads what the process holds.
void warm_gemm_libraries(Precision precision);

}  // namespace mpf

// Uses an installed mpiformer the way another project would: the project's own include spelling,
// one function from the library, the generated configuration header and the backend seam.
#include <cstdio>

#include "backends/gemm.hpp"
#include "core/types.hpp"  // pulls in Kokkos: the exported include path must reach it
#include "model/config.hpp"
#include "mpiformer/config.hpp"

int main() {
  const int padded = mpf::pad_vocab(50257);
  std::printf("mpiformer %s: pad_vocab(50257) = %d\n", MPIFORMER_VERSION, padded);
  if (padded != 50304) return 1;
    // A 1x1x1 product through the installed backend (host memory: CPU backend only).
#if !CONSUMER_CUDA_BACKEND
  const float a = 2.0f, b = 3.0f;
  float c = 1.0f;
  mpf::backend::gemm(mpf::backend::Op::N, mpf::backend::Op::N, 1, 1, 1, 1.0f, &a, 1, &b, 1, 1.0f,
                     &c, 1);
  std::printf("backend %s: 1 + 2*3 = %g\n", mpf::backend::describe(), c);
  if (c != 7.0f) return 1;
#endif
  return 0;
}

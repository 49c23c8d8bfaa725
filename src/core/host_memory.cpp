#include "core/host_memory.hpp"

#include <climits>
#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace mpf {

void keep_freed_host_memory() {
#ifdef __GLIBC__
  // By default glibc returns large freed blocks to the kernel (unmapping a block it mapped on
  // its own, trimming the top of its heap), so the next block of that size faults in every page
  // again, at ~5 us a page on the project's VM. MPICH allocates and frees a temporary buffer for
  // each nonblocking all-reduce of a ~25 MB gradient bucket: DP 2 x 1 thread on GPT-2 124M,
  // 8 x 256, spent 1852 ms of its 6.5 s step outside the kernels, and 523 ms with freed memory
  // kept (318 -> 406 tok/s). PyTorch's users get the same with MALLOC_MMAP_MAX_=0
  // MALLOC_TRIM_THRESHOLD_=<large> in the environment.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
#endif
}

}  // namespace mpf

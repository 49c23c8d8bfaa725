// How this process's allocator treats the host memory it frees.
#pragma once

namespace mpf {

// Keeps freed host memory in the process for the next allocation instead of handing it back to
// the kernel: glibc then serves no block with its own mmap and never trims its heaps. A no-op with
// other C libraries. Call first in main, before MPI_Init.
void keep_freed_host_memory();

}  // namespace mpf

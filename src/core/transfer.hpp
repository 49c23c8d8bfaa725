// Copies between the kernels' memory (core/types.hpp: device memory in a GPU build) and the host:
// the only way a value reaches the host, each under a label that --profile counts (calls and
// bytes per step), so a profile shows every crossing and what it was for. In a CPU build they are
// plain copies between two host buffers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpf {

// host[0, bytes) = memory[0, bytes), after the kernels writing `memory` are done.
void copy_to_host(void* host, const void* memory, size_t bytes, const char* label);
// memory[0, bytes) = host[0, bytes); the kernels launched after it see the new values.
void copy_from_host(void* memory, const void* host, size_t bytes, const char* label);

// One value of the kernels' memory, on the host.
template <class T>
T read_to_host(const T* memory, const char* label) {
  T value;
  copy_to_host(&value, memory, sizeof(T), label);
  return value;
}

}  // namespace mpf

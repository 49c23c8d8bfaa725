#include "core/transfer.hpp"

#include "core/profile.hpp"
#include "core/stopwatch.hpp"
#include "core/types.hpp"

namespace mpf {

namespace {
using HostBytes = Kokkos::View<char*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using MemoryBytes = Kokkos::View<char*, MemSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

void counted(const char* label, size_t bytes, const Stopwatch& clock) {
  if (profile::enabled()) profile::add_transfer(label, int64_t(bytes), clock.seconds());
}
}  // namespace

void copy_to_host(void* host, const void* memory, size_t bytes, const char* label) {
  const Stopwatch clock;
  // deep_copy waits for the kernels before it, and returns once the bytes are on the host.
  Kokkos::deep_copy(HostBytes(static_cast<char*>(host), bytes),
                    MemoryBytes(static_cast<char*>(const_cast<void*>(memory)), bytes));
  counted(label, bytes, clock);
}

void copy_from_host(void* memory, const void* host, size_t bytes, const char* label) {
  const Stopwatch clock;
  Kokkos::deep_copy(MemoryBytes(static_cast<char*>(memory), bytes),
                    HostBytes(static_cast<char*>(const_cast<void*>(host)), bytes));
  counted(label, bytes, clock);
}

}  // namespace mpf

#include "parallel/device_mpi.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <climits>
#include <sstream>
#include <vector>

#include "core/bf16.hpp"
#include "core/error.hpp"
#include "core/transfer.hpp"
#include "core/types.hpp"
#include "mpiformer/config.hpp"
#include "parallel/rank_activity.hpp"
#if MPIFORMER_HAVE_MPIX_QUERY_CUDA_SUPPORT && __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI declares its MPIX_ extensions here; MPICH in mpi.h
#endif

namespace mpf {

namespace {
MpiMemoryChoice process_choice;

// MPI counts are int: longer messages go in pieces of at most this many elements.
constexpr int64_t kMaxCount = INT_MAX / 2;

int size_of(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return size;
}

int count_of(int64_t n) {
  require(n <= kMaxCount, "a gathered or scattered block of over 2^30 floats is not supported");
  return static_cast<int>(n);
}

// "MPICH 4.0.2", from the first line of MPI_Get_library_version ("MPICH Version:\t4.0.2").
std::string library_name() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string first(text, std::find(text, text + length, '\n'));
  std::istringstream words(first);
  std::string word, out;
  while (words >> word) {
    if (word == "Version:" || word == "Version") continue;
    out += (out.empty() ? "" : " ") + word;
  }
  return out;
}

// The staging buffer of the blocking calls: page-locked host memory, grown when a call needs more
// and kept for the next (a step allocates nothing once the first has run), released when Kokkos
// finalizes. One call at a time uses it.
float* staging_buffer(int64_t n) {
  static Kokkos::View<float*, PinnedSpace> buffer;
  static const bool hooked = (Kokkos::push_finalize_hook([] { buffer = {}; }), true);
  (void)hooked;
  if (int64_t(buffer.extent(0)) < n) {
    buffer = {};  // free the old one first: pinned memory is scarce
    buffer = Kokkos::View<float*, PinnedSpace>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "mpf::mpi::staging"), n);
  }
  return buffer.data();
}

void stage_out(float* host, const float* memory, int64_t n) {
  copy_to_host(host, memory, size_t(n) * sizeof(float), "d2h mpi (staged)");
}
void stage_in(float* memory, const float* host, int64_t n) {
  copy_from_host(memory, host, size_t(n) * sizeof(float), "h2d mpi (staged)");
}
}  // namespace

MpiMemoryChoice decide_mpi_memory(const std::string& flag) {
  require(flag == "auto" || flag == "yes" || flag == "no",
          "--gpu-aware-mpi must be auto, yes or no, got '" + flag + "'");
  const std::string mpi = library_name();
  if (flag == "no") {
    return {MpiMemory::kStaged,
            mpi + ", every message staged through host buffers (--gpu-aware-mpi no)"};
  }
  if (!kDeviceMemory) return {MpiMemory::kDirect, mpi + ", host memory"};
  if (flag == "yes") {
    return {MpiMemory::kDirect, mpi + ", handed GPU memory (--gpu-aware-mpi yes)"};
  }
#if MPIFORMER_HAVE_MPIX_QUERY_CUDA_SUPPORT
  if (MPIX_Query_cuda_support() == 1) {
    return {MpiMemory::kDirect, mpi + ", CUDA-aware (MPIX_Query_cuda_support): handed GPU memory"};
  }
  return {MpiMemory::kStaged, mpi +
                                  " reports no CUDA support (MPIX_Query_cuda_support): messages "
                                  "staged through pinned host buffers"};
#else
  return {MpiMemory::kStaged,
          mpi +
              " cannot be asked about CUDA support (no MPIX_Query_cuda_support): messages "
              "staged through pinned host buffers; --gpu-aware-mpi yes if it is CUDA-aware"};
#endif
}

void set_mpi_memory(const MpiMemoryChoice& choice) {
  process_choice = choice;
}

bool staged() {
  return process_choice.memory == MpiMemory::kStaged;
}

const std::string& describe_mpi_memory() {
  return process_choice.why;
}

void allreduce(float* x, int64_t n, MPI_Op op, MPI_Comm comm) {
  if (size_of(comm) == 1 || n == 0) return;
  MpiCallScope in_mpi("MPI_Allreduce", comm);
  float* buf = x;
  if (staged()) {
    buf = staging_buffer(n);
    stage_out(buf, x, n);
  } else {
    Kokkos::fence();  // the kernels that wrote x are done before MPI reads it
  }
  for (int64_t done = 0; done < n;) {
    const int count = static_cast<int>(std::min(n - done, kMaxCount));
    MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf + done, count, MPI_FLOAT, op, comm));
    done += count;
  }
  if (staged()) stage_in(x, buf, n);
}

void allgather_in_place(float* x, int64_t count, MPI_Comm comm) {
  const int size = size_of(comm);
  if (size == 1) return;
  MpiCallScope in_mpi("MPI_Allgather", comm);
  const int c = count_of(count);
  if (!staged()) {
    Kokkos::fence();
    MPF_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, c, MPI_FLOAT, comm));
    return;
  }
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  float* buf = staging_buffer(int64_t(size) * count);
  stage_out(buf + int64_t(rank) * count, x + int64_t(rank) * count, count);
  MPF_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, c, MPI_FLOAT, comm));
  stage_in(x, buf, int64_t(size) * count);
}

void allgather(const float* send, float* recv, int64_t count, MPI_Comm comm) {
  MpiCallScope in_mpi("MPI_Allgather", comm);
  const int size = size_of(comm);
  const int c = count_of(count);
  if (!staged()) {
    Kokkos::fence();
    MPF_MPI_CHECK(MPI_Allgather(send, c, MPI_FLOAT, recv, c, MPI_FLOAT, comm));
    return;
  }
  float* buf = staging_buffer(int64_t(size + 1) * count);
  float* mine = buf + int64_t(size) * count;
  stage_out(mine, send, count);
  MPF_MPI_CHECK(MPI_Allgather(mine, c, MPI_FLOAT, buf, c, MPI_FLOAT, comm));
  stage_in(recv, buf, int64_t(size) * count);
}

void broadcast(float* x, int64_t count, int root, MPI_Comm comm) {
  MpiCallScope in_mpi("MPI_Bcast", comm);
  const int c = count_of(count);
  if (!staged()) {
    Kokkos::fence();
    MPF_MPI_CHECK(MPI_Bcast(x, c, MPI_FLOAT, root, comm));
    return;
  }
  float* buf = staging_buffer(count);
  stage_out(buf, x, count);
  MPF_MPI_CHECK(MPI_Bcast(buf, c, MPI_FLOAT, root, comm));
  stage_in(x, buf, count);
}

void reduce_scatter_block(const float* send, float* recv, int64_t count, MPI_Comm comm) {
  MpiCallScope in_mpi("MPI_Reduce_scatter_block", comm);
  const int size = size_of(comm);
  const int c = count_of(count);
  if (!staged()) {
    Kokkos::fence();
    MPF_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, c, MPI_FLOAT, MPI_SUM, comm));
    return;
  }
  float* buf = staging_buffer(int64_t(size + 1) * count);
  float* mine = buf + int64_t(size) * count;
  stage_out(buf, send, int64_t(size) * count);
  MPF_MPI_CHECK(MPI_Reduce_scatter_block(buf, mine, c, MPI_FLOAT, MPI_SUM, comm));
  stage_in(recv, mine, count);
}

namespace {
void sum_bf16(void* in, void* inout, int* len, MPI_Datatype*) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_bf16(from_bf16(a[i]) + from_bf16(b[i]));
}

// The bf16 collectives' wire buffer in the kernels' memory, grown and kept as the staging buffer
// is; one call at a time uses it.
bf16* wire_buffer(int64_t n) {
  static Kokkos::View<bf16*, MemSpace> buffer;
  static const bool hooked = (Kokkos::push_finalize_hook([] { buffer = {}; }), true);
  (void)hooked;
  if (int64_t(buffer.extent(0)) < n) {
    buffer = {};
    buffer = Kokkos::View<bf16*, MemSpace>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "mpf::mpi::bf16_wire"), n);
  }
  return buffer.data();
}

// Whether a bf16 sum goes through the host copy: when staged, and on a GPU always, as the user
// MPI_Op (bf16_sum) runs on the host and reads its buffers there.
bool sum_on_host() {
  return staged() || kDeviceMemory;
}

// The host copy of n bf16 of the wire, in the staging buffer.
bf16* host_wire(int64_t n) {
  return reinterpret_cast<bf16*>(staging_buffer((n + 1) / 2));
}

// wire[0, size · count) = every rank's wire[rank · count, (rank + 1) · count), its own rounded
// already; staged through the host where MPI needs host memory.
void gather_wire(bf16* wire, int64_t count, MPI_Comm comm) {
  const int size = size_of(comm);
  const int c = count_of(count);
  if (!staged()) {
    Kokkos::fence();
    MPF_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, wire, c, MPI_UINT16_T, comm));
    return;
  }
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  bf16* host = host_wire(int64_t(size) * count);
  const int64_t mine = int64_t(rank) * count;
  copy_to_host(host + mine, wire + mine, size_t(count) * sizeof(bf16), "d2h mpi (staged)");
  MPF_MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, host, c, MPI_UINT16_T, comm));
  copy_from_host(wire, host, size_t(size) * size_t(count) * sizeof(bf16), "h2d mpi (staged)");
}
}  // namespace

MPI_Op bf16_sum() {
  static MPI_Op op = [] {
    MPI_Op o;
    MPI_Op_create(&sum_bf16, /*commute=*/1, &o);
    return o;
  }();
  return op;
}

// A 1-rank group moves nothing, so nothing is rounded: the fp32 calls' identity.
void allreduce_sum_bf16(float* x, int64_t n, MPI_Comm comm) {
  if (size_of(comm) == 1 || n == 0) return;
  MpiCallScope in_mpi("MPI_Allreduce", comm);
  bf16* wire = wire_buffer(n);
  round_to_bf16(wire, x, n);
  bf16* buf = wire;
  if (sum_on_host()) {
    buf = host_wire(n);
    copy_to_host(buf, wire, size_t(n) * sizeof(bf16), "d2h mpi (staged)");
  } else {
    Kokkos::fence();
  }
  for (int64_t done = 0; done < n;) {
    const int count = static_cast<int>(std::min(n - done, kMaxCount));
    MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf + done, count, MPI_UINT16_T, bf16_sum(), comm));
    done += count;
  }
  if (sum_on_host()) copy_from_host(wire, buf, size_t(n) * sizeof(bf16), "h2d mpi (staged)");
  widen_from_bf16(x, wire, n);
}

void allgather_bf16(const float* send, float* recv, int64_t count, MPI_Comm comm) {
  const int size = size_of(comm);
  if (size == 1) return allgather(send, recv, count, comm);
  MpiCallScope in_mpi("MPI_Allgather", comm);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  bf16* wire = wire_buffer(int64_t(size) * count);
  round_to_bf16(wire + int64_t(rank) * count, send, count);
  gather_wire(wire, count, comm);
  widen_from_bf16(recv, wire, int64_t(size) * count);
}

void allgather_in_place_bf16(float* x, int64_t count, MPI_Comm comm) {
  if (size_of(comm) == 1) return;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  allgather_bf16(x + int64_t(rank) * count, x, count, comm);
}

void reduce_scatter_block_bf16(const float* send, float* recv, int64_t count, MPI_Comm comm) {
  const int size = size_of(comm);
  if (size == 1) return reduce_scatter_block(send, recv, count, comm);
  MpiCallScope in_mpi("MPI_Reduce_scatter_block", comm);
  const int c = count_of(count);
  const int64_t all = int64_t(size) * count;
  bf16* wire = wire_buffer(all + count);
  round_to_bf16(wire, send, all);
  if (!sum_on_host()) {
    Kokkos::fence();
    MPF_MPI_CHECK(MPI_Reduce_scatter_block(wire, wire + all, c, MPI_UINT16_T, bf16_sum(), comm));
  } else {
    bf16* host = host_wire(all + count);
    copy_to_host(host, wire, size_t(all) * sizeof(bf16), "d2h mpi (staged)");
    MPF_MPI_CHECK(MPI_Reduce_scatter_block(host, host + all, c, MPI_UINT16_T, bf16_sum(), comm));
    copy_from_host(wire + all, host + all, size_t(count) * sizeof(bf16), "h2d mpi (staged)");
  }
  widen_from_bf16(recv, wire + all, count);
}

namespace {
// MPI_Alltoallv of elements of type `type`, T (float or bf16) in the kernels' memory, staged
// through the floats' host buffer where MPI needs host memory.
template <class T>
void alltoallv_of(const T* send, const int64_t* send_counts, T* recv, const int64_t* recv_counts,
                  MPI_Datatype type, MPI_Comm comm) {
  MpiCallScope in_mpi("MPI_Alltoallv", comm);
  const int size = size_of(comm);
  const size_t n = static_cast<size_t>(size);
  std::vector<int> sc(n), sd(n), rc(n), rd(n);
  int64_t sent = 0, received = 0;
  for (int r = 0; r < size; ++r) {
    sc[size_t(r)] = count_of(send_counts[r]);
    rc[size_t(r)] = count_of(recv_counts[r]);
    sd[size_t(r)] = count_of(sent);
    rd[size_t(r)] = count_of(received);
    sent += send_counts[r];
    received += recv_counts[r];
  }
  if (!staged()) {
    Kokkos::fence();
    MPF_MPI_CHECK(
        MPI_Alltoallv(send, sc.data(), sd.data(), type, recv, rc.data(), rd.data(), type, comm));
    return;
  }
  constexpr int64_t per_float = int64_t(sizeof(float) / sizeof(T));
  T* buf = reinterpret_cast<T*>(staging_buffer((sent + received + per_float - 1) / per_float));
  copy_to_host(buf, send, size_t(sent) * sizeof(T), "d2h mpi (staged)");
  MPF_MPI_CHECK(
      MPI_Alltoallv(buf, sc.data(), sd.data(), type, buf + sent, rc.data(), rd.data(), type, comm));
  copy_from_host(recv, buf + sent, size_t(received) * sizeof(T), "h2d mpi (staged)");
}
}  // namespace

void alltoallv(const float* send, const int64_t* send_counts, float* recv,
               const int64_t* recv_counts, MPI_Comm comm) {
  alltoallv_of(send, send_counts, recv, recv_counts, MPI_FLOAT, comm);
}

void alltoallv(const bf16* send, const int64_t* send_counts, bf16* recv, const int64_t* recv_counts,
               MPI_Comm comm) {
  static_assert(sizeof(bf16) == 2, "bf16 travels as MPI_UINT16_T");
  alltoallv_of(send, send_counts, recv, recv_counts, MPI_UINT16_T, comm);
}

PendingAlltoallv::~PendingAlltoallv() {
  // A request left in flight (an exception unwinding) is waited for: its buffers go with us.
  if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
}

template <class T>
void PendingAlltoallv::start_of(const T* send, const int64_t* send_counts,
                                const int64_t* send_displs, T* recv, const int64_t* recv_counts,
                                const int64_t* recv_displs, MPI_Datatype type, MPI_Comm comm) {
  require(!active(), "an all-to-all was started again before it finished");
  MpiCallScope in_mpi("MPI_Ialltoallv", comm);
  comm_ = comm;
  const size_t n = static_cast<size_t>(size_of(comm));
  sc_.resize(n), sd_.resize(n), rc_.resize(n), rd_.resize(n);
  int64_t send_end = 0, recv_end = 0;
  for (size_t r = 0; r < n; ++r) {
    sc_[r] = count_of(send_counts[r]), sd_[r] = count_of(send_displs[r]);
    rc_[r] = count_of(recv_counts[r]), rd_[r] = count_of(recv_displs[r]);
    send_end = std::max(send_end, send_displs[r] + send_counts[r]);
    recv_end = std::max(recv_end, recv_displs[r] + recv_counts[r]);
  }
  if (!staged()) {
    Kokkos::fence();
    MPF_MPI_CHECK(MPI_Ialltoallv(send, sc_.data(), sd_.data(), type, recv, rc_.data(), rd_.data(),
                                 type, comm, &request_));
    return;
  }
  // Each rank's stretch alone is copied: the stretches between belong to other exchanges.
  host_.resize(size_t(send_end + recv_end) * sizeof(T));
  T* host_send = reinterpret_cast<T*>(host_.data());
  for (size_t r = 0; r < n; ++r) {
    if (sc_[r] > 0) {
      copy_to_host(host_send + sd_[r], send + sd_[r], size_t(sc_[r]) * sizeof(T),
                   "d2h mpi (staged)");
    }
  }
  recv_ = reinterpret_cast<char*>(recv);
  recv_offset_ = size_t(send_end) * sizeof(T);
  element_ = sizeof(T);
  copy_in_ = true;
  MPF_MPI_CHECK(MPI_Ialltoallv(host_send, sc_.data(), sd_.data(), type, host_send + send_end,
                               rc_.data(), rd_.data(), type, comm, &request_));
}

void PendingAlltoallv::start(const float* send, const int64_t* send_counts,
                             const int64_t* send_displs, float* recv, const int64_t* recv_counts,
                             const int64_t* recv_displs, MPI_Comm comm) {
  start_of(send, send_counts, send_displs, recv, recv_counts, recv_displs, MPI_FLOAT, comm);
}

void PendingAlltoallv::start(const bf16* send, const int64_t* send_counts,
                             const int64_t* send_displs, bf16* recv, const int64_t* recv_counts,
                             const int64_t* recv_displs, MPI_Comm comm) {
  start_of(send, send_counts, send_displs, recv, recv_counts, recv_displs, MPI_UINT16_T, comm);
}

void PendingAlltoallv::finish() {
  if (!copy_in_) return;
  copy_in_ = false;
  const char* host = host_.data() + recv_offset_;
  const size_t element = element_;
  for (size_t r = 0; r < rc_.size(); ++r) {
    if (rc_[r] == 0) continue;
    const size_t at = size_t(rd_[r]) * element;
    copy_from_host(recv_ + at, host + at, size_t(rc_[r]) * element, "h2d mpi (staged)");
  }
}

bool PendingAlltoallv::test() {
  if (request_ == MPI_REQUEST_NULL) {
    finish();
    return true;
  }
  int done = 0;
  MPF_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
  if (done) finish();
  return done != 0;
}

void PendingAlltoallv::wait() {
  if (request_ != MPI_REQUEST_NULL) {
    MpiCallScope in_mpi("MPI_Wait", comm_);
    MPF_MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE));
  }
  finish();
}

}  // namespace mpf

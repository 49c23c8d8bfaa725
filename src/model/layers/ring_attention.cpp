#include "model/layers/ring_attention.hpp"

#include <climits>
#include <string>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/transfer.hpp"
#include "parallel/device_mpi.hpp"

namespace mpf {

namespace {
// kv (rows, Ckv) = the columns [Cq, Cq + Ckv) of qkv (rows, W): a rank's K and V, packed to travel.
// (A free function: nvcc takes no device lambda in a private member.)
void pack_kv(float* kv, Tensor qkv, int64_t rows, int W, int Cq, int Ckv) {
  const float* src = qkv.data();
  for_each_2d(
      "mpf::ring_attention_pack", rows, Ckv,
      KOKKOS_LAMBDA(int64_t row, int c) { kv[row * Ckv + c] = src[row * W + Cq + c]; });
}
}  // namespace

RingAttention::RingAttention(MPI_Comm cp, int B, int T, int NH, int KVH, int hs, int window,
                             AttentionPath path)
    : cp_(cp), B_(B), T_(T), NH_(NH), KVH_(KVH), hs_(hs), window_(window), path_(path) {
  MPI_Comm_rank(cp, &rank_);
  MPI_Comm_size(cp, &ranks_);
  if (T % (2 * ranks_) != 0 && ranks_ > 1) {
    MPF_FATAL("RingAttention: T = " + std::to_string(T) + " is not a multiple of 2 x " +
              std::to_string(ranks_) + " CP ranks");
  }
  Tl_ = T / ranks_;
  count_ = int64_t(B) * Tl_ * 2 * KVH * hs;
  require(count_ <= INT_MAX, "a context-parallel block of " + std::to_string(count_) +
                                 " floats exceeds MPI's int count; use a smaller micro-batch or "
                                 "more CP ranks");
  for (int r = 0; r < ranks_; ++r) rows_of_.push_back(rows_of(r, ranks_, T));
  if (ranks_ == 1) return;
  for (int i = 0; i < 2; ++i) {
    kv_[i] = Slab(Kokkos::view_alloc(Kokkos::WithoutInitializing, "mpf::ring::kv"), count_);
    dkv_[i] = Slab(Kokkos::view_alloc(Kokkos::WithoutInitializing, "mpf::ring::dkv"), count_);
  }
  staged_ = staged();
  if (staged_) {
    for (auto& h : host_) {
      h = Kokkos::View<float*, PinnedSpace>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, "mpf::ring::host"), count_);
    }
  }
}

PositionRuns RingAttention::rows_of(int rank, int ranks, int T) {
  if (ranks == 1) return PositionRuns::contiguous(T);
  const int chunk = T / (2 * ranks);
  return PositionRuns::two(chunk, rank * chunk, (2 * ranks - 1 - rank) * chunk);
}

int64_t RingAttention::bytes(int ranks, int B, int T, int KVH, int hs, bool staged) {
  if (ranks == 1) return 0;
  const int64_t block = int64_t(B) * (T / ranks) * 2 * KVH * hs * int64_t(sizeof(float));
  return (4 + (staged ? 4 : 0)) * block;  // K/V and dK/dV twice each, and their host copies
}

int64_t RingAttention::buffer_bytes() const {
  int64_t floats = 0;
  for (const Slab& s : {kv_[0], kv_[1], dkv_[0], dkv_[1]}) floats += int64_t(s.extent(0));
  for (const auto& h : host_) floats += int64_t(h.extent(0));
  return floats * int64_t(sizeof(float));
}

AttentionInputs RingAttention::against(Tensor qkv, const float* kv, int owner,
                                       const int32_t* doc) const {
  AttentionInputs x = packed_attention(qkv, B_, NH_, KVH_, hs_, rows(), doc, window_);
  x.k = kv;
  x.v = kv + int64_t(KVH_) * hs_;
  x.ldkv = int64_t(2) * KVH_ * hs_;
  x.keys = rows_of_[size_t(owner)];
  return x;
}

void RingAttention::start(Exchange& x, const float* send, float* send_host, float* recv,
                          float* recv_host, int tag) {
  const int next = (rank_ + 1) % ranks_, prev = (rank_ + ranks_ - 1) % ranks_;
  const int n = static_cast<int>(count_);
  x.recv_buf = recv;
  x.recv_host = staged_ ? recv_host : nullptr;
  MPF_MPI_CHECK(MPI_Irecv(staged_ ? recv_host : recv, n, MPI_FLOAT, prev, tag, cp_, &x.recv));
  const float* data = send;
  if (staged_) {
    copy_to_host(send_host, send, size_t(count_) * sizeof(float), "d2h ring attention (staged)");
    data = send_host;
  } else {
    Kokkos::fence();  // the kernels that wrote `send` are done before MPI reads it
  }
  MPF_MPI_CHECK(MPI_Isend(data, n, MPI_FLOAT, next, tag, cp_, &x.send));
}

void RingAttention::finish(Exchange& x) {
  MPF_MPI_CHECK(MPI_Wait(&x.recv, MPI_STATUS_IGNORE));
  MPF_MPI_CHECK(MPI_Wait(&x.send, MPI_STATUS_IGNORE));
  if (x.recv_host) {
    copy_from_host(x.recv_buf, x.recv_host, size_t(count_) * sizeof(float),
                   "h2d ring attention (staged)");
  }
}

void RingAttention::forward(Tensor out, Tensor lse, Tensor qkv, const int32_t* doc_start,
                            Tensor row_max) {
  if (ranks_ == 1) {
    attention_forward(path_, out, lse,
                      packed_attention(qkv, B_, NH_, KVH_, hs_, rows(), doc_start, window_), false,
                      row_max);
    return;
  }
  const int W = (NH_ + 2 * KVH_) * hs_, Cq = NH_ * hs_;
  pack_kv(kv_[0].data(), qkv, int64_t(B_) * Tl_, W, Cq, 2 * KVH_ * hs_);
  int cur = 0;
  for (int s = 0; s < ranks_; ++s) {
    // The next block is in transit while this one is attended over.
    Exchange x;
    const bool more = s + 1 < ranks_;
    if (more) start(x, kv_[cur].data(), host_[0].data(), kv_[1 - cur].data(), host_[1].data(), s);
    const int owner = (rank_ - s + ranks_) % ranks_;
    attention_forward(path_, out, lse, against(qkv, kv_[cur].data(), owner, doc_start), s > 0,
                      row_max);
    if (more) finish(x);
    cur = 1 - cur;
  }
}

void RingAttention::backward_input(Tensor dqkv, Tensor delta, Tensor dout, Tensor qkv, Tensor out,
                                   Tensor lse, const int32_t* doc_start) {
  const int W = (NH_ + 2 * KVH_) * hs_, Cq = NH_ * hs_, Ck = KVH_ * hs_;
  attention_backward_delta(delta, out, dout, B_, Tl_, NH_, hs_);
  float* dq = dqkv.data();
  if (ranks_ == 1) {
    const AttentionInputs x = packed_attention(qkv, B_, NH_, KVH_, hs_, rows(), doc_start, window_);
    attention_backward(path_, dq, W, false, dq + Cq, dq + Cq + Ck, W, false, dout, lse, delta, x);
    return;
  }
  pack_kv(kv_[0].data(), qkv, int64_t(B_) * Tl_, W, Cq, 2 * Ck);
  int cur = 0;
  for (int s = 0; s < ranks_; ++s) {
    Exchange kv;
    const bool more = s + 1 < ranks_;
    if (more) {
      start(kv, kv_[cur].data(), host_[0].data(), kv_[1 - cur].data(), host_[1].data(), 2 * s);
    }
    // The visiting block's dK and dV accumulator: its owner starts it (written, not added).
    const int owner = (rank_ - s + ranks_) % ranks_;
    float* acc = dkv_[cur].data();
    attention_backward(path_, dq, W, s > 0, acc, acc + Ck, 2 * Ck, s > 0, dout, lse, delta,
                       against(qkv, kv_[cur].data(), owner, doc_start));
    // On with it; the next block's accumulator comes from the previous rank. After the last
    // step it is this rank's own block's, complete.
    Exchange d;
    start(d, acc, host_[2].data(), dkv_[1 - cur].data(), host_[3].data(), 2 * s + 1);
    if (more) finish(kv);
    finish(d);
    cur = 1 - cur;
  }
  const float* own = dkv_[cur].data();
  for_each_2d(
      "mpf::ring_attention_unpack", int64_t(B_) * Tl_, 2 * Ck,
      KOKKOS_LAMBDA(int64_t row, int c) { dq[row * W + Cq + c] = own[row * 2 * Ck + c]; });
}

}  // namespace mpf

#include "optim/grad_buckets.hpp"

#include <algorithm>
#include <climits>

#include "core/error.hpp"
#include "core/transfer.hpp"
#include "parallel/device_mpi.hpp"
#include "parallel/rank_activity.hpp"

namespace mpf {

namespace {
int64_t round_up(int64_t n, int64_t to) {
  return (n + to - 1) / to * to;
}
// A bucket's collective, as a hung rank's record names it (parallel/rank_activity.hpp).
const char* bucket_call(bool zero) {
  return zero ? "MPI_Ireduce_scatter" : "MPI_Iallreduce";
}

constexpr bool kHostMemory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;

// dst[0, n) = to_bf16(src[0, n)) into host memory; through `dev` (a device copy) on a GPU.
void round_to_host(bf16* dst, bf16* dev, const float* src, int64_t n) {
  if (kHostMemory) {
    round_to_bf16(dst, src, n);
    Kokkos::fence();
  } else {
    round_to_bf16(dev, src, n);
    copy_to_host(dst, dev, size_t(n) * sizeof(bf16), "d2h dp gradients (bf16)");
  }
}

// dst[0, n) = from_bf16(src[0, n)) from host memory; through `dev` on a GPU.
void widen_from_host(float* dst, bf16* dev, const bf16* src, int64_t n) {
  if (kHostMemory) {
    widen_from_bf16(dst, src, n);
  } else {
    copy_from_host(dev, src, size_t(n) * sizeof(bf16), "h2d dp gradients (bf16)");
    widen_from_bf16(dst, dev, n);
  }
}
}  // namespace

int DataParallelGrads::part_index(ModelPart part) const {
  switch (part.kind) {
    case ModelPart::Kind::kBlock:
      if (part.block < 0 || part.block >= blocks_) MPF_FATAL("a block this stage does not hold");
      return part.block;
    case ModelPart::Kind::kHead:
      return blocks_;
    case ModelPart::Kind::kEmbedding:
      return blocks_ + 1;
  }
  return -1;
}

DataParallelGrads::DataParallelGrads(const Parameters& grads, const TpShard& shard, MPI_Comm dp,
                                     int64_t bucket_elems, bool zero, bool tied_wte,
                                     MPI_Comm expert_dp, int stage)
    : dp_(dp),
      expert_dp_(expert_dp == MPI_COMM_NULL ? dp : expert_dp),
      blocks_(shard.local_layers()),
      zero_(zero),
      stage_(zero ? stage : 0),
      grads_(grads.slab.data()),
      layout_(grads.layout) {
  MPI_Comm_size(dp, &ranks_);
  MPI_Comm_rank(dp, &rank_);
  MPI_Comm_size(expert_dp_, &expert_ranks_);
  MPI_Comm_rank(expert_dp_, &expert_rank_);
  const bool split_experts = expert_dp != MPI_COMM_NULL;
  const int64_t padded = int64_t(grads.slab.extent(0));
  if (padded % ranks_ != 0) MPF_FATAL("gradient slab not padded to a multiple of the DP size");
  const int head = part_index({ModelPart::Kind::kHead}),
            embedding = part_index({ModelPart::Kind::kEmbedding});
  // The parts whose W writes a piece: a block's slice its block; wpe the embedding, lnf the head;
  // wte each of the embedding and the LM head this stage holds, then the tied sum.
  const std::vector<SlabPiece>& pieces = layout_.pieces();
  std::vector<std::vector<int>> parts_of(pieces.size());
  for (size_t k = 0; k < pieces.size(); ++k) {
    const SlabPiece& p = pieces[k];
    const TensorPlace place = place_of(p.tensor, shard.cfg);  // wte is in the head when tied
    std::vector<int>& parts = parts_of[k];
    if (p.block >= 0) parts.push_back(p.block);
    const bool tied = place == TensorPlace::kTied;
    if ((tied || place == TensorPlace::kEmbedding) && shard.has_embedding)
      parts.push_back(embedding);
    if ((tied || place == TensorPlace::kHead) && shard.has_head) parts.push_back(head);
    if (tied && tied_wte) parts.push_back(tied_sum_index());
  }

  // Cut at the pieces' boundaries where the parts change (between blocks, around the edge
  // tensors) once a bucket holds bucket_elems; always between the edge tensors and the blocks, so
  // the first and last blocks do not wait for the embedding or the head; and always after a tied
  // wte, which is final only after the schedule. An end rounds up to a multiple of D: the few
  // elements it takes from the next piece only make this bucket wait for that piece's part too, and
  // the next piece in slab order is a later block, whose W runs earlier. At most INT_MAX / 2
  // elements per collective.
  // Under EP a bucket never crosses between the experts' pieces and the rest: it ends exactly
  // where the kind changes (kind_end, the end of the run of pieces of one kind; the padding is
  // the last run's).
  auto is_experts = [&](size_t k) { return split_experts && shard.is_expert(pieces[k].tensor); };
  std::vector<int64_t> kind_end(pieces.size(), padded);
  for (size_t k = pieces.size(); k-- > 1;) {  // from the back: piece k - 1 against piece k
    const SlabPiece& p = pieces[k - 1];
    kind_end[k - 1] = is_experts(k - 1) == is_experts(k) ? kind_end[k] : p.offset + p.length;
  }
  const int64_t max_len = (INT_MAX / 2) / ranks_ * ranks_;
  const int64_t target = std::max<int64_t>(bucket_elems, 1);
  int64_t begin = 0;
  // ZeRO-2/3 cut exactly at a block's edges: each block is its own buckets.
  auto cut = [&](int64_t end, int64_t limit, bool experts, bool exact = false) {
    end = std::min(exact ? end : round_up(end, ranks_), limit);
    if (end <= begin) return;
    GradBucket b;
    b.begin = begin;
    b.end = end;
    b.experts = experts;
    buckets_.push_back(b);
    begin = end;
  };
  for (size_t k = 0; k < pieces.size(); ++k) {
    const SlabPiece& p = pieces[k];
    const int64_t end = p.offset + p.length;
    while (end - begin > max_len) cut(begin + max_len, kind_end[k], is_experts(k));
    const bool last = k + 1 == pieces.size();
    const bool boundary = last || parts_of[k + 1] != parts_of[k];
    const bool edge_to_blocks = !last && (p.block < 0) != (pieces[k + 1].block < 0);
    const bool tied_sum = shard.is_tied(p.tensor) && tied_wte;
    const bool kind_changes = !last && is_experts(k) != is_experts(k + 1);
    const bool block_edge = stage_ >= 2 && !last && p.block != pieces[k + 1].block &&
                            (p.block >= 0 || pieces[k + 1].block >= 0);
    if (block_edge) {
      cut(end, kind_end[k], is_experts(k), /*exact=*/true);
    } else if (kind_changes ||
               (boundary && (end - begin >= target || edge_to_blocks || tied_sum))) {
      cut(end, kind_end[k], is_experts(k));
    }
  }
  cut(padded, padded, false);
  // Each rank's part of each bucket: even when it divides, else one more on the first ranks.
  for (GradBucket& b : buckets_) {
    const int ranks = b.experts ? expert_ranks_ : ranks_;
    const int64_t n = b.end - b.begin;
    for (int r = 0, at = 0; r < ranks; ++r) {
      b.counts.push_back(int(n / ranks + (r < n % ranks ? 1 : 0)));
      b.displs.push_back(at);
      at += b.counts.back();
    }
  }

  // Each bucket's parts, the buckets each part releases, and the ZeRO shard offsets.
  buckets_of_part_.resize(size_t(tied_sum_index() + 1));
  int64_t shard_elems = 0;
  size_t first_piece = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    GradBucket& b = buckets_[i];
    b.shard_offset = shard_elems;
    shard_elems += b.counts[size_t(rank_in(b))];
    while (first_piece < pieces.size() &&
           pieces[first_piece].offset + pieces[first_piece].length <= b.begin)
      ++first_piece;
    for (size_t k = first_piece; k < pieces.size() && pieces[k].offset < b.end; ++k) {
      for (int part : parts_of[k]) {
        if (std::find(b.parts.begin(), b.parts.end(), part) == b.parts.end()) {
          b.parts.push_back(part);
          buckets_of_part_[size_t(part)].push_back(i);
        }
      }
    }
  }
  pooled_.assign(buckets_.size(), false);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const std::vector<int>& parts = buckets_[i].parts;
    pooled_[i] = stage_ >= 2 && parts.size() == 1 && parts[0] < blocks_;
  }
  waiting_.resize(buckets_.size());
  for (size_t i = 0; i < buckets_.size(); ++i) waiting_[i] = int(buckets_[i].parts.size());
  requests_.assign(buckets_.size(), MPI_REQUEST_NULL);
  started_.assign(buckets_.size(), false);
  if (zero_) shard_ = Slab("mpf::zero::grad_shard", shard_elems);
  if (staged() && (ranks_ > 1 || expert_ranks_ > 1 || zero_)) {
    host_slab_ = Kokkos::View<float*, PinnedSpace>("mpf::dp::host_slab", padded);
    if (zero_) host_shard_ = Kokkos::View<float*, PinnedSpace>("mpf::dp::host_shard", shard_elems);
  }
}

DataParallelGrads::~DataParallelGrads() {
  for (MPI_Request& r : requests_) {
    if (r != MPI_REQUEST_NULL) MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
}

void DataParallelGrads::set_bf16_reduction(bool on) {
  if (!on || (ranks_ == 1 && expert_ranks_ == 1 && !zero_)) return;  // nothing is summed
  if (stage_ >= 2) MPF_FATAL("a bf16 gradient reduction under ZeRO-2/3");
  const int64_t padded = buckets_.empty() ? 0 : buckets_.back().end;
  host16_ = Kokkos::View<bf16*, PinnedSpace>("mpf::dp::host16", padded);
  if (zero_)
    host16_shard_ = Kokkos::View<bf16*, PinnedSpace>("mpf::dp::host16_shard", shard_size());
  if (!kHostMemory) dev16_ = Bf16Slab("mpf::dp::dev16", padded);
}

void DataParallelGrads::start(size_t i) {
  const GradBucket& b = buckets_[i];
  const int n = static_cast<int>(b.end - b.begin);
  started_[i] = true;
  const int ranks = int(b.counts.size());
  if (ranks == 1 && !zero_) return;  // nothing to sum
  if (host16_.data()) {
    bf16* wire = host16_.data() + b.begin;
    round_to_host(wire, dev16_.data() ? dev16_.data() + b.begin : nullptr, grads_ + b.begin, n);
    MpiCallScope in_mpi(bucket_call(zero_), comm(b));
    if (zero_) {
      MPF_MPI_CHECK(MPI_Ireduce_scatter(wire, host16_shard_.data() + b.shard_offset,
                                        b.counts.data(), MPI_UINT16_T, bf16_sum(), comm(b),
                                        &requests_[i]));
    } else {
      MPF_MPI_CHECK(
          MPI_Iallreduce(MPI_IN_PLACE, wire, n, MPI_UINT16_T, bf16_sum(), comm(b), &requests_[i]));
    }
    return;
  }
  float* grads = grads_;
  float* shard = shard_.data();
  if (host_slab_.data()) {
    grads = host_slab_.data();
    shard = host_shard_.data();
    copy_to_host(grads + b.begin, grads_ + b.begin, size_t(n) * sizeof(float),
                 "d2h dp gradients (staged)");
  }
  MpiCallScope in_mpi(bucket_call(zero_), comm(b));
  if (zero_ && n % ranks == 0) {
    MPF_MPI_CHECK(MPI_Ireduce_scatter_block(grads + b.begin, shard + b.shard_offset, n / ranks,
                                            MPI_FLOAT, MPI_SUM, comm(b), &requests_[i]));
  } else if (zero_) {
    MPF_MPI_CHECK(MPI_Ireduce_scatter(grads + b.begin, shard + b.shard_offset, b.counts.data(),
                                      MPI_FLOAT, MPI_SUM, comm(b), &requests_[i]));
  } else {
    MPF_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, grads + b.begin, n, MPI_FLOAT, MPI_SUM, comm(b),
                                 &requests_[i]));
  }
}

void DataParallelGrads::part_done(ModelPart part) {
  part_done(part_index(part));
}

void DataParallelGrads::tied_sum_done() {
  part_done(tied_sum_index());
}

void DataParallelGrads::part_done(int part) {
  bool fenced = false;
  for (size_t i : buckets_of_part_[size_t(part)]) {
    if (--waiting_[i] > 0 || started_[i] || pooled_[i]) continue;
    // The kernels that wrote these gradients must be done (a staged copy waits for them itself).
    if (!fenced && !host_slab_.data()) Kokkos::fence();
    fenced = true;
    start(i);
  }
  // MPICH progresses nonblocking collectives inside MPI calls: give it one.
  int done = 0;
  MPI_Testall(int(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
}

void DataParallelGrads::finish() {
  if (!host_slab_.data()) Kokkos::fence();
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (!started_[i] && !pooled_[i]) start(i);
  }
  {
    // Waited on as one: the record names the kind of bucket collective and the main group.
    MpiCallScope in_mpi(bucket_call(zero_), dp_);
    MPF_MPI_CHECK(MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
  }
  if (host16_.data()) {
    // The bf16 sums widened back: the ZeRO shard, or each bucket that was summed.
    if (zero_) {
      widen_from_host(shard_.data(), dev16_.data(), host16_shard_.data(), shard_size());
    } else {
      for (const GradBucket& b : buckets_) {
        if (b.counts.size() == 1) continue;
        widen_from_host(grads_ + b.begin, dev16_.data() ? dev16_.data() + b.begin : nullptr,
                        host16_.data() + b.begin, b.end - b.begin);
      }
    }
  } else if (zero_ && host_shard_.data()) {
    copy_from_host(shard_.data(), host_shard_.data(), host_shard_.extent(0) * sizeof(float),
                   "h2d dp gradients (staged)");
  } else if (host_slab_.data()) {
    // The summed buckets come back, as one copy per stretch of them: under EP a bucket whose
    // group is one rank was never sent.
    for (size_t i = 0; i < buckets_.size();) {
      size_t j = i;
      while (j < buckets_.size() && buckets_[j].counts.size() > 1) ++j;
      if (j > i) {
        const int64_t begin = buckets_[i].begin, end = buckets_[j - 1].end;
        copy_from_host(grads_ + begin, host_slab_.data() + begin,
                       size_t(end - begin) * sizeof(float), "h2d dp gradients (staged)");
      }
      i = j + 1;
    }
  }
  if (replicas_ != MPI_COMM_NULL && zero_) {
    // HSDP: the node's sums added over the nodes (ZeRO-2/3's blocks landed in the shard before).
    Kokkos::fence();
    MpiCallScope in_mpi("MPI_Allreduce", replicas_);
    allreduce_sum(shard_.data(), shard_size(), replicas_);
  }
  std::fill(started_.begin(), started_.end(), false);
  for (size_t i = 0; i < buckets_.size(); ++i) waiting_[i] = int(buckets_[i].parts.size());
}

std::vector<OptimizerSegment> DataParallelGrads::zero_segments() const {
  // This rank's part of each bucket, cut where it crosses from one piece of the slab to the next
  // (a segment lies in one tensor); the padding after the last piece holds no parameter.
  std::vector<OptimizerSegment> out;
  for (const GradBucket& b : buckets_) {
    const size_t r = size_t(rank_in(b));
    const int64_t p0 = b.begin + b.displs[r], p1 = std::min(p0 + b.counts[r], layout_.count());
    for (int64_t lo = p0; lo < p1;) {
      const SlabPiece& piece = layout_.piece_at(lo);
      const int64_t hi = std::min(p1, piece.offset + piece.length);
      const int64_t in_shard = b.shard_offset + (lo - p0);
      out.push_back({lo, in_shard, in_shard, hi - lo, piece.tensor});
      lo = hi;
    }
  }
  return out;
}

void DataParallelGrads::allgather_params(float* params) {
  // Staged, the host slab (free again once the gradients came back) gathers the parameters: each
  // rank's updated part goes to it, the whole slab comes back.
  float* gathered = host_slab_.data() ? host_slab_.data() : params;
  if (!host_slab_.data()) Kokkos::fence();
  std::vector<MPI_Request> gathers(buckets_.size(), MPI_REQUEST_NULL);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (stage_ == 3 && pooled_[i]) continue;  // gathered block by block before each use
    const GradBucket& b = buckets_[i];
    const size_t r = size_t(rank_in(b));
    if (host_slab_.data()) {
      const int64_t mine = b.begin + b.displs[r];
      copy_to_host(gathered + mine, params + mine, size_t(b.counts[r]) * sizeof(float),
                   "d2h zero parameters (staged)");
    }
    MPF_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, gathered + b.begin,
                                  b.counts.data(), b.displs.data(), MPI_FLOAT, comm(b),
                                  &gathers[i]));
  }
  MpiCallScope in_mpi("MPI_Iallgatherv", dp_);
  MPF_MPI_CHECK(MPI_Waitall(int(gathers.size()), gathers.data(), MPI_STATUSES_IGNORE));
  if (host_slab_.data()) {
    copy_from_host(params, gathered, host_slab_.extent(0) * sizeof(float),
                   "h2d zero parameters (staged)");
  }
}

}  // namespace mpf

#include "parallel/grad_buckets.hpp"

#include <algorithm>
#include <climits>

#include "core/error.hpp"

namespace mpf {

namespace {
// The backward event after which tensor i's elements from a on are final (gpt_backward's
// numbering over this stage's L blocks).
int ready_event(int tensor, int64_t a, const Parameters& p, bool tied_wte) {
  const int L = static_cast<int>(p.sizes[2] / p.cfg.channels);  // ln1w: C per block held
  if (tensor == 0 && tied_wte) return L + 2;         // after the schedule: the stages' sum first
  if (tensor == 0 || tensor == 1) return L + 1;      // wte, wpe: the embedding's W
  if (tensor >= kNumParameterTensors - 2) return 0;  // lnfw, lnfb: the head's W
  const int lowest_layer = static_cast<int>(a / (p.sizes[tensor] / L));
  return 1 + (L - 1 - lowest_layer);  // the lowest layer's W is last
}
}  // namespace

DataParallelGrads::DataParallelGrads(const Parameters& grads, MPI_Comm dp, int64_t bucket_elems,
                                     bool zero, bool tied_wte)
    : dp_(dp), zero_(zero), grads_(grads.slab.data()) {
  MPI_Comm_size(dp, &ranks_);
  MPI_Comm_rank(dp, &rank_);
  tensor_offsets_.push_back(0);
  for (int64_t s : grads.sizes) tensor_offsets_.push_back(tensor_offsets_.back() + s);
  const int64_t padded = int64_t(grads.slab.extent(0));
  if (padded % ranks_ != 0) MPF_FATAL("gradient slab not padded to a multiple of the DP size");
  // Bucket lengths: multiples of D, at most INT_MAX per collective.
  int64_t len = std::max<int64_t>(bucket_elems, 1);
  len = std::min<int64_t>(len, (INT_MAX / 2) / ranks_ * ranks_);
  len = (len + ranks_ - 1) / ranks_ * ranks_;
  int64_t shard = 0;
  for (int64_t begin = 0; begin < padded; begin += len) {
    GradBucket b;
    b.begin = begin;
    b.end = std::min(begin + len, padded);
    b.shard_offset = shard;
    shard += (b.end - b.begin) / ranks_;
    for (int i = 0; i < kNumParameterTensors; ++i) {
      const int64_t lo = std::max(b.begin, tensor_offsets_[i]);
      const int64_t hi = std::min(b.end, tensor_offsets_[i + 1]);
      if (lo < hi)
        b.ready_event =
            std::max(b.ready_event, ready_event(i, lo - tensor_offsets_[i], grads, tied_wte));
    }
    buckets_.push_back(b);
  }
  requests_.assign(buckets_.size(), MPI_REQUEST_NULL);
  started_.assign(buckets_.size(), false);
  if (zero_) shard_ = Slab("mpf::zero::grad_shard", shard);
}

DataParallelGrads::~DataParallelGrads() {
  for (MPI_Request& r : requests_) {
    if (r != MPI_REQUEST_NULL) MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
}

void DataParallelGrads::start(size_t i) {
  const GradBucket& b = buckets_[i];
  const int n = static_cast<int>(b.end - b.begin);
  started_[i] = true;
  if (ranks_ == 1 && !zero_) return;  // nothing to sum
  if (zero_) {
    MPF_MPI_CHECK(MPI_Ireduce_scatter_block(grads_ + b.begin, shard_.data() + b.shard_offset,
                                            n / ranks_, MPI_FLOAT, MPI_SUM, dp_, &requests_[i]));
  } else {
    MPF_MPI_CHECK(
        MPI_Iallreduce(MPI_IN_PLACE, grads_ + b.begin, n, MPI_FLOAT, MPI_SUM, dp_, &requests_[i]));
  }
}

void DataParallelGrads::start_ready(int event) {
  bool any = false;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (!started_[i] && buckets_[i].ready_event <= event) {
      if (!any) Kokkos::fence();  // the kernels that wrote these gradients must be done
      any = true;
      start(i);
    }
  }
  // MPICH progresses nonblocking collectives inside MPI calls: give it one.
  int done = 0;
  MPI_Testall(int(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
}

void DataParallelGrads::finish() {
  Kokkos::fence();
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (!started_[i]) start(i);
  }
  MPF_MPI_CHECK(MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
  std::fill(started_.begin(), started_.end(), false);
}

std::vector<OptimizerSegment> DataParallelGrads::zero_segments() const {
  std::vector<OptimizerSegment> out;
  for (const GradBucket& b : buckets_) {
    const int64_t part = (b.end - b.begin) / ranks_;
    const int64_t p0 = b.begin + rank_ * part, p1 = p0 + part;
    for (int i = 0; i < kNumParameterTensors; ++i) {
      const int64_t lo = std::max(p0, tensor_offsets_[i]),
                    hi = std::min(p1, tensor_offsets_[i + 1]);
      if (lo >= hi) continue;
      const int64_t in_shard = b.shard_offset + (lo - p0);
      out.push_back({lo, in_shard, in_shard, hi - lo, i});
    }
  }
  return out;
}

void DataParallelGrads::allgather_params(float* params) {
  Kokkos::fence();
  std::vector<MPI_Request> gathers(buckets_.size(), MPI_REQUEST_NULL);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const GradBucket& b = buckets_[i];
    const int part = static_cast<int>((b.end - b.begin) / ranks_);
    MPF_MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, params + b.begin, part,
                                 MPI_FLOAT, dp_, &gathers[i]));
  }
  MPF_MPI_CHECK(MPI_Waitall(int(gathers.size()), gathers.data(), MPI_STATUSES_IGNORE));
}

}  // namespace mpf

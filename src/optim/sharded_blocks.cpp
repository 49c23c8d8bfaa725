#include "optim/sharded_blocks.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "parallel/rank_activity.hpp"

namespace mpf {

ShardedBlocks::ShardedBlocks(DataParallelGrads& dp, Parameters& params, Parameters& grads,
                             int stage)
    : dp_(dp), params_(params), grads_(grads), stage_(stage) {
  const int blocks = params.layout.blocks();
  for (int l = 0; l < blocks; ++l) {
    const auto [lo, hi] = params.layout.block_range(l);
    block_elems_ = std::max(block_elems_, hi - lo);
    int64_t part = 0;
    for (size_t i : dp.block_buckets(l)) {
      const GradBucket& b = dp.buckets()[i];
      if (!dp.pooled(i) || b.begin < lo || b.end > hi) {
        MPF_FATAL("ZeRO-2/3: a block's gradient buckets do not lie within it");
      }
      part += b.counts[size_t(dp.bucket_rank(i))];
    }
    part_elems_ = std::max(part_elems_, part);
  }
  for (Reducing& r : reducing_) {
    r.whole = Slab(Kokkos::view_alloc(Kokkos::WithoutInitializing, "mpf::zero::block_grads"),
                   block_elems_);
    r.part =
        Slab(Kokkos::view_alloc(Kokkos::WithoutInitializing, "mpf::zero::block_sum"), part_elems_);
  }
  if (stage_ == 3) {
    for (Gathered& g : gathered_) {
      g.buf = Slab(Kokkos::view_alloc(Kokkos::WithoutInitializing, "mpf::zero::block_params"),
                   block_elems_);
    }
  }
  params_.t.gate = this;
}

ShardedBlocks::~ShardedBlocks() {
  params_.t.gate = nullptr;
  for (Gathered& g : gathered_) {
    for (MPI_Request& q : g.requests) {
      if (q != MPI_REQUEST_NULL) MPI_Wait(&q, MPI_STATUS_IGNORE);
    }
  }
  for (Reducing& r : reducing_) {
    for (MPI_Request& q : r.requests) {
      if (q != MPI_REQUEST_NULL) MPI_Wait(&q, MPI_STATUS_IGNORE);
    }
  }
}

std::vector<std::pair<int64_t, int64_t>> ShardedBlocks::owned_ranges() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t i = 0; i < dp_.buckets().size(); ++i) {
    if (!dp_.pooled(i)) continue;
    const GradBucket& b = dp_.buckets()[i];
    const size_t r = size_t(dp_.bucket_rank(i));
    const int64_t lo = b.begin + b.displs[r];
    out.push_back({lo, lo + b.counts[r]});
  }
  return out;
}

void ShardedBlocks::drop(Gathered& g) {
  wait(g);
  if (g.block >= 0) {  // its views back at the slab (this rank's shard alone is there)
    point_block(params_.t, params_.layout, g.block, params_.slab.data() + begin_of(g.block));
  }
  g.block = -1;
}

void ShardedBlocks::wait(Gathered& g) {
  if (g.requests.empty()) return;
  MpiCallScope in_mpi("MPI_Iallgatherv", dp_.bucket_comm(dp_.block_buckets(g.block)[0]));
  MPF_MPI_CHECK(MPI_Waitall(int(g.requests.size()), g.requests.data(), MPI_STATUSES_IGNORE));
  g.requests.clear();
}

ShardedBlocks::Gathered& ShardedBlocks::gather(int block) {
  for (Gathered& g : gathered_) {
    if (g.block == block) return g;
  }
  // The least recently used buffer: the block before the one in use.
  Gathered& g = gathered_[0].used <= gathered_[1].used ? gathered_[0] : gathered_[1];
  drop(g);
  g.block = block;
  g.used = ++clock_;
  // The update wrote this rank's shard in the slab: its kernels must be done.
  Kokkos::fence();
  const int64_t begin = begin_of(block);
  for (size_t i : dp_.block_buckets(block)) {
    const GradBucket& b = dp_.buckets()[i];
    const size_t r = size_t(dp_.bucket_rank(i));
    const MPI_Comm comm = dp_.bucket_comm(i);
    g.requests.push_back(MPI_REQUEST_NULL);
    MpiCallScope in_mpi("MPI_Iallgatherv", comm);
    MPF_MPI_CHECK(MPI_Iallgatherv(params_.slab.data() + b.begin + b.displs[r], b.counts[r],
                                  MPI_FLOAT, g.buf.data() + (b.begin - begin), b.counts.data(),
                                  b.displs.data(), MPI_FLOAT, comm, &g.requests.back()));
  }
  return g;
}

void ShardedBlocks::enter(int block, Use use, int next) {
  if (stage_ == 3) {
    Gathered& g = gather(block);
    g.used = ++clock_;
    // The next block's gather goes out before this one is waited on: it runs during this block.
    if (next >= 0) gather(next);
    wait(g);
    point_block(params_.t, params_.layout, block, g.buf.data());
  }
  if (use != Use::kWeight) return;
  // A buffer for the block's gradients: a free one, or the one whose reduction started first.
  Reducing* r = nullptr;
  for (Reducing& c : reducing_) {
    if (!c.in_flight && (!r || r->in_flight)) r = &c;
  }
  if (!r) r = reducing_[0].started <= reducing_[1].started ? &reducing_[0] : &reducing_[1];
  complete(*r);
  r->block = block;
  const int64_t n = grads_.layout.block_range(block).second - begin_of(block);
  fill(r->whole.data(), n, 0.0f);
  point_block(grads_.t, grads_.layout, block, r->whole.data());
}

void ShardedBlocks::weight_done(int block) {
  Reducing* r = nullptr;
  for (Reducing& c : reducing_) {
    if (c.block == block && !c.in_flight) r = &c;
  }
  if (!r) MPF_FATAL("ZeRO-2/3: a block's W ended without its gradient buffer");
  // W's kernels wrote the buffer.
  Kokkos::fence();
  const int64_t begin = begin_of(block);
  int64_t at = 0;
  for (size_t i : dp_.block_buckets(block)) {
    const GradBucket& b = dp_.buckets()[i];
    const int n = int(b.end - b.begin), ranks = int(b.counts.size());
    const MPI_Comm comm = dp_.bucket_comm(i);
    r->requests.push_back(MPI_REQUEST_NULL);
    MpiCallScope in_mpi("MPI_Ireduce_scatter", comm);
    if (n % ranks == 0) {
      MPF_MPI_CHECK(MPI_Ireduce_scatter_block(r->whole.data() + (b.begin - begin),
                                              r->part.data() + at, n / ranks, MPI_FLOAT, MPI_SUM,
                                              comm, &r->requests.back()));
    } else {
      MPF_MPI_CHECK(MPI_Ireduce_scatter(r->whole.data() + (b.begin - begin), r->part.data() + at,
                                        b.counts.data(), MPI_FLOAT, MPI_SUM, comm,
                                        &r->requests.back()));
    }
    at += b.counts[size_t(dp_.bucket_rank(i))];
  }
  r->in_flight = true;
  r->started = ++clock_;
  // The gradient views back at the slab: nothing may write the buffer while it is sent.
  point_block(grads_.t, grads_.layout, block, grads_.slab.data() + begin);
  // MPICH progresses nonblocking collectives inside MPI calls: give it one.
  int done = 0;
  MPI_Testall(int(r->requests.size()), r->requests.data(), &done, MPI_STATUSES_IGNORE);
}

namespace {
// into += from, n elements. A free function: nvcc refuses an extended lambda inside a private
// member function.
void add_block_sum(float* into, const float* from, int64_t n) {
  for_each(
      "mpf::zero::add_block_sum", n, KOKKOS_LAMBDA(int64_t k) { into[k] += from[k]; });
}
}  // namespace

void ShardedBlocks::complete(Reducing& r) {
  if (!r.in_flight) return;
  {
    MpiCallScope in_mpi("MPI_Ireduce_scatter", dp_.bucket_comm(dp_.block_buckets(r.block)[0]));
    MPF_MPI_CHECK(MPI_Waitall(int(r.requests.size()), r.requests.data(), MPI_STATUSES_IGNORE));
  }
  r.requests.clear();
  // This microbatch's sum of the block's part into the step's.
  float* shard = dp_.shard_data();
  const float* part = r.part.data();
  int64_t at = 0;
  for (size_t i : dp_.block_buckets(r.block)) {
    const GradBucket& b = dp_.buckets()[i];
    const size_t rank = size_t(dp_.bucket_rank(i));
    float* into = shard + b.shard_offset;
    const float* from = part + at;
    add_block_sum(into, from, int64_t(b.counts[rank]));
    at += b.counts[rank];
  }
  r.in_flight = false;
  r.block = -1;
}

void ShardedBlocks::begin_step() {
  // The slab's edge tensors and padding (the blocks' stretch is the pool's) and the shard.
  const int blocks = grads_.layout.blocks();
  const int64_t lo = blocks > 0 ? grads_.layout.block_range(0).first : grads_.count;
  const int64_t hi = blocks > 0 ? grads_.layout.block_range(blocks - 1).second : grads_.count;
  fill(grads_.slab.data(), lo, 0.0f);
  fill(grads_.slab.data() + hi, grads_.count - hi, 0.0f);
  if (dp_.shard_size() > 0) fill(dp_.shard_data(), dp_.shard_size(), 0.0f);
}

void ShardedBlocks::finish() {
  for (Reducing& r : reducing_) complete(r);
  for (Gathered& g : gathered_) drop(g);
  Kokkos::fence();
}

}  // namespace mpf

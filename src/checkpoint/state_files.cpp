#include "checkpoint/state_files.hpp"

#include <algorithm>

#include "checkpoint/llmc_checkpoint.hpp"
#include "core/error.hpp"
#include "io/llmc_format.hpp"

namespace mpf {

StateFiles::StateFiles(const Grid& grid, const TpShard& shard, const Parameters& params,
                       const AdamW& optimizer, bool zero, bool sharded_params)
    : StateFiles(grid, shard, params, &optimizer, zero, sharded_params) {}

StateFiles::StateFiles(const Grid& grid, const TpShard& shard, const Parameters& params)
    : StateFiles(grid, shard, params, nullptr, false, false) {}

StateFiles::StateFiles(const Grid& grid, const TpShard& shard, const Parameters& params,
                       const AdamW* optimizer, bool zero, bool sharded_params)
    : world_(grid.world_comm()),
      world_rank_(grid.world_rank()),
      tp_rank_(grid.tp_rank()),
      dp_rank_(grid.dp_cp_rank()),  // CP ranks hold the same parameters as DP ones do
      zero_(zero),
      sharded_params_(sharded_params),
      shard_(shard),
      cfg_(shard.cfg),
      count_(parameter_count(shard.cfg)),
      slab_(params.slab.data()),
      layout_(params.layout),
      segments_(optimizer ? optimizer->segments() : std::vector<OptimizerSegment>{}),
      m_(optimizer ? optimizer->first_moment().data() : nullptr),
      v_(optimizer ? optimizer->second_moment().data() : nullptr) {
  int64_t position = 0;  // the table's order is the file's
  for (const TensorSpec& s : kTensors) {
    base_[s.id] = position;
    position += tensor_size(s.id, cfg_);
    shard_runs_[s.id] = shard_runs(shard, s.id);
  }
}

StateFiles StateFiles::on_host_copy(MPI_Comm comm, float* slab, float* m, float* v) const {
  StateFiles copy = *this;
  copy.world_ = comm;
  copy.slab_ = slab;
  copy.m_ = m_ ? m : nullptr;
  copy.v_ = v_ ? v : nullptr;
  copy.host_memory_ = true;
  return copy;
}

int64_t StateFiles::model_bytes() const {
  return llmc::kHeaderBytes + int64_t(sizeof(float)) * count_;
}

int64_t StateFiles::optimizer_bytes() const {
  return llmc::kHeaderBytes + 2 * int64_t(sizeof(float)) * count_;
}

bool writes_parameter(const TpShard& shard, int dp_rank, TensorId tensor) {
  if (!shard.is_split(tensor) && shard.rank != 0) return false;  // replicated over TP
  if (shard.is_tied_copy(tensor)) return false;                  // the tied wte: first stage's
  // EP ranks hold different experts: the first of the ranks holding the same ones writes them.
  if (shard.is_expert(tensor) && shard.ep_size > 1) return shard.expert_dp_rank == 0;
  return dp_rank == 0;
}

bool StateFiles::writes(TensorId tensor, bool moments) const {
  if (moments && zero_) {  // ZeRO shards are distinct over DP (over a node's ranks under HSDP)
    return zero_replica_ == 0 && (shard_.is_split(tensor) || tp_rank_ == 0) &&
           !shard_.is_tied_copy(tensor);
  }
  return writes_parameter(shard_, dp_rank_, tensor);
}

std::vector<FileRun> StateFiles::runs(bool moments, bool writes_only) const {
  std::vector<FileRun> out;
  // The padded vocabulary rows hold no parameter: world rank 0 writes their zeros, as in llm.c.
  if (writes_only && world_rank_ == 0) {
    for (const TensorSpec& s : kTensors) {  // the padding ends its tensor
      const int64_t real = unpadded_size(s.id, cfg_), n = tensor_size(s.id, cfg_) - real;
      const int64_t first = base_[s.id] + real;
      if (n > 0) out.push_back({nullptr, first, n, -1});
      if (n > 0 && moments) out.push_back({nullptr, count_ + first, n, -1});
    }
  }
  // Sections: the tensors in file order (int(t)); the optimizer file's v after m's.
  if (!moments) {
    for (const TensorSpec& s : kTensors) {
      const TensorId t = s.id;
      if (sharded_params_ && s.per_layer()) continue;  // below, from the segments
      const bool mine = writes(t, false);
      if (writes_only && !mine) continue;
      // A run of the serial tensor is contiguous in the file; in the layer-major slab it may
      // cross from one block's piece to the next.
      for (const ShardRun& r : shard_runs_[t]) {
        const bool own = mine && !r.replica;  // a replicated kv head: its owner writes it
        if (writes_only && !own) continue;
        layout_.for_each_run(t, r.local, r.length, [&](int64_t j, int64_t offset, int64_t n) {
          out.push_back(
              {slab_ + offset, base_[t] + r.global + (j - r.local), n, own ? int(t) : -1});
        });
      }
    }
    if (!sharded_params_) return out;
  }
  // The moments of a segment sit at its `state` offset; its parameters at `param` in the slab,
  // which places them in their tensor (a segment lies within one piece of the slab) and, through
  // the shard's runs, in the file.
  // ZeRO-3: the blocks' parameters this rank holds are its segments' of the blocks, in the
  // model file at the same places as their moments in the optimizer file.
  for (const OptimizerSegment& s : segments_) {
    const TensorId t = s.tensor;
    const bool mine = writes(t, true);
    if (writes_only && !mine) continue;
    const SlabPiece& piece = layout_.piece_at(s.param);
    if (!moments && piece.block < 0) continue;
    const int64_t j0 = piece.first + (s.param - piece.offset), j1 = j0 + s.length;
    for (const ShardRun& r : shard_runs_[t]) {
      const int64_t lo = std::max(j0, r.local), hi = std::min(j1, r.local + r.length);
      if (lo >= hi) continue;
      const bool own = mine && !r.replica;  // a replicated kv head: its owner writes it
      if (writes_only && !own) continue;
      const int64_t file = base_[t] + r.global + (lo - r.local);
      if (!moments) {
        out.push_back({slab_ + s.param + (lo - j0), file, hi - lo, own ? int(t) : -1});
        continue;
      }
      out.push_back({m_ + s.state + (lo - j0), file, hi - lo, own ? int(t) : -1});
      // A Muon matrix has no second moment: the file holds zeros there, as it always has (the
      // format does not depend on the optimizer), written as such and not read back.
      float* const v = s.by_muon ? nullptr : v_ + s.v_state + (lo - j0);
      out.push_back({v, count_ + file, hi - lo, own ? kNumParameterTensors + int(t) : -1});
    }
  }
  return out;
}

std::string StateFiles::transfer(bool write, bool moments, const std::string& path,
                                 std::vector<Digest>& digests) const {
  if (moments && m_ == nullptr) MPF_FATAL("StateFiles: no optimizer state to transfer");
  using Mode = ParallelFile::Mode;
  ParallelFile file(world_, path, write ? Mode::kCreate : Mode::kRead);
  if (host_memory_) file.set_host_memory();
  digests.assign(moments ? 2 * kNumParameterTensors : kNumParameterTensors, Digest{});
  const int64_t expected = moments ? optimizer_bytes() : model_bytes();
  if (!write) {
    // The size as every rank saw it: they branch alike.
    int64_t sizes[2] = {-file.size(), file.size()};  // -min, max
    MPF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT64_T, MPI_MAX, world_));
    if (-sizes[0] != expected || sizes[1] != expected) {
      file.close();
      const std::string opened = file.agree();
      return !opened.empty() ? opened
                             : path + ": " + std::to_string(sizes[1]) + " bytes, expected " +
                                   std::to_string(expected) + "; the file is truncated or corrupt";
    }
  }
  if (write && world_rank_ == 0) {
    int32_t header[llmc::kHeaderInts];
    make_header(cfg_, moments, header);
    file.write_at(0, header, llmc::kHeaderBytes);
  }
  if (write && !moments && fail_staging_) file.fail_staging_for_tests(1);
  if (write) {
    file.write_runs(llmc::kHeaderBytes, runs(moments, true), digests);
  } else {
    file.read_runs(llmc::kHeaderBytes, runs(moments, false), digests);
  }
  file.close();
  const std::string error = file.agree();
  allreduce_digests(digests, world_);
  return error;
}

std::string StateFiles::write_model(const std::string& path, std::vector<Digest>& digests) const {
  return transfer(true, false, path, digests);
}
std::string StateFiles::read_model(const std::string& path, std::vector<Digest>& digests) const {
  return transfer(false, false, path, digests);
}
std::string StateFiles::write_optimizer(const std::string& path,
                                        std::vector<Digest>& digests) const {
  return transfer(true, true, path, digests);
}
std::string StateFiles::read_optimizer(const std::string& path,
                                       std::vector<Digest>& digests) const {
  return transfer(false, true, path, digests);
}

std::string StateFiles::describe_position(int64_t position) const {
  const int64_t p = position % count_;
  const TensorSpec* s = &kTensors[0];  // the last tensor starting at or before p
  for (const TensorSpec& t : kTensors) {
    if (base_[t.id] <= p) s = &t;
  }
  const int64_t index = p - base_[s->id];
  std::string where = s->name;
  if (s->per_layer()) {
    const int64_t per = tensor_size(s->id, cfg_) / cfg_.layers;
    return where + " (layer " + std::to_string(index / per) + ") element " +
           std::to_string(index % per);
  }
  return where + " element " + std::to_string(index);
}

}  // namespace mpf

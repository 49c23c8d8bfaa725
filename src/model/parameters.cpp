#include "model/parameters.hpp"

#include <algorithm>
#include <stdexcept>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "core/transfer.hpp"
#include "model/shard.hpp"

namespace mpf {

namespace {
std::vector<PerTensor<int64_t>> uniform_blocks(const PerTensor<int64_t>& sizes, int blocks) {
  PerTensor<int64_t> one;
  for (const TensorSpec& s : kTensors) {
    if (s.per_layer()) one[s.id] = blocks > 0 ? sizes[s.id] / blocks : 0;
  }
  return std::vector<PerTensor<int64_t>>(size_t(std::max(blocks, 0)), one);
}
}  // namespace

SlabLayout::SlabLayout(const PerTensor<int64_t>& sizes, int blocks)
    : SlabLayout(sizes, uniform_blocks(sizes, blocks)) {}

SlabLayout SlabLayout::of(const TpShard& shard) {
  std::vector<TensorId> held;  // as block_lengths asks
  for (const TensorSpec& s : kTensors) {
    if (s.per_layer() && shard.holds(s.id)) held.push_back(s.id);
  }
  std::vector<PerTensor<int64_t>> blocks;
  for (int l : shard.layers) {
    PerTensor<int64_t> one;
    for (TensorId t : held) one[t] = shard.block_size(t, l);
    blocks.push_back(one);
  }
  return SlabLayout(shard.sizes(), blocks);
}

std::vector<int64_t> SlabLayout::block_lengths(const TpShard& shard) {
  // Whether the stage holds a tensor walks its blocks: asked once per tensor, not per block.
  std::vector<TensorId> held;
  for (const TensorSpec& s : kTensors) {
    if (s.per_layer() && shard.holds(s.id)) held.push_back(s.id);
  }
  // A block's sizes depend on its layer only through its kind (GPTConfig::dense_block,
  // mtp_block): each kind is sized once.
  int64_t by_kind[2][2] = {{-1, -1}, {-1, -1}};
  std::vector<int64_t> out;
  for (int l : shard.layers) {
    int64_t& n = by_kind[shard.cfg.dense_block(l)][shard.cfg.mtp_block(l)];
    if (n < 0) {
      n = 0;
      for (TensorId t : held) n += shard.block_size(t, l);
    }
    out.push_back(n);
  }
  return out;
}

int64_t SlabLayout::count_of(const TpShard& shard) {
  // As the constructor counts: the tensors that are not per layer whole, the others by block.
  const PerTensor<int64_t> sizes = shard.sizes();
  int64_t count = 0;
  for (const TensorSpec& s : kTensors) {
    if (!s.per_layer()) count += sizes[s.id];
  }
  for (int64_t n : block_lengths(shard)) count += n;
  return count;
}

SlabLayout::SlabLayout(const PerTensor<int64_t>& sizes,
                       const std::vector<PerTensor<int64_t>>& block_sizes)
    : blocks_(int(block_sizes.size())) {
  auto add = [&](TensorId tensor, int block, int64_t length, int64_t first) {
    if (length > 0) pieces_.push_back({tensor, block, count_, length, first});
    count_ += length;
  };
  // Block by block where the first per-layer tensor stands; within a block, the table's order.
  auto add_blocks = [&] {
    for (const TensorSpec& s : kTensors) {
      if (s.per_layer()) first_[s.id].assign(1, 0);
    }
    for (int b = 0; b < blocks_; ++b) {
      block_start_.push_back(count_);
      for (const TensorSpec& s : kTensors) {
        if (!s.per_layer()) continue;
        const int64_t n = block_sizes[size_t(b)][s.id], at = first_[s.id].back();
        in_block_[s.id].push_back(count_ - block_start_.back());
        first_[s.id].push_back(at + n);
        add(s.id, b, n, at);
      }
    }
  };
  bool blocks_added = false;
  for (const TensorSpec& s : kTensors) {
    if (!s.per_layer()) {
      start_[s.id] = count_;
      add(s.id, -1, sizes[s.id], 0);
    } else if (!blocks_added) {
      add_blocks();
      blocks_added = true;
    }
  }
}

const SlabPiece& SlabLayout::piece_at(int64_t offset) const {
  const auto after = std::upper_bound(pieces_.begin(), pieces_.end(), offset,
                                      [](int64_t o, const SlabPiece& p) { return o < p.offset; });
  if (after == pieces_.begin() || offset >= count_) MPF_FATAL("slab offset outside the tensors");
  return *(after - 1);
}

std::pair<int64_t, int64_t> SlabLayout::block_range(int block) const {
  int64_t lo = -1, hi = -1;
  for (const SlabPiece& p : pieces_) {
    if (p.block != block) continue;
    if (lo < 0) lo = p.offset;
    hi = p.offset + p.length;
  }
  if (lo < 0) MPF_FATAL("a block this slab does not hold");
  return {lo, hi};
}

namespace {
// The named view a piece of the slab backs (a switch without a default: a new tensor without a
// view does not compile quietly).
Tensor& view_of(ParameterTensors& t, const SlabPiece& piece) {
  auto block = [&]() -> LayerParameters& { return t.blocks[size_t(piece.block)]; };
  switch (piece.tensor) {
    case TensorId::wte:
      return t.wte;
    case TensorId::wpe:
      return t.wpe;
    case TensorId::ln1w:
      return block().ln1w;
    case TensorId::ln1b:
      return block().ln1b;
    case TensorId::qkvw:
      return block().qkvw;
    case TensorId::qkvb:
      return block().qkvb;
    case TensorId::attprojw:
      return block().attprojw;
    case TensorId::attprojb:
      return block().attprojb;
    case TensorId::ln2w:
      return block().ln2w;
    case TensorId::ln2b:
      return block().ln2b;
    case TensorId::fcw:
      return block().fcw;
    case TensorId::fcb:
      return block().fcb;
    case TensorId::fcprojw:
      return block().fcprojw;
    case TensorId::fcprojb:
      return block().fcprojb;
    case TensorId::lnfw:
      return t.lnfw;
    case TensorId::lnfb:
      return t.lnfb;
    case TensorId::lmhead:
      return t.lmhead;
    case TensorId::q_normw:
      return block().q_normw;
    case TensorId::k_normw:
      return block().k_normw;
    case TensorId::routerw:
      return block().routerw;
    case TensorId::sfcw:
      return block().sfcw;
    case TensorId::sfcprojw:
      return block().sfcprojw;
    case TensorId::sgatew:
      return block().sgatew;
    case TensorId::qaw:
      return block().qaw;
    case TensorId::qanw:
      return block().qanw;
    case TensorId::qbw:
      return block().qbw;
    case TensorId::kvaw:
      return block().kvaw;
    case TensorId::kvanw:
      return block().kvanw;
    case TensorId::kvbw:
      return block().kvbw;
    case TensorId::moebias:
      return block().moebias;
    case TensorId::dfcw:  // a dense block's MLP: the views its kernels read (tensors.hpp)
      return block().fcw;
    case TensorId::dfcprojw:
      return block().fcprojw;
    case TensorId::mtpenw:
      return block().mtpenw;
    case TensorId::mtphnw:
      return block().mtphnw;
    case TensorId::mtpehw:
      return block().mtpehw;
    case TensorId::mtpshw:
      return block().mtpshw;
  }
  MPF_FATAL("not a parameter tensor");
}
}  // namespace

int64_t Parameters::slab_floats(const TpShard& shard, int pad_to) {
  const int64_t count = SlabLayout::count_of(shard);
  return (count + pad_to - 1) / pad_to * pad_to;
}

namespace {
Parameters allocate_slab(const TpShard& shard, const std::string& label, int pad_to,
                         bool sparse_blocks) {
  Parameters p;
  p.cfg = shard.cfg;
  p.sizes = shard.sizes();
  p.layout = SlabLayout::of(shard);
  p.count = p.layout.count();
  try {
    const int64_t n = (p.count + pad_to - 1) / pad_to * pad_to;
    if (sparse_blocks) {
      p.slab = Slab(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), n);
    } else {
      p.slab = Slab(label, n);
    }
  } catch (const std::runtime_error& e) {  // Kokkos's allocation failure: the model is too large
    throw InputError("the model's " + std::to_string(p.count) + " parameters on this rank (" +
                     std::to_string(p.count * int64_t(sizeof(float)) >> 20) +
                     " MiB) cannot be allocated; choose a smaller model (--layers, --dim, "
                     "--vocab, --ffn-dim) or split it over more --tp/--pp ranks");
  }
  p.t.blocks.resize(size_t(shard.local_layers()));
  for (const SlabPiece& piece : p.layout.pieces()) view_of(p.t, piece) = p.view(piece);
  if (sparse_blocks && shard.local_layers() > 0) {
    // Zero all but the blocks' stretch: the edge tensors and the padding.
    const int64_t lo = p.layout.block_range(0).first,
                  hi = p.layout.block_range(shard.local_layers() - 1).second;
    fill(p.slab.data(), lo, 0.0f);
    fill(p.slab.data() + hi, int64_t(p.slab.extent(0)) - hi, 0.0f);
  } else if (sparse_blocks) {
    Kokkos::deep_copy(p.slab, 0.0f);
  }
  return p;
}
}  // namespace

Parameters Parameters::allocate(const TpShard& shard, const std::string& label, int pad_to) {
  return allocate_slab(shard, label, pad_to, false);
}

Parameters Parameters::allocate_sparse_blocks(const TpShard& shard, const std::string& label,
                                              int pad_to) {
  return allocate_slab(shard, label, pad_to, true);
}

void point_block(ParameterTensors& t, const SlabLayout& layout, int block, float* stretch) {
  const int64_t begin = layout.block_range(block).first;
  for (const SlabPiece& piece : layout.pieces()) {
    if (piece.block == block)
      view_of(t, piece) = Tensor(stretch + (piece.offset - begin), piece.length);
  }
}

Parameters Parameters::allocate(const GPTConfig& cfg, const std::string& label) {
  return allocate(make_tp_shard(cfg, 0, 1), label);
}

namespace {
// Initialises slab elements [offset, offset + n) of `piece`.
void initialize_run(Parameters& params, const TpShard& shard, uint64_t seed, const SlabPiece& piece,
                    int64_t offset, int64_t n) {
  {
    const TensorSpec& spec = tensor_spec(piece.tensor);
    const Tensor x(params.slab.data() + offset, n);
    const int64_t first = piece.first + (offset - piece.offset);
    // The local-to-global map, evaluated on the host once per piece (a table, so the kernel below
    // stays a plain loop on any device).
    Kokkos::View<int64_t*, MemSpace> where("mpf::initialize::where", x.extent(0));
    auto host = Kokkos::create_mirror_view(where);
    for (int64_t k = 0; k < int64_t(x.extent(0)); ++k)
      host(k) = shard.global_index(piece.tensor, first + k);
    copy_from_host(where.data(), host.data(), host.extent(0) * sizeof(int64_t),
                   "h2d initialisation map");
    const uint64_t stream = rng::stream_of(spec.name);
    const float value = spec.init == TensorInit::kOne ? 1.0f : 0.0f;
    const float std = init_std(spec, params.cfg);
    const bool normal = spec.init == TensorInit::kNormal;
    for_each(
        "mpf::initialize", int64_t(x.extent(0)), KOKKOS_LAMBDA(int64_t k) {
          const int64_t g = where(k);
          if (g < 0) {
            x(k) = 0.0f;  // a padded vocabulary row
          } else {
            x(k) = normal ? std * rng::normal(seed, stream, static_cast<uint64_t>(g)) : value;
          }
        });
  }
}
}  // namespace

void initialize(Parameters& params, const TpShard& shard, uint64_t seed) {
  for (const SlabPiece& piece : params.layout.pieces())
    initialize_run(params, shard, seed, piece, piece.offset, piece.length);
}

void initialize(Parameters& params, const TpShard& shard, uint64_t seed,
                const std::vector<std::pair<int64_t, int64_t>>& blocks_within) {
  for (const SlabPiece& piece : params.layout.pieces()) {
    if (piece.block < 0) {
      initialize_run(params, shard, seed, piece, piece.offset, piece.length);
      continue;
    }
    for (const auto& [lo, hi] : blocks_within) {
      const int64_t a = std::max(lo, piece.offset), b = std::min(hi, piece.offset + piece.length);
      if (a < b) initialize_run(params, shard, seed, piece, a, b - a);
    }
  }
}

void initialize(Parameters& params, uint64_t seed) {
  initialize(params, make_tp_shard(params.cfg, 0, 1), seed);
}

}  // namespace mpf

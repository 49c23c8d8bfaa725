#include "model/parameters.hpp"

#include <algorithm>
#include <stdexcept>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "core/transfer.hpp"
#include "model/shard.hpp"

namespace mpf {

SlabLayout::SlabLayout(const PerTensor<int64_t>& sizes, int blocks) : blocks_(blocks) {
  auto add = [&](TensorId tensor, int block, int64_t length, int64_t first) {
    if (length > 0) pieces_.push_back({tensor, block, count_, length, first});
    count_ += length;
  };
  // Block by block where the first per-layer tensor stands; within a block, the table's order.
  auto add_blocks = [&] {
    const int64_t blocks_begin = count_;
    for (const TensorSpec& s : kTensors) {
      if (!s.per_layer()) continue;
      per_block_[s.id] = blocks > 0 ? sizes[s.id] / blocks : 0;
      start_[s.id] = blocks_begin + block_stride_;
      block_stride_ += per_block_[s.id];
    }
    for (int b = 0; b < blocks; ++b) {
      for (const TensorSpec& s : kTensors) {
        if (s.per_layer()) add(s.id, b, per_block_[s.id], b * per_block_[s.id]);
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
  }
  MPF_FATAL("not a parameter tensor");
}
}  // namespace

int64_t Parameters::slab_floats(const TpShard& shard, int pad_to) {
  const int64_t count = SlabLayout(shard.sizes(), shard.local_layers()).count();
  return (count + pad_to - 1) / pad_to * pad_to;
}

Parameters Parameters::allocate(const TpShard& shard, const std::string& label, int pad_to) {
  Parameters p;
  p.cfg = shard.cfg;
  p.sizes = shard.sizes();
  p.layout = SlabLayout(p.sizes, shard.local_layers());
  p.count = p.layout.count();
  try {
    p.slab = Slab(label, (p.count + pad_to - 1) / pad_to * pad_to);
  } catch (const std::runtime_error& e) {  // Kokkos's allocation failure: the model is too large
    throw InputError("the model's " + std::to_string(p.count) + " parameters on this rank (" +
                     std::to_string(p.count * int64_t(sizeof(float)) >> 20) +
                     " MiB) cannot be allocated; choose a smaller model (--layers, --dim, "
                     "--vocab, --ffn-dim) or split it over more --tp/--pp ranks");
  }
  p.t.blocks.resize(size_t(shard.local_layers()));
  for (const SlabPiece& piece : p.layout.pieces()) view_of(p.t, piece) = p.view(piece);
  return p;
}

Parameters Parameters::allocate(const GPTConfig& cfg, const std::string& label) {
  return allocate(make_tp_shard(cfg, 0, 1), label);
}

void initialize(Parameters& params, const TpShard& shard, uint64_t seed) {
  for (const SlabPiece& piece : params.layout.pieces()) {
    const TensorSpec& spec = tensor_spec(piece.tensor);
    const Tensor x = params.view(piece);
    // The local-to-global map, evaluated on the host once per piece (a table, so the kernel below
    // stays a plain loop on any device).
    Kokkos::View<int64_t*, MemSpace> where("mpf::initialize::where", x.extent(0));
    auto host = Kokkos::create_mirror_view(where);
    for (int64_t k = 0; k < int64_t(x.extent(0)); ++k)
      host(k) = shard.global_index(piece.tensor, piece.first + k);
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

void initialize(Parameters& params, uint64_t seed) {
  initialize(params, make_tp_shard(params.cfg, 0, 1), seed);
}

}  // namespace mpf

#include "model/parameters.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "core/transfer.hpp"
#include "model/shard.hpp"

namespace mpf {

SlabLayout::SlabLayout(const std::array<int64_t, kNumParameterTensors>& sizes, int blocks)
    : blocks_(blocks) {
  auto add = [&](int tensor, int block, int64_t length, int64_t first) {
    if (length > 0) pieces_.push_back({tensor, block, count_, length, first});
    count_ += length;
  };
  for (int i : {0, 1}) {  // wte, wpe
    start_[i] = count_;
    add(i, -1, sizes[i], 0);
  }
  // Block by block; within a block, llm.c's tensor order.
  const int64_t blocks_begin = count_;
  for (int i = 2; i < kNumParameterTensors - 2; ++i) {
    per_block_[i] = blocks > 0 ? sizes[i] / blocks : 0;
    start_[i] = blocks_begin + block_stride_;
    block_stride_ += per_block_[i];
  }
  for (int b = 0; b < blocks; ++b) {
    for (int i = 2; i < kNumParameterTensors - 2; ++i) add(i, b, per_block_[i], b * per_block_[i]);
  }
  for (int i : {kNumParameterTensors - 2, kNumParameterTensors - 1}) {  // lnfw, lnfb
    start_[i] = count_;
    add(i, -1, sizes[i], 0);
  }
}

const SlabPiece& SlabLayout::piece_at(int64_t offset) const {
  const auto after = std::upper_bound(pieces_.begin(), pieces_.end(), offset,
                                      [](int64_t o, const SlabPiece& p) { return o < p.offset; });
  if (after == pieces_.begin() || offset >= count_) MPF_FATAL("slab offset outside the tensors");
  return *(after - 1);
}

std::array<int64_t, kNumParameterTensors> parameter_sizes(const GPTConfig& cfg) {
  const int64_t C = cfg.channels, L = cfg.layers;
  return {int64_t(cfg.padded_vocab) * C,
          int64_t(cfg.max_seq_len) * C,
          L * C,
          L * C,
          L * 3 * C * C,
          L * 3 * C,
          L * C * C,
          L * C,
          L * C,
          L * C,
          L * 4 * C * C,
          L * 4 * C,
          L * C * 4 * C,
          L * C,
          C,
          C};
}

std::array<ParameterInfo, kNumParameterTensors> parameter_infos(const GPTConfig& cfg) {
  using I = ParameterInfo::Init;
  const float w = 0.02f, proj = 0.02f / std::sqrt(2.0f * cfg.layers);
  return {{{"wte", I::Normal, w, true},
           {"wpe", I::Normal, w, true},
           {"ln1w", I::One, 0, false},
           {"ln1b", I::Zero, 0, false},
           {"qkvw", I::Normal, w, true},
           {"qkvb", I::Zero, 0, false},
           {"attprojw", I::Normal, proj, true},
           {"attprojb", I::Zero, 0, false},
           {"ln2w", I::One, 0, false},
           {"ln2b", I::Zero, 0, false},
           {"fcw", I::Normal, w, true},
           {"fcb", I::Zero, 0, false},
           {"fcprojw", I::Normal, proj, true},
           {"fcprojb", I::Zero, 0, false},
           {"lnfw", I::One, 0, false},
           {"lnfb", I::Zero, 0, false}}};
}

Parameters Parameters::allocate(const TpShard& shard, const std::string& label, int pad_to) {
  Parameters p;
  p.cfg = shard.cfg;
  p.sizes = shard.sizes();
  p.layout = SlabLayout(p.sizes, shard.local_layers());
  p.count = p.layout.count();
  p.slab = Slab(label, (p.count + pad_to - 1) / pad_to * pad_to);
  p.t.blocks.resize(size_t(shard.local_layers()));
  for (const SlabPiece& piece : p.layout.pieces()) {
    const Tensor x = p.view(piece);
    switch (piece.tensor) {
      case 0:
        p.t.wte = x;
        break;
      case 1:
        p.t.wpe = x;
        break;
      case kNumParameterTensors - 2:
        p.t.lnfw = x;
        break;
      case kNumParameterTensors - 1:
        p.t.lnfb = x;
        break;
      default: {
        LayerParameters& b = p.t.blocks[size_t(piece.block)];
        Tensor* views[] = {&b.ln1w, &b.ln1b, &b.qkvw, &b.qkvb, &b.attprojw, &b.attprojb,
                           &b.ln2w, &b.ln2b, &b.fcw,  &b.fcb,  &b.fcprojw,  &b.fcprojb};
        *views[piece.tensor - 2] = x;
      }
    }
  }
  return p;
}

Parameters Parameters::allocate(const GPTConfig& cfg, const std::string& label) {
  return allocate(make_tp_shard(cfg, 0, 1), label);
}

void initialize(Parameters& params, const TpShard& shard, uint64_t seed) {
  const auto infos = parameter_infos(params.cfg);
  for (const SlabPiece& piece : params.layout.pieces()) {
    const ParameterInfo info = infos[piece.tensor];
    const Tensor x = params.view(piece);
    // The local-to-global map, evaluated on the host once per piece (a table, so the kernel below
    // stays a plain loop on any device).
    Kokkos::View<int64_t*, MemSpace> where("mpf::initialize::where", x.extent(0));
    auto host = Kokkos::create_mirror_view(where);
    for (int64_t k = 0; k < int64_t(x.extent(0)); ++k)
      host(k) = shard.global_index(piece.tensor, piece.first + k);
    copy_from_host(where.data(), host.data(), host.extent(0) * sizeof(int64_t),
                   "h2d initialisation map");
    const uint64_t stream = rng::stream_of(info.name);
    const float value = info.init == ParameterInfo::Init::One ? 1.0f : 0.0f;
    const float std = info.std;
    const bool normal = info.init == ParameterInfo::Init::Normal;
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

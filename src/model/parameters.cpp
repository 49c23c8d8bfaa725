#include "model/parameters.hpp"

#include <cmath>

#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "model/shard.hpp"

namespace mpf {

std::array<Tensor*, kNumParameterTensors> ParameterTensors::list() {
  return {&wte,  &wpe,  &ln1w, &ln1b, &qkvw,    &qkvb,    &attprojw, &attprojb,
          &ln2w, &ln2b, &fcw,  &fcb,  &fcprojw, &fcprojb, &lnfw,     &lnfb};
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
  for (int64_t s : p.sizes) p.count += s;
  p.slab = Slab(label, (p.count + pad_to - 1) / pad_to * pad_to);
  auto views = p.t.list();
  int64_t offset = 0;
  for (int i = 0; i < kNumParameterTensors; ++i) {
    *views[i] = Tensor(p.slab.data() + offset, p.sizes[i]);
    offset += p.sizes[i];
  }
  return p;
}

Parameters Parameters::allocate(const GPTConfig& cfg, const std::string& label) {
  return allocate(make_tp_shard(cfg, 0, 1), label);
}

void initialize(Parameters& params, const TpShard& shard, uint64_t seed) {
  const auto infos = parameter_infos(params.cfg);
  auto views = params.t.list();
  for (int i = 0; i < kNumParameterTensors; ++i) {
    const ParameterInfo info = infos[i];
    const Tensor x = *views[i];
    // The local-to-global map, evaluated on the host once per tensor (a table, so the kernel
    // below stays a plain loop on any device).
    Kokkos::View<int64_t*, MemSpace> where("mpf::initialize::where", x.extent(0));
    auto host = Kokkos::create_mirror_view(where);
    for (int64_t j = 0; j < int64_t(x.extent(0)); ++j) host(j) = shard.global_index(i, j);
    Kokkos::deep_copy(where, host);
    const uint64_t stream = rng::stream_of(info.name);
    const float value = info.init == ParameterInfo::Init::One ? 1.0f : 0.0f;
    const float std = info.std;
    const bool normal = info.init == ParameterInfo::Init::Normal;
    for_each(
        "mpf::initialize", int64_t(x.extent(0)), KOKKOS_LAMBDA(int64_t j) {
          const int64_t g = where(j);
          if (g < 0) {
            x(j) = 0.0f;  // a padded vocabulary row
          } else {
            x(j) = normal ? std * rng::normal(seed, stream, static_cast<uint64_t>(g)) : value;
          }
        });
  }
}

void initialize(Parameters& params, uint64_t seed) {
  initialize(params, make_tp_shard(params.cfg, 0, 1), seed);
}

}  // namespace mpf

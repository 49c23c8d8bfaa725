#include "model/parameters.hpp"

#include <cmath>

#include "core/parallel.hpp"
#include "core/rng.hpp"

namespace mpf {

std::array<Tensor*, kNumParameterTensors> ParameterTensors::list() {
  return {&wte,  &wpe,  &ln1w, &ln1b, &qkvw,    &qkvb,    &attprojw, &attprojb,
          &ln2w, &ln2b, &fcw,  &fcb,  &fcprojw, &fcprojb, &lnfw,     &lnfb};
}

std::array<const Tensor*, kNumParameterTensors> ParameterTensors::list() const {
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

Parameters Parameters::allocate(const GPTConfig& cfg, const std::string& label) {
  Parameters p;
  p.cfg = cfg;
  const auto sizes = parameter_sizes(cfg);
  for (int64_t s : sizes) p.count += s;
  p.slab = Slab(label, p.count);
  auto views = p.t.list();
  int64_t offset = 0;
  for (int i = 0; i < kNumParameterTensors; ++i) {
    *views[i] = Tensor(p.slab.data() + offset, sizes[i]);
    offset += sizes[i];
  }
  return p;
}

void initialize(Parameters& params, uint64_t seed) {
  const auto infos = parameter_infos(params.cfg);
  auto views = params.t.list();
  // Only the token table is padded; its rows >= V stay zero, as in llm.c's checkpoints.
  const int64_t real_wte = int64_t(params.cfg.vocab) * params.cfg.channels;
  for (int i = 0; i < kNumParameterTensors; ++i) {
    const ParameterInfo info = infos[i];
    const Tensor x = *views[i];
    const int64_t n = (i == 0) ? real_wte : int64_t(x.extent(0));
    const uint64_t stream = rng::stream_of(info.name);
    const float value = info.init == ParameterInfo::Init::One ? 1.0f : 0.0f;
    const float std = info.std;
    if (info.init == ParameterInfo::Init::Normal) {
      for_each(
          "mpf::initialize", n, KOKKOS_LAMBDA(int64_t j) {
            x(j) = std * rng::normal(seed, stream, static_cast<uint64_t>(j));
          });
    } else {
      for_each(
          "mpf::initialize", n, KOKKOS_LAMBDA(int64_t j) { x(j) = value; });
    }
  }
}

}  // namespace mpf

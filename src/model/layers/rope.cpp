#include "model/layers/rope.hpp"

#include <algorithm>
#include <cmath>

#include "core/parallel.hpp"
#include "core/transfer.hpp"

namespace mpf {

namespace {
// x rounded to float32 on its own: the compiler may not fuse the product that made it into a
// following add (C++ compilers contract a*b + c into an FMA by default), which PyTorch, one
// tensor operation at a time, never does.
float rope_float32(float x) {
  volatile float v = x;
  return v;
}
}  // namespace

std::vector<float> rope_inverse_frequencies(int hs, double theta, const RopeScaling& scaling) {
  const int half = hs / 2;
  std::vector<float> inv(size_t(half), 0.0f);
  // 1.0 / (base ** (arange(0, hs, 2).float() / hs)): a float32 exponent, the power rounded to
  // float32, a float32 reciprocal. The power is taken in double and rounded once, which matches
  // PyTorch's float32 pow on Llama 3's head sizes and theta where glibc's powf is an ulp off.
  for (int i = 0; i < half; ++i) {
    const float e = float(2 * i) / float(hs);
    inv[size_t(i)] = 1.0f / float(std::pow(double(float(theta)), double(e)));
  }
  if (scaling.factor == 0) return inv;
  // Llama 3.1: wavelengths shorter than original_max_position / high_freq_factor keep their
  // frequency, those longer than original_max_position / low_freq_factor are divided by factor,
  // and those between are interpolated smoothly. The float32 steps follow PyTorch's: `a / t` is
  // t.reciprocal() * a, and Python numbers enter as float32.
  const float factor = scaling.factor, low = scaling.low_freq_factor,
              high = scaling.high_freq_factor;
  const float old_len = float(scaling.original_max_position);
  const float low_wavelen = float(double(scaling.original_max_position) / low);
  const float high_wavelen = float(double(scaling.original_max_position) / high);
  const float two_pi = float(6.283185307179586), span = float(double(high) - double(low));
  for (int i = 0; i < half; ++i) {
    const float f = inv[size_t(i)];
    const float wavelen = (1.0f / f) * two_pi;
    const float scaled = wavelen > low_wavelen ? f / factor : f;
    if (wavelen < high_wavelen || wavelen > low_wavelen) {
      inv[size_t(i)] = scaled;
      continue;
    }
    const float smooth = (rope_float32((1.0f / wavelen) * old_len) - low) / span;
    inv[size_t(i)] =
        rope_float32((1.0f - smooth) * scaled / factor) + rope_float32(smooth * scaled);
  }
  return inv;
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

float yarn_attention_factor(const YarnScaling& y) {
  if (y.mscale != 0 && y.mscale_all_dim != 0) {
    return float(yarn_mscale(y.factor, y.mscale) / yarn_mscale(y.factor, y.mscale_all_dim));
  }
  return float(yarn_mscale(y.factor, 1.0));
}

std::vector<float> yarn_inverse_frequencies(int dim, double theta, const YarnScaling& y) {
  const int half = dim / 2;
  // The correction range in Python floats (double), floor and ceil (truncate), clipped to
  // [0, dim - 1]; then the ramp and the blend in float32 as PyTorch forms them.
  const double two_pi = 6.283185307179586, base = double(float(theta));
  auto correction_dim = [&](double rotations) {
    return dim * std::log(y.original_max_position / (rotations * two_pi)) / (2 * std::log(base));
  };
  const double low = std::max(std::floor(correction_dim(y.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(y.beta_slow)), double(dim - 1));
  if (low == high) high += 0.001;
  const float lo = float(low), span = float(high - low);
  std::vector<float> inv(size_t(half), 0.0f);
  for (int i = 0; i < half; ++i) {
    const float e = float(2 * i) / float(dim);
    const float pos_freq = float(std::pow(base, double(e)));
    const float extrapolated = 1.0f / pos_freq, interpolated = 1.0f / (y.factor * pos_freq);
    const float ramp = std::min(std::max((float(i) - lo) / span, 0.0f), 1.0f);
    const float keep = 1.0f - ramp;  // the extrapolation's share
    inv[size_t(i)] = rope_float32(interpolated * (1.0f - keep)) + rope_float32(extrapolated * keep);
  }
  return inv;
}

void rope_tables(Tensor cos_table, Tensor sin_table, const std::vector<float>& inv_freq,
                 int max_pos) {
  rope_tables(cos_table, sin_table, inv_freq, PositionRuns::contiguous(max_pos));
}

void rope_tables(Tensor cos_table, Tensor sin_table, const std::vector<float>& inv_freq,
                 const PositionRuns& rows, float scale) {
  const size_t half = inv_freq.size();
  std::vector<float> c(size_t(rows.rows) * half), s(size_t(rows.rows) * half);
  for (int t = 0; t < rows.rows; ++t) {
    const int p = rows.position(t);
    for (size_t i = 0; i < half; ++i) {
      const float angle = float(p) * inv_freq[i];
      c[size_t(t) * half + i] = float(std::cos(double(angle))) * scale;
      s[size_t(t) * half + i] = float(std::sin(double(angle))) * scale;
    }
  }
  copy_from_host(cos_table.data(), c.data(), c.size() * sizeof(float), "rope cos table");
  copy_from_host(sin_table.data(), s.data(), s.size() * sizeof(float), "rope sin table");
}

namespace {
// Rotates the Q and K heads of every row by its position's angle, with sin scaled by `sign`: +1
// forward, −1 for the backward, whose rotation by −angle is the transpose (and the inverse).
void rope_rotate(const char* label, Tensor qkv, Tensor cos_table, Tensor sin_table, float sign,
                 int64_t rows, int T, int pos0, int NH, int KVH, int hs) {
  const int half = hs / 2, heads = NH + KVH;  // the Q and K heads lie side by side
  const int64_t W = int64_t(NH + 2 * KVH) * hs;
  if (device_shaped()) {
    // A thread per pair: consecutive threads on consecutive elements of a head.
    for_each(
        label, rows * heads * half, KOKKOS_LAMBDA(int64_t e) {
          const int i = int(e % half);
          const int64_t rh = e / half, n = rh / heads;
          float* x = qkv.data() + n * W + (rh % heads) * hs;
          const int64_t at = int64_t(pos0 + n % T) * half + i;
          const float c = cos_table(at), s = sign * sin_table(at);
          const float a = x[i], b = x[i + half];
          x[i] = a * c - b * s;
          x[i + half] = b * c + a * s;
        });
    return;
  }
  // A row per thread; a head's pairs in one vectorizable loop over its position's table row.
  for_each_heavy(
      label, rows, KOKKOS_LAMBDA(int64_t n) {
        const float* cs = cos_table.data() + int64_t(pos0 + n % T) * half;
        const float* sn = sin_table.data() + int64_t(pos0 + n % T) * half;
        for (int h = 0; h < heads; ++h) {
          float* x = qkv.data() + n * W + int64_t(h) * hs;
          for (int i = 0; i < half; ++i) {
            const float c = cs[i], s = sign * sn[i];
            const float a = x[i], b = x[i + half];
            x[i] = a * c - b * s;
            x[i + half] = b * c + a * s;
          }
        }
      });
}
}  // namespace

void rope_forward(Tensor qkv, Tensor cos_table, Tensor sin_table, int64_t rows, int T, int pos0,
                  int NH, int KVH, int hs) {
  rope_rotate("mpf::rope_forward", qkv, cos_table, sin_table, 1.0f, rows, T, pos0, NH, KVH, hs);
}

void rope_backward(Tensor dqkv, Tensor cos_table, Tensor sin_table, int64_t rows, int T, int pos0,
                   int NH, int KVH, int hs) {
  rope_rotate("mpf::rope_backward", dqkv, cos_table, sin_table, -1.0f, rows, T, pos0, NH, KVH, hs);
}

}  // namespace mpf

#include "model/layers/scratch_llama.hpp"

#include <cmath>

#include "core/parallel.hpp"
#include "core/transfer.hpp"

namespace mpf {

void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight, int64_t N, int C,
                     float eps) {
  for_each(
      "mpf::scratch_rmsnorm_forward", N, KOKKOS_LAMBDA(int64_t n) {
        float ss = 0;
        for (int c = 0; c < C; ++c) ss += inp(n * C + c) * inp(n * C + c);
        const float r = 1.0f / sqrtf(ss / C + eps);
        rstd(n) = r;
        for (int c = 0; c < C; ++c) out(n * C + c) = inp(n * C + c) * r * weight(c);
      });
}

void rmsnorm_backward_input(Tensor dinp, Tensor dresidual, Tensor dout, Tensor inp, Tensor rstd,
                            Tensor weight, int64_t N, int C) {
  const bool residual = dresidual.extent(0) > 0;
  for_each(
      "mpf::scratch_rmsnorm_backward_input", N, KOKKOS_LAMBDA(int64_t n) {
        const float r = rstd(n);
        float dot = 0;
        for (int c = 0; c < C; ++c) dot += weight(c) * dout(n * C + c) * inp(n * C + c) * r;
        dot /= C;
        for (int c = 0; c < C; ++c) {
          const float xhat = inp(n * C + c) * r;
          const float g = r * (weight(c) * dout(n * C + c) - xhat * dot);
          dinp(n * C + c) = (residual ? dresidual(n * C + c) : 0.0f) + g;
        }
      });
}

void rmsnorm_backward_weight(Tensor dweight, Tensor dout, Tensor inp, Tensor rstd, int64_t N,
                             int C) {
  for_each(
      "mpf::scratch_rmsnorm_backward_weight", C, KOKKOS_LAMBDA(int64_t c) {
        float s = 0;
        for (int64_t n = 0; n < N; ++n) s += dout(n * C + c) * inp(n * C + c) * rstd(n);
        dweight(c) += s;
      });
}

std::vector<float> rope_inverse_frequencies(int hs, double theta, const RopeScaling& scaling) {
  std::vector<float> inv(size_t(hs / 2));
  const double pi = 3.14159265358979323846;
  for (int i = 0; i < hs / 2; ++i) {
    double f = 1.0 / std::pow(theta, 2.0 * i / hs);
    if (scaling.factor > 0) {
      const double old = scaling.original_max_position;
      const double low_wavelen = old / scaling.low_freq_factor;
      const double high_wavelen = old / scaling.high_freq_factor;
      const double wavelen = 2 * pi / f;
      if (wavelen > low_wavelen) {
        f = f / scaling.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old / wavelen - scaling.low_freq_factor) /
                              (scaling.high_freq_factor - scaling.low_freq_factor);
        f = (1 - smooth) * f / scaling.factor + smooth * f;
      }
    }
    inv[size_t(i)] = float(f);
  }
  return inv;
}

void rope_tables(Tensor cos_table, Tensor sin_table, const std::vector<float>& inv_freq,
                 int max_pos) {
  const int64_t half = int64_t(inv_freq.size());
  std::vector<float> c(size_t(max_pos * half)), s(c.size());
  for (int p = 0; p < max_pos; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(p) * double(inv_freq[size_t(i)]);
      c[size_t(p * half + i)] = float(std::cos(a));
      s[size_t(p * half + i)] = float(std::sin(a));
    }
  }
  copy_from_host(cos_table.data(), c.data(), c.size() * sizeof(float), "h2d rope cos");
  copy_from_host(sin_table.data(), s.data(), s.size() * sizeof(float), "h2d rope sin");
}

namespace {
template <bool kBackward>
void rotate(Tensor x, Tensor cos_table, Tensor sin_table, int64_t rows, int T, int pos0, int NH,
            int KVH, int hs) {
  const int W = (NH + 2 * KVH) * hs, half = hs / 2, heads = NH + KVH;  // Q and K heads
  for_each(
      "mpf::scratch_rope", rows * heads, KOKKOS_LAMBDA(int64_t i) {
        const int64_t n = i / heads;
        const int h = int(i % heads);
        const int64_t pos = pos0 + n % T;
        float* v = x.data() + n * W + int64_t(h) * hs;
        for (int k = 0; k < half; ++k) {
          const float c = cos_table(pos * half + k), s = sin_table(pos * half + k);
          const float a = v[k], b = v[k + half];
          if (kBackward) {
            v[k] = a * c + b * s;
            v[k + half] = b * c - a * s;
          } else {
            v[k] = a * c - b * s;
            v[k + half] = b * c + a * s;
          }
        }
      });
}
}  // namespace

void rope_forward(Tensor qkv, Tensor cos_table, Tensor sin_table, int64_t rows, int T, int pos0,
                  int NH, int KVH, int hs) {
  rotate<false>(qkv, cos_table, sin_table, rows, T, pos0, NH, KVH, hs);
}

void rope_backward(Tensor dqkv, Tensor cos_table, Tensor sin_table, int64_t rows, int T, int pos0,
                   int NH, int KVH, int hs) {
  rotate<true>(dqkv, cos_table, sin_table, rows, T, pos0, NH, KVH, hs);
}

void swiglu_forward(Tensor out, Tensor inp, int64_t N, int F) {
  for_each(
      "mpf::scratch_swiglu_forward", N * F, KOKKOS_LAMBDA(int64_t i) {
        const int64_t n = i / F, f = i % F;
        const float g = inp(n * 2 * F + f), u = inp(n * 2 * F + F + f);
        out(i) = g / (1.0f + expf(-g)) * u;
      });
}

void swiglu_backward_input(Tensor dinp, Tensor dout, Tensor inp, int64_t N, int F) {
  for_each(
      "mpf::scratch_swiglu_backward_input", N * F, KOKKOS_LAMBDA(int64_t i) {
        const int64_t n = i / F, f = i % F;
        const float g = inp(n * 2 * F + f), u = inp(n * 2 * F + F + f);
        const float sig = 1.0f / (1.0f + expf(-g));
        dinp(n * 2 * F + f) = dout(i) * u * sig * (1.0f + g * (1.0f - sig));
        dinp(n * 2 * F + F + f) = dout(i) * g * sig;
      });
}

void attention_forward(Tensor out, Tensor att, Tensor qkv, int B, int T, int NH, int KVH, int hs) {
  const int W = (NH + 2 * KVH) * hs, group = NH / KVH;
  const float scale = 1.0f / sqrtf(float(hs));
  for_each(
      "mpf::scratch_attention_forward", int64_t(B) * NH * T, KOKKOS_LAMBDA(int64_t i) {
        const int t = int(i % T), h = int((i / T) % NH);
        const int64_t b = i / (int64_t(T) * NH);
        const int g = h / group;
        const float* q = qkv.data() + (b * T + t) * W + h * hs;
        float* p = att.data() + ((b * NH + h) * T + t) * T;
        float mx = -1e30f;
        for (int u = 0; u <= t; ++u) {
          const float* k = qkv.data() + (b * T + u) * W + (NH + g) * hs;
          float s = 0;
          for (int d = 0; d < hs; ++d) s += q[d] * k[d];
          p[u] = s * scale;
          mx = p[u] > mx ? p[u] : mx;
        }
        float sum = 0;
        for (int u = 0; u <= t; ++u) {
          p[u] = expf(p[u] - mx);
          sum += p[u];
        }
        for (int u = 0; u < T; ++u) p[u] = u <= t ? p[u] / sum : 0.0f;
        float* o = out.data() + (b * T + t) * (NH * hs) + h * hs;
        for (int d = 0; d < hs; ++d) {
          float acc = 0;
          for (int u = 0; u <= t; ++u) acc += p[u] * qkv((b * T + u) * W + (NH + KVH + g) * hs + d);
          o[d] = acc;
        }
      });
}

void attention_backward_input(Tensor dqkv, Tensor datt, Tensor dout, Tensor qkv, Tensor att, int B,
                              int T, int NH, int KVH, int hs) {
  const int W = (NH + 2 * KVH) * hs, group = NH / KVH;
  const float scale = 1.0f / sqrtf(float(hs));
  // One thread per (sequence, kv head): the K and V gradients of a kv head gather from every
  // query head of its group and every later position.
  for_each(
      "mpf::scratch_attention_backward_input", int64_t(B) * KVH, KOKKOS_LAMBDA(int64_t i) {
        const int g = int(i % KVH);
        const int64_t b = i / KVH;
        for (int t = 0; t < T; ++t) {
          float* dk = dqkv.data() + (b * T + t) * W + (NH + g) * hs;
          float* dv = dqkv.data() + (b * T + t) * W + (NH + KVH + g) * hs;
          for (int d = 0; d < hs; ++d) dk[d] = dv[d] = 0.0f;
        }
        for (int h = g * group; h < (g + 1) * group; ++h) {
          for (int t = 0; t < T; ++t) {
            const float* p = att.data() + ((b * NH + h) * T + t) * T;
            float* dp = datt.data() + ((b * NH + h) * T + t) * T;
            const float* go = dout.data() + (b * T + t) * (NH * hs) + h * hs;
            float dot = 0;
            for (int u = 0; u <= t; ++u) {
              const float* v = qkv.data() + (b * T + u) * W + (NH + KVH + g) * hs;
              float s = 0;
              for (int d = 0; d < hs; ++d) s += go[d] * v[d];
              dp[u] = s;
              dot += p[u] * s;
            }
            const float* q = qkv.data() + (b * T + t) * W + h * hs;
            float* dq = dqkv.data() + (b * T + t) * W + h * hs;
            for (int d = 0; d < hs; ++d) dq[d] = 0.0f;
            for (int u = 0; u <= t; ++u) {
              const float ds = p[u] * (dp[u] - dot) * scale;
              const float* k = qkv.data() + (b * T + u) * W + (NH + g) * hs;
              float* dk = dqkv.data() + (b * T + u) * W + (NH + g) * hs;
              float* dv = dqkv.data() + (b * T + u) * W + (NH + KVH + g) * hs;
              for (int d = 0; d < hs; ++d) {
                dq[d] += ds * k[d];
                dk[d] += ds * q[d];
                dv[d] += p[u] * go[d];
              }
            }
          }
        }
      });
}

}  // namespace mpf

// The fused attention's rate (make bench, ci/bench_attention.sh): forward and backward of one
// layer's causal grouped-query attention at each T given, GFLOP/s as causal attention needs them
// (forward 4·B·NH·hs·T²/2, backward twice that; step_log.hpp's count), beside the unfused path
// it replaced (the (T × T) scores through the backend's batched GEMM) where that fits in memory
// and the chunked path (model/layers/chunked_attention.hpp: a chunk of queries at a time through
// the GEMM);
// then, on the CPU, the host shape's tile product against the backend's GEMM on the same
// 64 x 64 x hs tiles, one thread.
//
//   attention_rate [--batch B] [--heads NH] [--kv-heads KVH] [--head-size hs] [--precision P]
//                  [--reps N] [--chunk Tc] [--profile] [--gemm LIB] [--fused-only] [--cpu-clock]
//                  [--stored-scores-mb N] T...
//
// --cpu-clock times by the process's CPU time over the threads instead of the wall clock: on a
// machine other work shares, one thread's rate then counts only the time it ran.
// --stored-scores-mb sets how much dS the host backward keeps between its passes (0: none, the
// way before it kept any; set_attention_stored_scores).
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "backends/gemm.hpp"
#include "backends/tile_gemm.hpp"
#include "core/parallel.hpp"
#include "core/profile.hpp"
#include "core/types.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/chunked_attention.hpp"
#include "model/layers/matmul.hpp"
#include "perf/attention_inputs.hpp"
#include "unit/unfused_attention.hpp"

namespace {

bool g_cpu_clock = false;

double now_seconds() {
  if (g_cpu_clock) {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double(t.tv_sec) + 1e-9 * double(t.tv_nsec)) / mpf::host_thread_count();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double seconds_since(double t0) {
  Kokkos::fence();
  return now_seconds() - t0;
}

using mpf::perf::filled;
using mpf::perf::view;

// The median of `reps` timings of f (after one untimed call).
template <class F>
double median_seconds(int reps, const F& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now_seconds();
    f();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void tile_rates(int hs, int reps, bool bf16) {
  const int T = 64, hp = (hs + mpf::backend::kTileCols - 1) / mpf::backend::kTileCols *
                         mpf::backend::kTileCols;
  std::vector<float> q(size_t(T) * hp, 0.5f), kt(size_t(hp) * T, 0.25f), s(size_t(T) * T);
  std::vector<float> v(size_t(T) * hp, 0.5f), o(size_t(T) * hp);
  const int inner = 2000;
  const double flops = 4.0 * T * T * hs * inner;
  const double micro = median_seconds(reps, [&] {
    for (int i = 0; i < inner; ++i) {
      mpf::backend::tile_gemm(T, T, hs, q.data(), hp, 1, kt.data(), T, s.data(), T, false);
      mpf::backend::tile_gemm(T, hp, T, s.data(), T, 1, v.data(), hp, o.data(), hp, true);
    }
  });
  mpf::backend::set_num_threads(1);
  const double library = median_seconds(reps, [&] {
    for (int i = 0; i < inner; ++i) {
      mpf::backend::gemm(mpf::backend::Op::N, mpf::backend::Op::N, T, T, hs, 1.0f, q.data(), hp,
                         kt.data(), T, 0.0f, s.data(), T);
      mpf::backend::gemm(mpf::backend::Op::N, mpf::backend::Op::N, T, hs, T, 1.0f, s.data(), T,
                         v.data(), hp, 1.0f, o.data(), hp);
    }
  });
  std::printf(
      "tile products (64 x 64 x %d, one thread): micro-kernel %.1f GFLOP/s | %s %.1f GFLOP/s\n", hs,
      flops / micro / 1e9, mpf::backend::selected().c_str(), flops / library / 1e9);
  if (!bf16) return;
  // The bf16 kernel on the same tiles, P packed into pairs for its product as the forward does.
  using mpf::backend::Bf16Pair;
  const int kp = (hs + 1) / 2, hh = hp / 2;
  std::vector<Bf16Pair> qp(size_t(T) * hh), ktp(size_t(hh) * T), vp(size_t(T / 2) * hp),
      pp(size_t(T) * T / 2);
  mpf::backend::pack_bf16_pairs(qp.data(), hh, q.data(), hp, T, hs, T, hh);
  mpf::backend::pack_bf16_pairs_transposed(ktp.data(), T, q.data(), hp, T, hs, T, kp);
  mpf::backend::pack_bf16_column_pairs(vp.data(), hp, v.data(), hp, T, hs, T / 2, hp);
  const double paired = median_seconds(reps, [&] {
    for (int i = 0; i < inner; ++i) {
      mpf::backend::tile_gemm_bf16(T, T, kp, qp.data(), hh, 1, ktp.data(), T, s.data(), T, false);
      mpf::backend::pack_bf16_pairs(pp.data(), T / 2, s.data(), T, T, T, T, T / 2);
      mpf::backend::tile_gemm_bf16(T, hp, T / 2, pp.data(), T / 2, 1, vp.data(), hp, o.data(), hp,
                                   true);
    }
  });
  std::printf("bf16 tile products (%s kernel, P packed): %.1f GFLOP/s\n",
              mpf::backend::tile_bf16_kernel(), flops / paired / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  Kokkos::initialize(argc, argv);
  {
    mpf::perf::AttentionShape shape;
    int reps = 3, chunk = mpf::kChunkedAttentionRows;
    bool fused_only = false, profile = false;
    std::string gemm;
    std::vector<int> lengths;
    for (int i = 1; i < argc; ++i) {
      if (shape.take(argc, argv, i)) continue;
      const std::string a = argv[i];
      auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
      if (a == "--chunk")
        chunk = next();
      else if (a == "--gemm")
        gemm = i + 1 < argc ? argv[++i] : "";
      else if (a == "--profile")
        profile = true;
      else if (a == "--fused-only")
        fused_only = true;
      else if (a == "--cpu-clock")
        g_cpu_clock = true;
      else if (a == "--reps")
        reps = next();
      else if (a == "--stored-scores-mb")
        mpf::set_attention_stored_scores(int64_t(next()) << 20);
      else
        lengths.push_back(std::atoi(a.c_str()));
    }
    const int B = shape.B, NH = shape.NH, KVH = shape.KVH, hs = shape.hs;
    const bool bf16 = shape.bf16;
    if (lengths.empty()) lengths = {1024, 4096};
    if (!gemm.empty() && !mpf::backend::select(gemm)) {
      std::fprintf(stderr, "attention_rate: no GEMM library %s\n", gemm.c_str());
      return 2;
    }
    std::printf("attention | B %d | %d heads, %d kv heads, head size %d | %s | %d threads | %s\n",
                B, NH, KVH, hs, bf16 ? "bf16" : "fp32", mpf::host_thread_count(),
                mpf::kDeviceMemory ? "device shape (GPU)" : "host shape (CPU)");
    std::printf("%-7s %12s %12s %14s %14s %14s %14s\n", "T", "fused fwd", "fused bwd",
                "unfused fwd", "unfused bwd", "chunked fwd", "chunked bwd");
    for (const int T : lengths) {
      const int W = (NH + 2 * KVH) * hs, Cq = NH * hs;
      const int64_t rows = int64_t(B) * T;
      mpf::Slab qkv = filled("qkv", rows * W), dy = filled("dy", rows * Cq),
                out(std::string("out"), rows * Cq), lse("lse", int64_t(B) * NH * T),
                delta("delta", int64_t(B) * NH * T), dqkv("dqkv", rows * W);
      std::unique_ptr<mpf::Bf16Products> scope;
      if (bf16) scope = std::make_unique<mpf::Bf16Products>(nullptr, nullptr, 0, 1);
      const double flops = 4.0 * B * NH * hs * double(T) * T / 2.0;  // causal forward
      const double fwd = median_seconds(reps, [&] {
        mpf::attention_forward(view(out), view(lse), view(qkv), B, T, NH, KVH, hs);
      });
      const double bwd = median_seconds(reps, [&] {
        mpf::attention_backward_input(view(dqkv), view(delta), view(dy), view(qkv), view(out),
                                      view(lse), B, T, NH, KVH, hs);
      });
      // The chunked path (chunks of `chunk` queries), its forward and backward as the model calls
      // them on the packed qkv.
      const mpf::AttentionInputs x =
          mpf::packed_attention(view(qkv), B, NH, KVH, hs, mpf::PositionRuns::contiguous(T));
      mpf::profile::reset();
      mpf::profile::set_enabled(profile);
      const double cf = median_seconds(
          reps, [&] { mpf::chunked_attention_forward(view(out), view(lse), x, false, chunk); });
      const double cb = median_seconds(reps, [&] {
        mpf::attention_backward_delta(view(delta), view(out), view(dy), B, T, NH, hs);
        float* dq = dqkv.data();
        mpf::chunked_attention_backward(dq, W, false, dq + Cq, dq + Cq + KVH * hs, W, false,
                                        view(dy), view(lse), view(delta), x, chunk);
      });
      mpf::profile::set_enabled(false);
      for (const mpf::profile::Entry& e : mpf::profile::entries()) {
        std::printf("  chunked %-44s %6lld calls %9.1f ms\n", e.label.c_str(), (long long)e.calls,
                    e.seconds * 1e3);
      }
      char unfused[2][32] = {"-", "-"};
      // The unfused path keeps two (B, NH, T, T) matrices: measured while they take under 4 GB.
      if (!fused_only && 2.0 * B * NH * double(T) * T * 4 < 4e9) {
        mpf::Slab att("att", int64_t(B) * NH * T * T), datt("datt", int64_t(B) * NH * T * T);
        const double uf = median_seconds(reps, [&] {
          mpf::test::unfused_attention_forward(view(out), view(att), view(qkv), B, T, NH, KVH, hs);
        });
        const double ub = median_seconds(reps, [&] {
          mpf::test::unfused_attention_backward_input(view(dqkv), view(datt), view(dy), view(qkv),
                                                      view(att), B, T, NH, KVH, hs);
        });
        std::snprintf(unfused[0], sizeof unfused[0], "%.1f", flops / uf / 1e9);
        std::snprintf(unfused[1], sizeof unfused[1], "%.1f", 2 * flops / ub / 1e9);
      }
      std::printf(
          "%-7d %12.1f %12.1f %14s %14s %14.1f %14.1f   GFLOP/s (causal count); fused %.1f + %.1f "
          "ms, chunked (Tc %d) %.1f + %.1f ms\n",
          T, flops / fwd / 1e9, 2 * flops / bwd / 1e9, unfused[0], unfused[1], flops / cf / 1e9,
          2 * flops / cb / 1e9, fwd * 1e3, bwd * 1e3, chunk, cf * 1e3, cb * 1e3);
    }
    if (!mpf::kDeviceMemory) tile_rates(hs, reps, bf16);
  }
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}

#include "plan/calibrate.hpp"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "backends/device.hpp"
#include "backends/gemm.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/stopwatch.hpp"
#include "core/types.hpp"
#include "layout/memory_plan.hpp"
#include "layout/peak.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/gelu.hpp"

namespace mpf::plan {

namespace {

using backend::Op;

// The slowest rank's time of `work` (seconds), the median of `reps` after one untimed run: every
// rank runs it at once, as a run's ranks share the node, and a run meets the typical time, not the
// luckiest.
template <class F>
double timed(MPI_Comm world, int reps, F&& work) {
  work();
  Kokkos::fence();
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(world);
    Stopwatch clock;
    work();
    Kokkos::fence();
    double t = clock.seconds();
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, world);
    times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// GEMM rates at training shapes, per device: M rows against the (N, K) of a block's products,
// and of a vocabulary's logits (the LM head, often the largest product of a small model), each in
// the three operand forms a forward and backward use.
std::vector<RatePoint> gemm_rates(MPI_Comm world, Precision p, double devices, bool quick) {
  struct Shape {
    int M, N, K;
  };
  std::vector<Shape> shapes;
  for (int M : quick ? std::vector<int>{64, 512} : std::vector<int>{16, 64, 256, 1024, 4096}) {
    shapes.push_back({M, 768, 768});
    if (quick) continue;
    shapes.push_back({M, 3072, 768});
    shapes.push_back({M, 768, 3072});
  }
  if (!quick) {
    for (int M : {256, 1024}) shapes.push_back({M, 32768, 768});
  }
  int64_t most = 0;  // each operand at its largest
  for (const Shape& q : shapes) {
    most = std::max({most, int64_t(q.M) * q.N, int64_t(q.M) * q.K, int64_t(q.N) * q.K});
  }
  Slab a("calibrate::a", most), b("calibrate::b", most), c("calibrate::c", most);
  Kokkos::deep_copy(a, 0.01f);
  Kokkos::deep_copy(b, 0.02f);
  Kokkos::View<bf16*, MemSpace> a16("calibrate::a16", most), b16("calibrate::b16", most);
  std::vector<RatePoint> pts;
  for (const Shape& q : shapes) {
    const int M = q.M, N = q.N, K = q.K;
    const double flops = 2.0 * M * N * K;
    double seconds = 0;
    for (int form = 0; form < 3; ++form) {  // C = A B^T (forward), A B (dX), A^T B (dW)
      const bool bf = p == Precision::bf16;
      auto run = [&] {
        if (form == 0) {
          if (bf)
            backend::gemm_bf16(Op::N, Op::T, M, N, K, 1, a16.data(), K, b16.data(), K, 0, c.data(),
                               N);
          else
            backend::gemm(Op::N, Op::T, M, N, K, 1, a.data(), K, b.data(), K, 0, c.data(), N);
        } else if (form == 1) {
          if (bf)
            backend::gemm_bf16(Op::N, Op::N, M, N, K, 1, a16.data(), K, b16.data(), N, 0, c.data(),
                               N);
          else
            backend::gemm(Op::N, Op::N, M, N, K, 1, a.data(), K, b.data(), N, 0, c.data(), N);
        } else {  // the weight gradient: (N x K) = (M x N)^T (M x K), summed over the rows
          if (bf)
            backend::gemm_bf16(Op::T, Op::N, N, K, M, 1, a16.data(), N, b16.data(), K, 0, c.data(),
                               K);
          else
            backend::gemm(Op::T, Op::N, N, K, M, 1, a.data(), N, b.data(), K, 0, c.data(), K);
        }
      };
      seconds += timed(world, quick ? 1 : 5, run);
    }
    pts.push_back({flops / devices / 1e9, 3 * flops / seconds / devices / 1e9});
  }
  // One point per size, ascending (equal sizes averaged).
  std::sort(pts.begin(), pts.end(),
            [](const RatePoint& x, const RatePoint& y) { return x.gflop < y.gflop; });
  std::vector<RatePoint> out;
  for (const RatePoint& q : pts) {
    if (!out.empty() && q.gflop <= out.back().gflop * 1.0001) {
      out.back().gflops = 0.5 * (out.back().gflops + q.gflops);
    } else {
      out.push_back(q);
    }
  }
  return out;
}

// The fused attention of GPT-2 124M's heads (12 x 64) over one sequence of each length.
std::vector<AttentionRate> attention_rates(MPI_Comm world, double devices, bool quick) {
  const int NH = 12, hs = 64;
  std::vector<AttentionRate> out;
  for (int T : quick ? std::vector<int>{128} : std::vector<int>{128, 512, 2048}) {
    const int64_t width = int64_t(3) * NH * hs;
    Slab qkv("calibrate::qkv", T * width), o("calibrate::out", int64_t(T) * NH * hs),
        lse("calibrate::lse", int64_t(NH) * T), dqkv("calibrate::dqkv", T * width),
        delta("calibrate::delta", int64_t(NH) * T), dout("calibrate::dout", int64_t(T) * NH * hs);
    Kokkos::deep_copy(qkv, 0.01f);
    Kokkos::deep_copy(dout, 0.01f);
    const double flops = 4.0 * T * (T / 2.0) * hs * NH;
    const double f = timed(world, quick ? 1 : 5, [&] {
      attention_forward(Tensor(o.data(), o.size()), Tensor(lse.data(), lse.size()),
                        Tensor(qkv.data(), qkv.size()), 1, T, NH, NH, hs);
    });
    const double b = timed(world, quick ? 1 : 5, [&] {
      attention_backward_input(Tensor(dqkv.data(), dqkv.size()), Tensor(delta.data(), delta.size()),
                               Tensor(dout.data(), dout.size()), Tensor(qkv.data(), qkv.size()),
                               Tensor(o.data(), o.size()), Tensor(lse.data(), lse.size()), 1, T, NH,
                               NH, hs);
    });
    out.push_back({T, flops / f / devices / 1e9, 2 * flops / b / devices / 1e9});
  }
  return out;
}

// Element-wise bandwidth (GELU forward and backward over 64 MB: 2 and 3 floats a element) and a
// kernel launch's overhead (the same on one element), per device.
void elementwise(MPI_Comm world, double devices, bool quick, Machine& m) {
  const int64_t n = quick ? (int64_t(1) << 20) : (int64_t(1) << 24);
  Slab x("calibrate::x", n), y("calibrate::y", n);
  Kokkos::deep_copy(x, 0.5f);
  Kokkos::deep_copy(y, 0.5f);
  Tensor tx(x.data(), n), ty(y.data(), n);
  const double f = timed(world, 3, [&] { gelu_forward(ty, tx, n); });
  const double b = timed(world, 3, [&] { gelu_backward_input(ty, ty, tx, n); });
  m.memory_bandwidth_gbs = (5.0 * 4 * n) / (f + b) / devices / 1e9;
  const int launches = 200;
  const double t = timed(world, 3, [&] {
    for (int i = 0; i < launches; ++i) gelu_forward(ty, tx, 1);
  });
  m.kernel_overhead_us = t / launches * 1e6;
}

// Ping-pong between world rank 0 and `peer`: one-way latency (8 bytes) and bandwidth (4 MB).
Link ping_pong(MPI_Comm world, int peer, bool quick) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  std::vector<char> buf(size_t(4) << 20);
  Link link;
  for (int big = 0; big < 2; ++big) {
    const int bytes = big ? int(buf.size()) : 8, reps = big ? (quick ? 3 : 10) : (quick ? 20 : 200);
    MPI_Barrier(world);
    // The median round trip, as timed() takes (the sum over the repetitions let one rank's
    // descheduling make the latency exceed the large message's time, and the bandwidth past any
    // link's).
    std::vector<double> trips;
    for (int r = 0; r < reps; ++r) {
      Stopwatch clock;
      if (rank == 0) {
        MPI_Send(buf.data(), bytes, MPI_CHAR, peer, 0, world);
        MPI_Recv(buf.data(), bytes, MPI_CHAR, peer, 0, world, MPI_STATUS_IGNORE);
      } else if (rank == peer) {
        MPI_Recv(buf.data(), bytes, MPI_CHAR, 0, 0, world, MPI_STATUS_IGNORE);
        MPI_Send(buf.data(), bytes, MPI_CHAR, 0, 0, world);
      }
      trips.push_back(clock.seconds());
    }
    std::sort(trips.begin(), trips.end());
    double one_way = trips[trips.size() / 2] / 2;
    MPI_Bcast(&one_way, 1, MPI_DOUBLE, 0, world);
    if (big) {
      // The latency's share of the large message at most half its time, whatever noise is left.
      const double moving = std::max(one_way - link.latency_us / 1e6, one_way / 2);
      link.bandwidth_gbs = bytes / std::max(1e-9, moving) / 1e9;
    } else {
      link.latency_us = one_way * 1e6;
    }
  }
  return link;
}

// Every collective over groups of g consecutive ranks, every group at once, by size.
void collectives(MPI_Comm world, const std::vector<int>& node_of, bool quick, Machine& m) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  const std::vector<double> sizes =
      quick ? std::vector<double>{8, 1 << 20} : std::vector<double>{8, 1 << 16, 1 << 20, 1 << 24};
  for (int g = 2; g <= size; ++g) {
    if (size % g != 0) continue;
    MPI_Comm group;
    MPI_Comm_split(world, rank / g, rank, &group);
    std::vector<int> nodes(node_of.begin() + (rank / g) * g, node_of.begin() + (rank / g + 1) * g);
    std::sort(nodes.begin(), nodes.end());
    const int span = int(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
    for (double bytes : sizes) {
      const int n = std::max(1, int(bytes / sizeof(float)));
      const int each = std::max(1, n / g);
      std::vector<float> in(size_t(each) * g, 1.0f), out(size_t(each) * g);
      const int reps = quick ? 2 : (bytes > 1e6 ? 3 : 20);
      auto per_call = [&](auto&& call) {
        const double t = timed(world, 3, [&] {
          for (int r = 0; r < reps; ++r) call();
        });
        return t / reps * 1e6;
      };
      const double ar = per_call(
          [&] { MPI_Allreduce(in.data(), out.data(), each * g, MPI_FLOAT, MPI_SUM, group); });
      const double ag = per_call(
          [&] { MPI_Allgather(in.data(), each, MPI_FLOAT, out.data(), each, MPI_FLOAT, group); });
      const double aa = per_call(
          [&] { MPI_Alltoall(in.data(), each, MPI_FLOAT, out.data(), each, MPI_FLOAT, group); });
      const double b = double(each) * g * sizeof(float);
      m.collectives.push_back({"allreduce", g, span, b, ar});
      m.collectives.push_back({"allgather", g, span, b, ag});
      m.collectives.push_back({"alltoall", g, span, b, aa});
    }
    MPI_Comm_free(&group);
  }
}

// A synchronisation between busy ranks, as a step's TP collectives and P2P waits are: pairs of
// consecutive ranks each compute a product of a few milliseconds, then all-reduce 8 bytes. The
// time in the all-reduce beyond the same call between idle ranks is the wait for a partner that
// is not running: about 0 when every rank has its cores, a scheduler's time slice when a node's
// busy ranks outnumber its cores. Microseconds, the mean over the ranks.
double loaded_sync_us(MPI_Comm world, bool quick) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  if (size < 2) return 0.0;
  MPI_Comm pair;
  MPI_Comm_split(world, rank / 2, rank, &pair);
  const int M = 256, N = 768, K = 768, reps = quick ? 5 : 40;
  Slab a("calibrate::sync_a", int64_t(M) * K), b("calibrate::sync_b", int64_t(N) * K),
      c("calibrate::sync_c", int64_t(M) * N);
  // Idle: the quickest call (the partner running); busy: the mean after the product.
  double x = 1.0, idle = 1e30, busy = 0.0;
  for (int loaded = 0; loaded < 2; ++loaded) {
    MPI_Barrier(world);
    for (int r = 0; r < reps; ++r) {
      if (loaded) {
        backend::gemm(Op::N, Op::T, M, N, K, 1, a.data(), K, b.data(), K, 0, c.data(), N);
        Kokkos::fence();
      }
      Stopwatch clock;
      MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, pair);
      const double us = clock.seconds() * 1e6;
      if (loaded)
        busy += us / reps;
      else
        idle = std::min(idle, us);
    }
  }
  MPI_Comm_free(&pair);
  double extra = std::max(0.0, busy - idle);
  MPI_Allreduce(MPI_IN_PLACE, &extra, 1, MPI_DOUBLE, MPI_SUM, world);
  return extra / size;
}

}  // namespace

Machine calibrate(const CalibrationOptions& o, MPI_Comm world) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  // The node of every rank: the lowest world rank sharing its memory.
  MPI_Comm node;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int leader = rank, local = 0;
  MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  std::vector<int> node_of(size);
  MPI_Allgather(&leader, 1, MPI_INT, node_of.data(), 1, MPI_INT, world);
  int most_local = local;
  MPI_Allreduce(MPI_IN_PLACE, &most_local, 1, MPI_INT, MPI_MAX, world);

  Machine m;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  m.name = o.name.empty() ? std::string(host) : o.name;
  m.source = "calibrated";
  m.kind = kDeviceMemory ? "gpu" : "cpu";
  const double devices = kDeviceMemory ? 1.0 : double(o.threads);
  m.devices_per_node = kDeviceMemory ? most_local : most_local * o.threads;

  // What a rank holds before its model, measured as a run measures it: after MPI, Kokkos and the
  // start-up's GEMM peak (whose products make the libraries' buffers), before anything else.
  measure_peak(Precision::fp32);
  double process = double(resident_bytes());
  MPI_Allreduce(MPI_IN_PLACE, &process, 1, MPI_DOUBLE, MPI_MAX, world);
  m.process_mb = process / 1e6;

  for (Precision p : {Precision::fp32, Precision::bf16}) {
    if (p == Precision::bf16 && !backend::kernels().bf16_missing.empty()) continue;
    PrecisionRates r;
    r.gemm = gemm_rates(world, p, devices, o.quick);
    for (const RatePoint& q : r.gemm) r.peak_gflops = std::max(r.peak_gflops, q.gflops);
    if (p == Precision::fp32) {
      r.attention = attention_rates(world, devices, o.quick);
    } else {  // the kernel rounds its operands but computes in fp32 on a CPU
      r.attention = m.precisions.at(Precision::fp32).attention;
    }
    m.precisions[p] = r;
  }
  elementwise(world, devices, o.quick, m);
  // Memory: the node's (its MemAvailable and what its ranks hold now), or a GPU's.
  double mem = kDeviceMemory ? backend::current_device_memory()
                             : double(available_bytes()) + process * local;
  MPI_Allreduce(MPI_IN_PLACE, &mem, 1, MPI_DOUBLE, MPI_MIN, world);
  m.memory_gb = mem / 1e9;

  // Links: rank 0 to the next rank on its node, and to the first rank on another node.
  int same = -1, other = -1;
  for (int r = 1; r < size; ++r) {
    if (node_of[r] == node_of[0] && same < 0) same = r;
    if (node_of[r] != node_of[0] && other < 0) other = r;
  }
  if (same > 0) m.intra_node = ping_pong(world, same, o.quick);
  if (other > 0) m.inter_node = ping_pong(world, other, o.quick);
  // Unmeasured links (one rank a node, or one node): the other's figures, or memory's.
  if (same < 0)
    m.intra_node = other > 0 ? m.inter_node : Link{m.memory_bandwidth_gbs * devices, 1.0};
  if (other < 0) m.inter_node = m.intra_node;
  collectives(world, node_of, o.quick, m);
  m.message_overhead_us = loaded_sync_us(world, o.quick);
  return m;
}

}  // namespace mpf::plan

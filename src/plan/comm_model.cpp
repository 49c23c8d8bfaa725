#include "plan/comm_model.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mpf::plan {

namespace {

const Link& link_of(const Machine& m, Group g) {
  return g.nodes > 1 ? m.inter_node : m.intra_node;
}

// One message of `bytes` over the link: its latency and the bytes at its bandwidth.
double message_us(const Link& l, double bytes) {
  return l.latency_us + bytes / (l.bandwidth_gbs * 1e3);
}

// The measured time of `op` over groups like g, interpolated (log-log) at `bytes`; < 0 if the
// machine file has no row for it.
double measured_us(const Machine& m, const char* op, double bytes, Group g) {
  std::vector<const CollectiveTime*> rows;
  for (const CollectiveTime& c : m.collectives) {
    if (c.op == op && c.ranks == g.ranks && c.nodes == g.nodes) rows.push_back(&c);
  }
  if (rows.empty()) return -1;
  std::sort(rows.begin(), rows.end(),
            [](const CollectiveTime* a, const CollectiveTime* b) { return a->bytes < b->bytes; });
  if (bytes <= rows.front()->bytes) return rows.front()->us;
  if (bytes >= rows.back()->bytes) {
    // Past the largest size measured: its rate.
    return rows.back()->us * bytes / rows.back()->bytes;
  }
  for (size_t i = 1; i < rows.size(); ++i) {
    if (bytes > rows[i]->bytes) continue;
    const CollectiveTime &a = *rows[i - 1], &b = *rows[i];
    const double t = std::log(bytes / a.bytes) / std::log(b.bytes / a.bytes);
    return std::exp(std::log(a.us) + t * (std::log(b.us) - std::log(a.us)));
  }
  return rows.back()->us;
}

}  // namespace

// Each call adds the machine's per-message overhead once: the software's, and the wait for a
// partner that is not running when a node has more busy ranks than cores.
double p2p_ms(const Machine& m, double bytes, bool across_nodes) {
  return (m.message_overhead_us + message_us(across_nodes ? m.inter_node : m.intra_node, bytes)) /
         1e3;
}

double allreduce_ms(const Machine& m, double bytes, Group g) {
  if (g.ranks <= 1 || bytes <= 0) return 0;
  const double measured = measured_us(m, "allreduce", bytes, g);
  if (measured >= 0) return (m.message_overhead_us + measured) / 1e3;
  const int n = g.ranks;  // ring: reduce-scatter then all-gather, 2 (n - 1) steps of bytes / n
  return (m.message_overhead_us + 2.0 * (n - 1) * message_us(link_of(m, g), bytes / n)) / 1e3;
}

double allgather_ms(const Machine& m, double bytes, Group g) {
  if (g.ranks <= 1 || bytes <= 0) return 0;
  const double measured = measured_us(m, "allgather", bytes, g);
  if (measured >= 0) return (m.message_overhead_us + measured) / 1e3;
  const int n = g.ranks;
  return (m.message_overhead_us + double(n - 1) * message_us(link_of(m, g), bytes / n)) / 1e3;
}

double reduce_scatter_ms(const Machine& m, double bytes, Group g) {
  // The same traffic as an all-gather of the same size; measured, half an all-reduce.
  if (g.ranks <= 1 || bytes <= 0) return 0;
  const double measured = measured_us(m, "allreduce", bytes, g);
  if (measured >= 0) return (m.message_overhead_us + measured / 2) / 1e3;
  return allgather_ms(m, bytes, g);
}

double broadcast_ms(const Machine& m, double bytes, Group g) {
  if (g.ranks <= 1 || bytes <= 0) return 0;
  return 2 * allgather_ms(m, bytes, g) - m.message_overhead_us / 1e3;  // the overhead once
}

double host_allreduce_ms(const Machine& m, double bytes, Group g) {
  if (g.ranks <= 1 || bytes <= 0) return 0;
  const int n = g.ranks;
  const Link& ring = g.nodes > 1 ? m.inter_node : m.host_link;
  return (m.message_overhead_us + 2.0 * (n - 1) * message_us(ring, bytes / n) +
          2 * message_us(m.host_link, bytes)) /
         1e3;
}

double host_reduce_scatter_ms(const Machine& m, double bytes, Group g) {
  if (g.ranks <= 1 || bytes <= 0) return 0;
  const int n = g.ranks;
  const Link& ring = g.nodes > 1 ? m.inter_node : m.host_link;
  return (m.message_overhead_us + double(n - 1) * message_us(ring, bytes / n) +
          message_us(m.host_link, bytes) + message_us(m.host_link, bytes / n)) /
         1e3;
}

double alltoall_ms(const Machine& m, double bytes, Group g) {
  if (g.ranks <= 1 || bytes <= 0) return 0;
  const double measured = measured_us(m, "alltoall", bytes, g);
  if (measured >= 0) return (m.message_overhead_us + measured) / 1e3;
  const int n = g.ranks;  // n - 1 exchanges of bytes / n each
  return (m.message_overhead_us + double(n - 1) * message_us(link_of(m, g), bytes / n)) / 1e3;
}

}  // namespace mpf::plan
